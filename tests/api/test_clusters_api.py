"""Clusters over the API: add, change, delete, secrets, connection test, broker failures.

The broker calls here go to a RabbitMQ cluster pointing at a closed port, the way an
operator meets an unreachable broker; until the RabbitMQ adapter is installed the
registry refuses the kind with a permanent BrokerError, which takes the same path.
Either way the answer must be a clean JSON error, never a 500.
"""

from __future__ import annotations

import logging

import pytest

from console.audit.models import AuditEntry
from console.clusters.models import Cluster, RegisteredSubscription

SECRET = "s3cret-pa$$word-never-shown"
TOKEN_SECRET = "eyJhbGciOi.token-never-shown.sig"
CLOSED_PORT = {"service_url": "amqp://127.0.0.1:1/%2F", "admin_url": "http://127.0.0.1:1"}


def cluster_body(name: str, **overrides) -> dict:
    return {"name": name, "kind": "rabbitmq", "username": "ops", "password": SECRET,
            "token": TOKEN_SECRET, "options": {"vhost": "/"}, **CLOSED_PORT, **overrides}


def assert_broker_error(response) -> None:
    assert response.status_code == 424, response.content[:500]
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["permanent"], bool)


@pytest.fixture
def admin_api(api_client_as, admin_user):
    return api_client_as(admin_user)


@pytest.fixture
def operator_api(api_client_as, operator):
    return api_client_as(operator)


@pytest.fixture
def unreachable(make_cluster):
    return make_cluster("rabbitmq", **CLOSED_PORT)


def test_admin_adds_a_cluster_and_gets_it_back_without_its_secrets(admin_api, admin_user):
    response = admin_api.post("/api/v1/clusters/", cluster_body("prod-rabbit"), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "prod-rabbit" and body["kind"] == "rabbitmq"
    assert body["has_password"] is True and body["has_token"] is True
    assert "password" not in body and "token" not in body
    cluster = Cluster.objects.get(pk=body["id"])
    assert cluster.password == SECRET and cluster.token == TOKEN_SECRET
    assert cluster.options == {"vhost": "/"}
    entry = AuditEntry.objects.get(action="cluster.create")
    assert (entry.actor_name, entry.cluster_name, entry.result) == (admin_user.username, "prod-rabbit", "ok")


def test_secrets_never_appear_in_any_response_or_log(admin_api, operator_api, caplog):
    caplog.set_level(logging.DEBUG)
    created = admin_api.post("/api/v1/clusters/", cluster_body("secretive"), format="json")
    cluster_id = created.json()["id"]
    bodies = [created.content]
    bodies.append(admin_api.patch(f"/api/v1/clusters/{cluster_id}/", {"username": "ops2"},
                                  format="json").content)
    bodies.append(admin_api.put(f"/api/v1/clusters/{cluster_id}/", cluster_body("secretive"),
                                format="json").content)
    for url in ("/api/v1/clusters/", f"/api/v1/clusters/{cluster_id}/",
                f"/api/v1/clusters/{cluster_id}/subscriptions/",
                f"/api/v1/clusters/{cluster_id}/retry-queue/?subscription=s",
                f"/api/v1/clusters/{cluster_id}/rebuild/?subscription=s",
                "/api/v1/audit/", "/api/v1/audit/export/", "/api/schema/"):
        response = admin_api.get(url)
        bodies.append(b"".join(response.streaming_content) if response.streaming else response.content)
    for url, body in ((f"/api/v1/clusters/{cluster_id}/test/", {}),
                      (f"/api/v1/clusters/{cluster_id}/collect/", {"subscription": "s"}),
                      (f"/api/v1/clusters/{cluster_id}/rebuild/", {"subscription": "s"}),
                      (f"/api/v1/clusters/{cluster_id}/discard-dlq/",
                       {"subscription": "s", "confirm": True})):
        bodies.append(operator_api.post(url, body, format="json").content)
    stored = Cluster.objects.get(pk=cluster_id)
    assert stored.password == SECRET and stored.token == TOKEN_SECRET
    for body in bodies:
        for secret in (SECRET, TOKEN_SECRET, stored.password_encrypted, stored.token_encrypted):
            assert secret.encode() not in body
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert logged, "nothing was logged: the log check proves nothing"
    assert SECRET not in logged and TOKEN_SECRET not in logged
    assert not any(SECRET in entry.detail for entry in AuditEntry.objects.all())


def test_editing_without_a_password_keeps_the_stored_one(admin_api, make_cluster):
    cluster = make_cluster("rabbitmq", password=SECRET)
    response = admin_api.patch(f"/api/v1/clusters/{cluster.pk}/",
                               {"collect_interval_seconds": 60, "password": ""}, format="json")
    assert response.status_code == 200
    cluster.refresh_from_db()
    assert cluster.password == SECRET and cluster.collect_interval_seconds == 60
    entry = AuditEntry.objects.get(action="cluster.update")
    assert "collect_interval_seconds" in entry.detail and "password" not in entry.detail
    response = admin_api.patch(f"/api/v1/clusters/{cluster.pk}/", {"password": "new-one"}, format="json")
    cluster.refresh_from_db()
    assert cluster.password == "new-one"


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "kafka"}, "kind"),
    ({"name": ""}, "name"),
    ({"options": ["not", "an", "object"]}, "options"),
    ({"options": "{broken json"}, "options"),
    ({"collect_interval_seconds": -5}, "collect_interval_seconds"),
    ({"service_url": "x" * 501}, "service_url"),
    # PostgreSQL cannot store NUL in text or jsonb: refused as input, not a crash at save.
    ({"name": "nul\x00name"}, "name"),
    ({"options": {"vhost": "a\x00b"}}, "options"),
    ({"options": {"nested": [{"k\x00": 1}]}}, "options"),
])
def test_bad_cluster_input_is_a_400_and_writes_nothing(admin_api, body, field):
    response = admin_api.post("/api/v1/clusters/", {**cluster_body("bad-one"), **body}, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not Cluster.objects.exists()
    assert not AuditEntry.objects.exists()


def test_a_duplicate_cluster_name_is_a_400(admin_api, make_cluster):
    make_cluster("rabbitmq", name="taken")
    response = admin_api.post("/api/v1/clusters/", cluster_body("taken"), format="json")
    assert response.status_code == 400
    assert "name" in response.json()
    assert Cluster.objects.filter(name="taken").count() == 1


@pytest.mark.parametrize("raw", [b"{not json", b"[" * 100_000, b'{"name": "\xff\xfe"}'])
def test_a_body_that_is_not_json_is_a_400(admin_api, raw):
    response = admin_api.post("/api/v1/clusters/", data=raw, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]
    assert not Cluster.objects.exists()


def test_admin_deletes_a_cluster_and_it_is_audited(admin_api, admin_user, make_cluster):
    cluster = make_cluster("rabbitmq", name="to-go")
    RegisteredSubscription.objects.create(cluster=cluster, name="a", source="a")
    response = admin_api.delete(f"/api/v1/clusters/{cluster.pk}/")
    assert response.status_code == 204
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    entry = AuditEntry.objects.get(action="cluster.delete")
    assert entry.cluster_name == "to-go" and entry.actor_name == admin_user.username


def test_a_cluster_with_archived_dead_letters_is_not_deleted(admin_api, make_cluster, make_dead_letters):
    cluster = make_cluster("rabbitmq", name="keeps-letters")
    make_dead_letters(cluster, 2)
    response = admin_api.delete(f"/api/v1/clusters/{cluster.pk}/")
    assert response.status_code == 409
    assert "archived dead letters" in response.json()["error"]
    assert Cluster.objects.filter(pk=cluster.pk).exists()
    # The refused delete leaves no half-written audit entry behind.
    assert not AuditEntry.objects.filter(action="cluster.delete").exists()


@pytest.mark.parametrize("path", [
    "clusters/{missing}/", "clusters/{missing}/subscriptions/", "clusters/{missing}/test/",
    "clusters/{missing}/rebuild/?subscription=a", "clusters/{missing}/retry-queue/?subscription=a",
    "clusters/abc/", "clusters/99999999999999999999999/", "clusters/1/nonsense/",
])
def test_unknown_cluster_ids_are_a_json_404(admin_api, make_cluster, path):
    missing = make_cluster().pk + 1000
    url = "/api/v1/" + path.format(missing=missing)
    method = admin_api.post if path.endswith("test/") else admin_api.get
    response = method(url)
    assert response.status_code == 404, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"]


def test_changing_actions_on_an_unknown_cluster_are_a_404_and_write_nothing(operator_api, make_cluster):
    missing = make_cluster().pk + 1000
    for action, body in (("collect", {"subscription": "s"}), ("rebuild", {"subscription": "s"}),
                         ("discard-dlq", {"subscription": "s", "confirm": True})):
        response = operator_api.post(f"/api/v1/clusters/{missing}/{action}/", body, format="json")
        assert response.status_code == 404
    assert not AuditEntry.objects.exists()


def test_testing_an_unreachable_cluster_says_so_and_remembers_it(api_client_as, viewer, unreachable):
    response = api_client_as(viewer).post(f"/api/v1/clusters/{unreachable.pk}/test/")
    assert response.status_code == 200
    body = response.json()
    assert body["reachable"] is False and body["message"] and body["checked_at"]
    unreachable.refresh_from_db()
    assert unreachable.last_check_ok is False
    assert unreachable.last_check_message == body["message"]


def test_subscriptions_of_an_unreachable_cluster_are_a_clear_json_error(operator_api, unreachable):
    assert_broker_error(operator_api.get(f"/api/v1/clusters/{unreachable.pk}/subscriptions/"))


def test_peeking_an_unreachable_retry_queue_is_a_clear_json_error(operator_api, unreachable):
    response = operator_api.get(f"/api/v1/clusters/{unreachable.pk}/retry-queue/?subscription=orders")
    assert_broker_error(response)


@pytest.mark.parametrize("query", ["", "?subscription=", "?subscription=a&limit=0",
                                   "?subscription=a&limit=many", "?subscription=a&limit=501"])
def test_peek_refuses_a_missing_subscription_or_bad_limit(operator_api, unreachable, query):
    response = operator_api.get(f"/api/v1/clusters/{unreachable.pk}/retry-queue/{query}")
    assert response.status_code == 400
    assert set(response.json()) <= {"subscription", "limit"}


def test_a_rebuild_plan_needs_a_subscription(operator_api, unreachable):
    response = operator_api.get(f"/api/v1/clusters/{unreachable.pk}/rebuild/")
    assert response.status_code == 400
    assert "subscription" in response.json()


@pytest.mark.parametrize(("action", "audit_action", "body"), [
    ("rebuild", "topology.rebuild", {"subscription": "orders-sub"}),
    ("collect", "archive.collect", {"subscription": "orders-sub"}),
    ("discard-dlq", "dlq.discard", {"subscription": "orders-sub", "confirm": True}),
])
def test_a_failed_broker_action_is_a_json_error_and_audited_as_failed(
        operator_api, operator, unreachable, action, audit_action, body):
    response = operator_api.post(f"/api/v1/clusters/{unreachable.pk}/{action}/", body, format="json")
    assert_broker_error(response)
    entry = AuditEntry.objects.get(action=audit_action)
    assert entry.actor_name == operator.username
    assert entry.cluster_name == unreachable.name
    assert entry.subscription == "orders-sub"
    assert entry.result == "error" and entry.detail == response.json()["error"]


@pytest.mark.parametrize(("action", "body", "field"), [
    ("collect", {}, "subscription"),
    ("collect", {"subscription": "a", "limit": 0}, "limit"),
    ("rebuild", {"subscription": ""}, "subscription"),
    ("discard-dlq", {"subscription": "a"}, "confirm"),
    ("discard-dlq", {"subscription": "a", "confirm": False}, "confirm"),
])
def test_broker_actions_refuse_bad_input_before_touching_the_broker(
        operator_api, unreachable, action, body, field):
    response = operator_api.post(f"/api/v1/clusters/{unreachable.pk}/{action}/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not AuditEntry.objects.exists()


def test_admin_registers_a_subscription_once_and_it_is_audited(admin_api, admin_user, unreachable):
    url = f"/api/v1/clusters/{unreachable.pk}/subscriptions/"
    body = {"name": "billing", "source": "persistent://public/default/billing", "mode": "Shared"}
    first = admin_api.post(url, body, format="json")
    second = admin_api.post(url, body, format="json")
    assert first.status_code == 201 and second.status_code == 201
    assert first.json()["id"] == second.json()["id"]
    assert RegisteredSubscription.objects.filter(cluster=unreachable).count() == 1
    entry = AuditEntry.objects.filter(action="subscription.register").first()
    assert (entry.actor_name, entry.cluster_name, entry.subscription) == (
        admin_user.username, unreachable.name, "billing")
    detail = admin_api.get(f"/api/v1/clusters/{unreachable.pk}/").json()
    assert [sub["name"] for sub in detail["registered"]] == ["billing"]


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "x"}, "source"),
    ({"name": "x\x00", "source": "s"}, "name"),
    ({"name": "x", "source": "s" * 501}, "source"),
])
def test_registering_bad_input_is_a_400(admin_api, unreachable, body, field):
    response = admin_api.post(f"/api/v1/clusters/{unreachable.pk}/subscriptions/", body, format="json")
    assert response.status_code == 400 and field in response.json()
    assert not RegisteredSubscription.objects.exists()
    assert not AuditEntry.objects.exists()


def test_a_wrong_broker_password_is_a_permanent_json_error_that_never_echoes_it(
        admin_api, operator_api, make_cluster):
    """The local RabbitMQ (guest/guest) with a wrong password."""
    cluster = make_cluster("rabbitmq", service_url="amqp://127.0.0.1:5672/%2F",
                           admin_url="http://127.0.0.1:15672", username="guest",
                           password="wrong-" + SECRET)
    response = operator_api.get(f"/api/v1/clusters/{cluster.pk}/subscriptions/")
    assert_broker_error(response)
    assert response.json()["permanent"] is True
    tested = admin_api.post(f"/api/v1/clusters/{cluster.pk}/test/").json()
    assert tested["reachable"] is False and tested["message"]
    for body in (response.content, str(tested).encode()):
        assert SECRET.encode() not in body


def test_a_path_without_its_trailing_slash_is_a_json_404_not_a_crash(admin_api):
    response = admin_api.post("/api/v1/clusters", cluster_body("no-slash"), format="json")
    assert response.status_code == 404
    assert "slash" in response.json()["error"]
    assert not Cluster.objects.exists()


def test_a_kind_whose_adapter_is_not_installed_is_a_permanent_json_error(
        operator_api, unreachable, monkeypatch):
    """The registry imports an adapter on first use; a missing one must not become a 500."""
    import brokers

    monkeypatch.setitem(brokers.ADAPTER_PATHS, "rabbitmq", "brokers.not_installed.adapter.Adapter")
    response = operator_api.get(f"/api/v1/clusters/{unreachable.pk}/subscriptions/")
    assert_broker_error(response)
    assert response.json()["permanent"] is True
    collect = operator_api.post(f"/api/v1/clusters/{unreachable.pk}/collect/",
                                {"subscription": "orders"}, format="json")
    assert_broker_error(collect)
    assert AuditEntry.objects.get(action="archive.collect").result == "error"
