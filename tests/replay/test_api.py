"""The replay API: same numbers as the pages, clear 4xx answers, roles, schema."""

from __future__ import annotations

import base64

import pytest

from console.audit.models import AuditEntry
from console.replay import services
from console.replay.models import ReplayJob, ReplayLedgerEntry, ReplayPolicy

JOBS = "/api/v1/replay/jobs/"


@pytest.fixture
def letters(make_cluster, make_dead_letters):
    return make_dead_letters(make_cluster(), 4, properties={"error": "Timeout"})


def test_an_operator_starts_a_job_over_ids_and_reads_its_progress(api_client_as, operator, letters):
    api = api_client_as(operator)
    created = api.post(JOBS, {"ids": [x.pk for x in letters], "rate_limit": 20, "batch_size": 5},
                       format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["state"], body["total"], body["remaining"], body["rate_limit"]) == ("queued", 4, 4, 20)

    ReplayJob.objects.filter(pk=body["id"]).update(state="running", done=3, failed=1, achieved_rate=19.5)
    progress = api.get(f"{JOBS}{body['id']}/").json()
    numbers = (progress["done"], progress["failed"], progress["remaining"], progress["percent"])
    assert numbers == (3, 1, 0, 100)
    assert progress["rate"] == 19.5
    assert api.get(JOBS).json()["results"][0]["id"] == body["id"]


def test_a_dry_run_over_a_filter_counts_and_sends_nothing(api_client_as, operator, letters):
    response = api_client_as(operator).post(JOBS, {
        "filters": {"cluster": letters[0].cluster_id, "property": "error=Timeout"}, "dry_run": True},
        format="json")
    assert response.status_code == 201
    assert (response.json()["total"], response.json()["state"]) == (4, "done")
    assert not ReplayLedgerEntry.objects.exists()


@pytest.mark.parametrize("payload, field", [
    ({"rate_limit": 0}, "rate_limit"),
    ({"rate_limit": -10}, "rate_limit"),
    ({"rate_limit": 1e12}, "rate_limit"),
    ({"batch_size": 0}, "batch_size"),
    ({"filters": {"colour": "red"}, "ids": None}, "filters"),
    ({"filters": {"property": "broken"}, "ids": None}, "filters"),
    ({"filters": {}, "ids": [1]}, "non_field_errors"),
])
def test_bad_input_is_a_400_naming_the_field_and_creates_nothing(api_client_as, operator, letters, payload,
                                                                 field):
    body = {"ids": [x.pk for x in letters], **payload}
    body = {k: v for k, v in body.items() if v is not None}
    response = api_client_as(operator).post(JOBS, body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()
    assert not ReplayJob.objects.exists()


def test_unknown_ids_and_jobs_are_clear_errors(api_client_as, operator):
    api = api_client_as(operator)
    assert api.post(JOBS, {"ids": [999999]}, format="json").status_code == 400
    assert api.get(f"{JOBS}999999/").status_code == 404
    missing = api.post(f"{JOBS}999999/pause/")
    assert missing.status_code == 404 and "error" in missing.json()


def test_replaying_a_selection_already_in_a_job_is_a_409_naming_it(api_client_as, make_user, letters):
    ids = [x.pk for x in letters]
    first = api_client_as(make_user("operator")).post(JOBS, {"ids": ids}, format="json").json()
    second = api_client_as(make_user("operator")).post(JOBS, {"ids": ids}, format="json")
    assert second.status_code == 409
    assert f"#{first['id']}" in second.json()["error"]


def test_pause_resume_cancel_and_conflicts(api_client_as, operator, letters):
    api = api_client_as(operator)
    job = api.post(JOBS, {"ids": [letters[0].pk]}, format="json").json()
    assert api.post(f"{JOBS}{job['id']}/pause/").json()["state"] == "paused"
    assert api.post(f"{JOBS}{job['id']}/resume/").json()["state"] == "queued"
    assert api.post(f"{JOBS}{job['id']}/cancel/").json()["state"] == "cancelled"
    conflict = api.post(f"{JOBS}{job['id']}/resume/")
    assert conflict.status_code == 409 and "cancelled" in conflict.json()["error"]
    assert AuditEntry.objects.filter(action="replay.cancel").count() == 1


def test_a_viewer_reads_jobs_but_cannot_start_or_control_them(api_client_as, viewer, operator, letters):
    job = services.replay_job_create(actor=operator, letter_ids=[letters[0].pk])
    api = api_client_as(viewer)
    assert api.get(f"{JOBS}{job.pk}/").status_code == 200
    assert api.post(JOBS, {"ids": [letters[1].pk]}, format="json").status_code == 403
    assert api.post(f"{JOBS}{job.pk}/cancel/").status_code == 403
    resend = f"/api/v1/replay/dead-letters/{letters[1].pk}/resend/"
    assert api.post(resend, {}, format="json").status_code == 403
    job.refresh_from_db()
    assert job.state == "queued"


def test_resend_over_the_api_with_an_edited_payload(api_client_as, operator, letters):
    api = api_client_as(operator)
    url = f"/api/v1/replay/dead-letters/{letters[0].pk}/resend/"
    bad = api.post(url, {"payload_base64": "***"}, format="json")
    assert bad.status_code == 400 and "payload_base64" in bad.json()
    response = api.post(url, {"payload_base64": base64.b64encode(b"\x00\xffedited").decode(),
                              "properties": {"error": "fixed"}}, format="json")
    assert response.status_code == 201
    entry = ReplayLedgerEntry.objects.get(job_id=response.json()["id"])
    assert bytes(entry.payload_override) == b"\x00\xffedited"
    assert entry.properties_override == {"error": "fixed"}
    assert api.post("/api/v1/replay/dead-letters/999999/resend/", {}, format="json").status_code == 404


def test_policies_over_the_api_are_for_admins(api_client_as, admin_user, operator, make_cluster):
    cluster = make_cluster()
    body = {"name": "nightly", "cluster": cluster.pk, "subscription": "orders-sub",
            "filters": {"text": "timeout"}, "rate_limit": 50, "max_per_run": 100, "cron": "0 2 * * *",
            "enabled": True}
    assert api_client_as(operator).post("/api/v1/replay/policies/", body, format="json").status_code == 403
    api = api_client_as(admin_user)
    bad = api.post("/api/v1/replay/policies/", {**body, "cron": "whenever"}, format="json")
    assert bad.status_code == 400 and "cron" in bad.json()
    created = api.post("/api/v1/replay/policies/", body, format="json")
    assert created.status_code == 201, created.json()
    policy_id = created.json()["id"]
    changed = api.patch(f"/api/v1/replay/policies/{policy_id}/", {"enabled": False}, format="json")
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    assert not ReplayPolicy.objects.get().periodic_task.enabled
    assert api.delete(f"/api/v1/replay/policies/{policy_id}/").status_code == 204
    assert api.get(f"/api/v1/replay/policies/{policy_id}/").status_code == 404


def test_retention_over_the_api(api_client_as, admin_user, viewer):
    assert api_client_as(viewer).get("/api/v1/replay/retention/").json() == {"discarded_retention_days": 30}
    assert api_client_as(viewer).put("/api/v1/replay/retention/", {"discarded_retention_days": 3},
                                     format="json").status_code == 403
    api = api_client_as(admin_user)
    refused = api.put("/api/v1/replay/retention/", {"discarded_retention_days": 0}, format="json")
    assert refused.status_code == 400
    assert api.put("/api/v1/replay/retention/", {"discarded_retention_days": 3},
                   format="json").json() == {"discarded_retention_days": 3}
    assert api.post("/api/v1/replay/retention/purge/").json() == {"purged": 0}


def test_the_schema_describes_the_replay_endpoints(api_client_as, viewer):
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    for path in ("/api/v1/replay/jobs/", "/api/v1/replay/jobs/{id}/", "/api/v1/replay/jobs/{id}/pause/",
                 "/api/v1/replay/dead-letters/{letter_id}/resend/", "/api/v1/replay/policies/",
                 "/api/v1/replay/retention/"):
        assert path in schema["paths"], path
    assert api_client_as(viewer).get("/api/schema/").status_code == 200
