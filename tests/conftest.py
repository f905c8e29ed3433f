"""Fixtures shared by the whole suite: users of each role, clients, clusters.

Broker fixtures live in tests/fixtures/<kind>.py, one module per broker, each
providing `<kind>_harness` for the contract suite (tests/contract/).
"""

from __future__ import annotations

import itertools

import pytest

pytest_plugins = ["tests.fixtures.pulsar", "tests.fixtures.rabbitmq", "tests.fixtures.rocketmq"]

PASSWORD = "correct-horse-battery-staple"
_names = itertools.count(1)


@pytest.fixture
def make_user(db):
    from console.accounts.services import user_create_with_role

    def make(role: str, username: str | None = None):
        return user_create_with_role(username=username or f"{role}{next(_names)}",
                                     password=PASSWORD, role=role)

    return make


@pytest.fixture
def viewer(make_user):
    return make_user("viewer")


@pytest.fixture
def operator(make_user):
    return make_user("operator")


@pytest.fixture
def admin_user(make_user):
    return make_user("admin")


@pytest.fixture
def client_as(client):
    """client_as(user) -> the test client logged in as that user."""

    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def api_client_as():
    """api_client_as(user) -> a DRF client sending that user's API token."""
    from rest_framework.test import APIClient

    from console.accounts.services import user_token_issue

    def make(user):
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {user_token_issue(user=user)}")
        return api

    return make


@pytest.fixture
def make_cluster(db):
    from console.clusters.models import Cluster

    def make(kind: str = "rabbitmq", **fields):
        password = fields.pop("password", "")
        fields.setdefault("name", f"{kind}-{next(_names)}")
        fields.setdefault("service_url", "amqp://127.0.0.1:5672/%2F")
        cluster = Cluster(kind=kind, **fields)
        cluster.password = password
        cluster.save()
        return cluster

    return make


@pytest.fixture
def make_dead_letters(db):
    """make_dead_letters(cluster, n, **overrides) -> archived rows, through the real store."""
    from brokers.base import DeadLetter as BrokerDeadLetter
    from console.archive.models import DeadLetter
    from console.archive.services import archive_store

    def make(cluster, n: int = 1, *, subscription: str = "orders-sub", source: str = "orders",
             payload: bytes | None = None, properties: dict | None = None, retry_count: int = 3):
        start = next(_names) * 100_000
        letters = [
            BrokerDeadLetter(
                broker_message_id=f"msg-{start + i}", subscription=subscription, source=source,
                payload=payload if payload is not None else f'{{"order": {start + i}}}'.encode(),
                properties=properties or {"error": "TimeoutException"},
                retry_count=retry_count, origin_message_id=f"origin-{start + i}",
            )
            for i in range(n)
        ]
        archive_store(cluster=cluster, letters=letters)
        return list(DeadLetter.objects.filter(
            cluster=cluster, broker_message_id__in=[x.broker_message_id for x in letters]
        ).order_by("id"))

    return make
