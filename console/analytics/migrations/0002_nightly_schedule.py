"""The nightly pipeline run as a django-celery-beat schedule, enabled by default.

Admins change its time or disable it on the schedules admin like any other beat
task; this migration only creates it when missing.
"""

from django.db import migrations

TASK_NAME = "analytics: nightly pipeline"


def create_schedule(apps, schema_editor):
    from console.analytics.conf import nightly_crontab

    CrontabSchedule = apps.get_model("django_celery_beat", "CrontabSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    if PeriodicTask.objects.filter(name=TASK_NAME).exists():
        return
    minute, hour = nightly_crontab()
    crontab, _ = CrontabSchedule.objects.get_or_create(
        minute=minute, hour=hour, day_of_week="*", day_of_month="*", month_of_year="*", timezone="UTC"
    )
    PeriodicTask.objects.create(
        name=TASK_NAME,
        task="analytics.nightly",
        crontab=crontab,
        enabled=True,
        description="Export the archive, run the Spark jobs, load the dashboard.",
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK_NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("analytics", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_schedule, remove_schedule)]
