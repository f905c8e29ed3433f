"""Beat entries the replay engine always needs: recovering stalled jobs every minute,
purging old discarded letters daily, and auto-collect for clusters that exist already."""

import json

from django.db import migrations


def create_entries(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    CrontabSchedule = apps.get_model("django_celery_beat", "CrontabSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    Cluster = apps.get_model("clusters", "Cluster")

    minute, _ = IntervalSchedule.objects.get_or_create(every=60, period="seconds")
    PeriodicTask.objects.get_or_create(
        name="replay-recover-stalled-jobs",
        defaults={"task": "console.replay.tasks.replay_jobs_recover", "interval": minute,
                  "description": "Queue again replay jobs whose worker died"})
    nightly, _ = CrontabSchedule.objects.get_or_create(
        minute="30", hour="3", day_of_month="*", month_of_year="*", day_of_week="*", timezone="UTC")
    PeriodicTask.objects.get_or_create(
        name="archive-retention-purge",
        defaults={"task": "console.replay.tasks.retention_purge", "crontab": nightly,
                  "description": "Delete discarded dead letters older than the retention period"})
    for cluster in Cluster.objects.all():
        if not cluster.collect_interval_seconds:
            continue
        every, _ = IntervalSchedule.objects.get_or_create(every=cluster.collect_interval_seconds,
                                                          period="seconds")
        PeriodicTask.objects.get_or_create(
            name=f"archive-collect-cluster-{cluster.pk}",
            defaults={"task": "console.replay.tasks.archive_collect_cluster", "interval": every,
                      "args": json.dumps([cluster.pk]),
                      "description": f"Collect the DLQs of {cluster.name} into the archive"})


def remove_entries(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name__in=["replay-recover-stalled-jobs", "archive-retention-purge"]).delete()
    PeriodicTask.objects.filter(name__startswith="archive-collect-cluster-").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("replay", "0001_initial"),
        ("clusters", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_entries, remove_entries)]
