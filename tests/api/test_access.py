"""Who may call what: anonymous callers, role holders, and every URL under /api/v1/.

The URL list is read from the resolver, so an endpoint added later (by any app) is
checked without anyone remembering to list it here.
"""

from __future__ import annotations

import pytest

from console.archive.models import DeadLetter
from console.audit.models import AuditEntry
from console.clusters.models import Cluster
from tests.api.conftest import api_v1_endpoints

CHANGING_METHODS = ("post", "put", "patch", "delete")
TOKEN_URL = "/api/v1/auth/token/"
# Testing a connection only reads the broker: any role holder may (see the clusters API).
OPEN_TO_EVERY_ROLE = {"cluster-test-connection"}


def _endpoint_params():
    # The token endpoint is where anonymous callers log in: tested on its own.
    return [pytest.param(url, entry.name, id=url) for url, entry in api_v1_endpoints()
            if url != TOKEN_URL]


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "name"), _endpoint_params())
@pytest.mark.parametrize("method", ("get", "head", "options", "post", "put", "patch", "delete"))
def test_every_endpoint_refuses_an_anonymous_request_in_json(client, url, name, method):
    response = getattr(client, method)(url, content_type="application/json")
    # 401, not the login page: scripts must read the refusal, not follow a redirect.
    assert response.status_code == 401, (method, url, response.status_code)
    assert response["Content-Type"].startswith("application/json")
    if method != "head":
        assert response.json()["error"]


@pytest.mark.django_db
def test_the_token_endpoint_only_takes_a_post(client):
    response = client.get(TOKEN_URL)
    assert response.status_code == 405
    assert "error" in response.json()


@pytest.mark.django_db
def test_a_viewer_gets_403_on_every_changing_action(api_client_as, viewer, make_cluster,
                                                    make_dead_letters):
    cluster = make_cluster(name="viewer-target", service_url="amqp://127.0.0.1:1/%2F")
    [letter] = make_dead_letters(cluster, 1)
    api = api_client_as(viewer)
    audit_before = AuditEntry.objects.count()
    checked = 0
    for url, entry in api_v1_endpoints():
        if url == TOKEN_URL or entry.name in OPEN_TO_EVERY_ROLE:
            continue
        url = url.replace("/clusters/1/", f"/clusters/{cluster.pk}/")
        url = url.replace("/dead-letters/1/", f"/dead-letters/{letter.pk}/")
        for method in CHANGING_METHODS:
            body = {"subscription": "orders-sub", "ids": [letter.pk], "confirm": True,
                    "name": "renamed", "kind": "pulsar", "service_url": "pulsar://x:6650",
                    "username": "intruder", "password": "intruder-pass-123", "role": "admin"}
            response = getattr(api, method)(url, body, format="json")
            if entry.name == "api-not-found":
                assert response.status_code == 404, (method, url)
                continue
            assert response.status_code in (403, 405), (method, url, response.status_code)
            assert response.json()["error"]
            checked += 1
    assert checked >= 20
    cluster.refresh_from_db()
    letter.refresh_from_db()
    assert cluster.name == "viewer-target" and cluster.kind == "rabbitmq"
    assert letter.state == DeadLetter.STATE_PARKED
    assert AuditEntry.objects.count() == audit_before
    assert not Cluster.objects.filter(name="renamed").exists()


@pytest.mark.django_db
def test_a_user_without_a_role_is_refused_even_reads(make_user, api_client_as):
    from django.contrib.auth import get_user_model

    nobody = get_user_model().objects.create_user(username="no-role-user", password="x" * 12)
    response = api_client_as(nobody).get("/api/v1/clusters/")
    assert response.status_code == 403
    assert response.json()["error"]


# (method, path under /api/v1/ with {cluster}/{letter}, body, {role: expected status})
# 424: the broker action was allowed and reached the (unreachable) cluster.
ROLE_MATRIX = [
    ("get", "clusters/", None, {"viewer": 200, "operator": 200, "admin": 200}),
    ("post", "clusters/", {"name": "{unique}", "kind": "rabbitmq", "service_url": "amqp://h:5672/%2F"},
     {"viewer": 403, "operator": 403, "admin": 201}),
    ("get", "clusters/{cluster}/", None, {"viewer": 200, "operator": 200, "admin": 200}),
    ("patch", "clusters/{cluster}/", {"collect_interval_seconds": 60},
     {"viewer": 403, "operator": 403, "admin": 200}),
    ("delete", "clusters/{spare}/", None, {"viewer": 403, "operator": 403, "admin": 204}),
    ("post", "clusters/{cluster}/test/", None, {"viewer": 200, "operator": 200, "admin": 200}),
    ("get", "clusters/{cluster}/subscriptions/", None, {"viewer": 424, "operator": 424, "admin": 424}),
    ("post", "clusters/{cluster}/subscriptions/", {"name": "billing", "source": "billing"},
     {"viewer": 403, "operator": 403, "admin": 201}),
    ("get", "clusters/{cluster}/rebuild/?subscription=orders-sub", None,
     {"viewer": 403, "operator": 424, "admin": 424}),
    ("post", "clusters/{cluster}/rebuild/", {"subscription": "orders-sub"},
     {"viewer": 403, "operator": 424, "admin": 424}),
    ("get", "clusters/{cluster}/retry-queue/?subscription=orders-sub", None,
     {"viewer": 424, "operator": 424, "admin": 424}),
    ("post", "clusters/{cluster}/collect/", {"subscription": "orders-sub"},
     {"viewer": 403, "operator": 424, "admin": 424}),
    ("post", "clusters/{cluster}/discard-dlq/", {"subscription": "orders-sub", "confirm": True},
     {"viewer": 403, "operator": 424, "admin": 424}),
    ("get", "dead-letters/", None, {"viewer": 200, "operator": 200, "admin": 200}),
    ("get", "dead-letters/{letter}/", None, {"viewer": 200, "operator": 200, "admin": 200}),
    ("post", "dead-letters/discard/", {"ids": ["{letter}"]}, {"viewer": 403, "operator": 200, "admin": 200}),
    ("get", "audit/", None, {"viewer": 403, "operator": 403, "admin": 200}),
    ("get", "audit/export/", None, {"viewer": 403, "operator": 403, "admin": 200}),
    ("get", "users/", None, {"viewer": 403, "operator": 403, "admin": 200}),
    ("post", "users/", {"username": "{unique}", "password": "a-long-enough-pass-9", "role": "viewer"},
     {"viewer": 403, "operator": 403, "admin": 201}),
]


def _fill(value, names: dict):
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, list):
        return [int(_fill(item, names)) if item.startswith("{") else item for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, names) for key, item in value.items()}
    return value


@pytest.mark.django_db
@pytest.mark.parametrize("role", ("viewer", "operator", "admin"))
@pytest.mark.parametrize(("method", "path", "body", "expected"), ROLE_MATRIX,
                         ids=[f"{m} {p}" for m, p, _, _ in ROLE_MATRIX])
def test_each_role_is_allowed_exactly_what_it_should(request, api_client_as, make_cluster,
                                                     make_dead_letters, unique, role, method, path,
                                                     body, expected):
    user = request.getfixturevalue({"admin": "admin_user"}.get(role, role))
    # A RabbitMQ cluster on a closed port: broker calls fail as they would in production
    # (or, until the RabbitMQ adapter lands, fail because it is not installed).
    cluster = make_cluster("rabbitmq", service_url="amqp://127.0.0.1:1/%2F",
                           admin_url="http://127.0.0.1:1")
    spare = make_cluster("rabbitmq")
    [letter] = make_dead_letters(cluster, 1)
    names = {"cluster": cluster.pk, "spare": spare.pk, "letter": letter.pk, "unique": unique("x")}
    url = "/api/v1/" + _fill(path, names)
    call = getattr(api_client_as(user), method)
    response = call(url, _fill(body, names), format="json") if body is not None else call(url)
    assert response.status_code == expected[role], (role, method, url, response.content[:300])
