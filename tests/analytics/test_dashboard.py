from __future__ import annotations

import pytest

from console.analytics import charts
from console.analytics.models import FailureOverview, PipelineRun, RetryHistogram


@pytest.fixture
def loaded(db):
    run = PipelineRun.objects.create(trigger="nightly", status="succeeded", master="local[2]")
    for day, n in (("2026-11-19", 3), ("2026-11-21", 5)):
        FailureOverview.objects.create(
            run=run,
            cluster_id=1,
            cluster_name="prod",
            subscription="orders-sub",
            source="orders",
            day=day,
            dead_letters=n,
            replayed=0,
            discarded=0,
            parked=n,
            replay_failed=0,
            replaying=0,
            replay_success_rate=None,
        )
    for sub, retries, n in (("orders-sub", 16, 8), ("billing-sub", 2, 4)):
        RetryHistogram.objects.create(
            run=run, cluster_id=1, cluster_name="prod", subscription=sub, retry_count=retries, letters=n
        )
    return run


def test_dashboard_before_any_run_says_so(viewer, client_as):
    page = client_as(viewer).get("/analytics/").content.decode()

    assert "No run yet" in page and "No results yet" in page


def test_users_without_a_role_cannot_see_the_dashboard(make_user, client):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_user("nobody", password="x" * 20))

    assert client.get("/analytics/").status_code == 403


def test_days_without_letters_count_zero_on_the_chart(loaded, viewer, client_as):
    page = client_as(viewer).get("/analytics/").content.decode()

    # Three days (19, 20, 21): one dot per day, the 20th at zero.
    assert page.count("<circle") == 3 and "prod / orders-sub, 2026-11-20: 0" in page


def test_retry_histogram_for_one_subscription_is_an_htmx_partial_and_a_plain_link(loaded, viewer, client_as):
    client = client_as(viewer)

    partial = client.get("/analytics/", {"retries": "1:billing-sub"}, HTTP_HX_REQUEST="true").content.decode()
    full = client.get("/analytics/", {"retries": "1:billing-sub"}).content.decode()
    unknown = client.get("/analytics/", {"retries": "99:<b>nope</b>"}).content.decode()

    assert partial.lstrip().startswith('<section class="card" id="retries">') and "<html" not in partial
    assert partial.count('<rect class="bar"') == 1 and "4 letters after 2 retries" in partial
    assert "<html" in full and full.count('<rect class="bar"') == 1
    # An unknown subscription shows all of them, and nothing of the value is echoed raw.
    assert unknown.count('<rect class="bar"') == 2 and "<b>nope</b>" not in unknown


def test_run_status_panel_polls_only_while_a_run_is_active(viewer, client_as, db):
    client = client_as(viewer)
    run = PipelineRun.objects.create(trigger="on_demand", status="running", master="local[2]")

    active = client.get("/analytics/runs/status/").content.decode()
    PipelineRun.objects.filter(pk=run.pk).update(status="failed", error="spark-submit exited with status 1")
    done = client.get("/analytics/runs/status/").content.decode()

    assert 'hx-trigger="every 5s"' in active and "Running" in active.title()
    assert "hx-trigger" not in done and "spark-submit exited with status 1" in done


def test_chart_axes_use_round_numbers_and_bars_fit_the_plot():
    assert [charts._nice_max(v) for v in (0, 1, 3, 7, 10, 11, 480, 5001)] == [1, 1, 5, 10, 10, 20, 500, 10000]
    chart = charts.bar_chart([(0, 5), (16, 10)])

    assert [tick["label"] for tick in chart.y_ticks] == ["0", "2", "4", "6", "8", "10"]
    assert [charts._ticks(top) for top in (1, 2, 5, 20, 500)] == [
        [0, 1],
        [0, 1, 2],
        [0, 1, 2, 3, 4, 5],
        [0, 5, 10, 15, 20],
        [0, 100, 200, 300, 400, 500],
    ]
    tallest = max(chart.bars, key=lambda bar: bar["value"])
    assert tallest["y"] == charts.TOP and tallest["height"] == charts.HEIGHT - charts.BOTTOM - charts.TOP
    assert all(
        bar["x"] >= charts.LEFT and bar["x"] + bar["width"] <= charts.WIDTH - charts.RIGHT
        for bar in chart.bars
    )
