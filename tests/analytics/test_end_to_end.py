"""Archive rows -> Parquet -> Spark jobs (spark-submit, local[2]) -> summary tables -> pages and API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from console.analytics import services
from console.analytics.models import (
    DuplicateGroup,
    FailureOverview,
    FailureReason,
    PipelineRun,
    ReplayCandidates,
    RetryHistogram,
    TimeToDlq,
)
from console.archive.models import DeadLetter
from console.audit.models import AuditEntry


@pytest.fixture
def spark_env(export_path, monkeypatch, settings):
    settings.ANALYTICS_SPARK_MASTER = "local[2]"
    settings.ANALYTICS_SPARK_DRIVER_MEMORY = "768m"
    settings.ANALYTICS_BUSINESS_KEY = "order_id"
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    return export_path


@pytest.fixture
def archive(make_cluster, letters_on):
    """Two subscriptions over two days, with states, retries, failure times, duplicates."""
    cluster = make_cluster(name="prod")
    orders = [
        letters_on(
            cluster,
            "2026-11-19 10:00",
            1,
            retry_count=16,
            properties={
                "exception_class": "OrderNotFound",
                "error_message": f"order {n} not found",
                "order_id": f"A-{n}",
            },
        )[0]
        for n in (7, 1234, 7)
    ]
    hostile = letters_on(
        cluster,
        "2026-11-19 11:00",
        1,
        retry_count=16,
        properties={"error_message": "<script>alert(1)</script> bad payload"},
    )[0]
    billing = letters_on(
        cluster,
        "2026-11-20 09:00",
        2,
        subscription="billing-sub",
        source="billing",
        retry_count=3,
        properties={"error": "TimeoutException: no reply within 3000 ms"},
    )
    DeadLetter.objects.filter(pk=orders[0].pk).update(state="replayed")
    DeadLetter.objects.filter(pk=orders[1].pk).update(state="failed")
    # The same origin message dead-lettered twice in billing-sub.
    DeadLetter.objects.filter(pk=billing[1].pk).update(origin_message_id=billing[0].origin_message_id)
    start = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    for letter, seconds in zip(billing, (40, 100), strict=True):
        DeadLetter.objects.filter(pk=letter.pk).update(
            first_failure_at=start, last_failure_at=start + timedelta(seconds=seconds)
        )
    return {"cluster": cluster, "orders": orders, "hostile": hostile, "billing": billing}


@pytest.mark.timeout(900)
def test_operator_runs_the_pipeline_and_the_dashboard_shows_its_results(
    spark_env, archive, operator, viewer, client, django_capture_on_commit_callbacks
):
    client.force_login(operator)
    with django_capture_on_commit_callbacks() as queued:
        response = client.post("/analytics/runs/")
    assert response.status_code == 302
    run = PipelineRun.objects.get()
    assert (run.status, run.trigger, run.requested_by_name, len(queued)) == (
        "queued",
        "on_demand",
        operator.username,
        1,
    )
    assert AuditEntry.objects.filter(action="analytics.run", actor=operator).count() == 1

    # What the worker does with the queued task.
    run = services.pipeline_run_execute(run_id=run.pk)

    assert run.status == "succeeded", run.error
    assert run.input_rows == 6 and run.duration_seconds > 0
    overview = {(o.subscription, o.day.isoformat()): o for o in FailureOverview.objects.all()}
    assert set(overview) == {("orders-sub", "2026-11-19"), ("billing-sub", "2026-11-20")}
    orders = overview[("orders-sub", "2026-11-19")]
    assert (orders.dead_letters, orders.replayed, orders.replay_failed, orders.parked) == (4, 1, 1, 2)
    assert orders.replay_success_rate == 0.5
    assert {(h.subscription, h.retry_count): h.letters for h in RetryHistogram.objects.all()} == {
        ("orders-sub", 16): 4,
        ("billing-sub", 3): 2,
    }
    (ttd,) = TimeToDlq.objects.all()
    assert (ttd.subscription, ttd.letters, ttd.p50, ttd.p90, ttd.p99) == ("billing-sub", 2, 40, 100, 100)
    reasons = {(r.error_class, r.error_pattern): r for r in FailureReason.objects.all()}
    assert reasons[("OrderNotFound", "order <n> not found")].letters == 3
    assert reasons[("OrderNotFound", "order <n> not found")].example_letter_id == archive["orders"][0].pk
    assert reasons[("TimeoutException", "TimeoutException: no reply within <n> ms")].letters == 2
    duplicates = {(d.kind, d.key): d.letter_ids for d in DuplicateGroup.objects.all()}
    assert duplicates == {
        ("origin_message_id", archive["billing"][0].origin_message_id): [b.pk for b in archive["billing"]],
        ("business_key", "A-7"): [archive["orders"][0].pk, archive["orders"][2].pk],
    }
    # The default nightly policy: parked letters with a transient (timeout...) error.
    assert ReplayCandidates.objects.get().letter_ids == [b.pk for b in archive["billing"]]

    client.force_login(viewer)
    page = client.get("/analytics/").content.decode()
    assert f"Run {run.pk}" in page and "succeeded" in page
    assert "order &lt;n&gt; not found" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; bad payload" in page and "<script>alert" not in page
    assert page.count('<rect class="bar"') == 2  # retries 3 and 16
    assert page.count("<polyline") == 2  # one line per subscription
    assert "Run the pipeline now" not in page  # viewers do not run it
    one = client.get("/analytics/", {"retries": f"{archive['cluster'].pk}:billing-sub"}).content.decode()
    assert one.count('<rect class="bar"') == 1 and "3 retries" in one


def test_viewers_cannot_start_a_run_and_a_second_run_waits_for_the_first(
    export_path, operator, viewer, client, django_capture_on_commit_callbacks
):
    client.force_login(viewer)
    assert client.post("/analytics/runs/").status_code == 403
    assert not PipelineRun.objects.exists()

    client.force_login(operator)
    with django_capture_on_commit_callbacks():
        client.post("/analytics/runs/")
        response = client.post("/analytics/runs/", follow=True)
    assert PipelineRun.objects.count() == 1
    assert "already queued or running" in response.content.decode()


def test_command_line_run_reports_a_failure_clearly(spark_env, settings, make_cluster, letters_on):
    letters_on(make_cluster(), "2026-11-19 10:00", 1)
    settings.ANALYTICS_SPARK_MASTER = "no-such-master"  # Spark cannot parse it
    settings.ANALYTICS_RUN_TIMEOUT_SECONDS = 120

    with pytest.raises(Exception, match="failed"):
        call_command("analytics_run")

    run = PipelineRun.objects.get()
    assert run.status == "failed" and "spark-submit" in run.error
    # The export still happened: the archive is in Parquet for the next try.
    assert run.exported_rows == 1


def test_nightly_schedule_is_installed_and_enabled(db):
    from django_celery_beat.models import PeriodicTask

    from console.celery import app

    task = PeriodicTask.objects.get(task="analytics.nightly")
    assert task.enabled and (task.crontab.hour, task.crontab.minute) == ("2", "30")
    app.loader.import_default_modules()
    assert {"analytics.nightly", "analytics.export", "analytics.run_execute"} <= set(app.tasks)
