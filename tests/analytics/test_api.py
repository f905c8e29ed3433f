from __future__ import annotations

import pytest

from console.analytics.models import FailureOverview, PipelineRun, ReplayCandidates


@pytest.fixture
def loaded_run(db):
    run = PipelineRun.objects.create(trigger="nightly", status="succeeded", master="local[2]")
    FailureOverview.objects.create(
        run=run,
        cluster_id=1,
        cluster_name="prod",
        subscription="orders-sub",
        source="orders",
        day="2026-11-20",
        dead_letters=5,
        replayed=1,
        discarded=0,
        parked=4,
        replay_failed=0,
        replaying=0,
        replay_success_rate=1.0,
    )
    ReplayCandidates.objects.create(run=run, policy={"states": ["parked"]}, letter_ids=[3, 9], count=2)
    return run


def test_viewers_read_the_summaries_with_a_token(loaded_run, viewer, api_client_as):
    api = api_client_as(viewer)

    overview = api.get("/api/v1/analytics/overview/").json()
    candidates = api.get("/api/v1/analytics/replay-candidates/").json()
    runs = api.get("/api/v1/analytics/runs/").json()

    assert overview["count"] == 1 and overview["results"][0]["dead_letters"] == 5
    assert candidates["letter_ids"] == [3, 9] and candidates["count"] == 2
    assert runs["results"][0]["id"] == loaded_run.pk


def test_summaries_need_a_login_and_runs_need_an_operator(
    loaded_run, viewer, operator, api_client_as, client, django_capture_on_commit_callbacks
):
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/analytics/overview/").status_code in (401, 403)
    assert api_client_as(viewer).post("/api/v1/analytics/runs/").status_code == 403

    with django_capture_on_commit_callbacks():
        started = api_client_as(operator).post("/api/v1/analytics/runs/")
        again = api_client_as(operator).post("/api/v1/analytics/runs/")

    assert started.status_code == 202 and started.json()["status"] == "queued"
    assert again.status_code == 409 and "already" in again.json()["error"]
    assert api_client_as(viewer).get(f"/api/v1/analytics/runs/{started.json()['id']}/").status_code == 200
    assert api_client_as(viewer).get("/api/v1/analytics/runs/999999/").status_code == 404


def test_replay_candidates_before_any_run_is_a_clear_404(viewer, api_client_as):
    response = api_client_as(viewer).get("/api/v1/analytics/replay-candidates/")

    assert response.status_code == 404 and "No pipeline run" in response.json()["error"]


def test_openapi_schema_describes_the_analytics_endpoints(viewer, client):
    client.force_login(viewer)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    assert {
        "/api/v1/analytics/runs/",
        "/api/v1/analytics/reasons/",
        "/api/v1/analytics/replay-candidates/",
    } <= set(schema["paths"])
    assert "202" in schema["paths"]["/api/v1/analytics/runs/"]["post"]["responses"]
