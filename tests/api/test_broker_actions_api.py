"""Broker actions over the API against a real broker: the RocketMQ-style one on the
local Redis (the contract suite's harness drives it the way an application would).

What an automation script relies on: the API reports what the broker holds, moves
dead letters into the archive without losing any, and every change is audited.
"""

from __future__ import annotations

import base64

import pytest

from console.archive.models import DeadLetter
from console.audit.models import AuditEntry


@pytest.fixture
def broker_cluster(make_cluster, rocketmq_harness):
    config = rocketmq_harness.cluster_config()
    return make_cluster("rocketmq", service_url=config.service_url, options=dict(config.options))


@pytest.fixture
def operator_api(api_client_as, operator):
    return api_client_as(operator)


def test_connection_test_reaches_a_live_broker(api_client_as, viewer, broker_cluster):
    response = api_client_as(viewer).post(f"/api/v1/clusters/{broker_cluster.pk}/test/")
    assert response.status_code == 200
    assert response.json()["reachable"] is True
    broker_cluster.refresh_from_db()
    assert broker_cluster.last_check_ok is True


def test_subscriptions_list_the_broker_inventory_with_archived_counts(
        operator_api, broker_cluster, rocketmq_harness, make_dead_letters):
    subscription = rocketmq_harness.new_subscription()
    rocketmq_harness.put_dead_letters(subscription, [(b'{"n": 1}', {"k": "v"}), (b'{"n": 2}', {})])
    make_dead_letters(broker_cluster, 3, subscription=subscription,
                      source=rocketmq_harness.topics[subscription])
    response = operator_api.get(f"/api/v1/clusters/{broker_cluster.pk}/subscriptions/")
    assert response.status_code == 200, response.content
    [row] = [row for row in response.json() if row["name"] == subscription]
    assert row["dead_letter_queue"] == f"%DLQ%{subscription}"
    assert row["retry_queue"] == f"%RETRY%{subscription}"
    assert row["dead_letter_depth"] == 2
    assert row["healthy"] is True and row["problems"] == [], row["problems"]
    assert row["archived"] == {"parked": 3}


def test_collect_moves_the_dlq_into_the_archive_and_is_audited(
        operator_api, operator, broker_cluster, rocketmq_harness):
    subscription = rocketmq_harness.new_subscription()
    payloads = [b'{"order": 1}', b"\x00\xffbinary", "caf\u00e9".encode()]
    rocketmq_harness.put_dead_letters(subscription, [(p, {"error": "Timeout"}) for p in payloads],
                                      retry_count=2)
    response = operator_api.post(f"/api/v1/clusters/{broker_cluster.pk}/collect/",
                                 {"subscription": subscription}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"subscription": subscription, "collected": 3}
    # Acked on the broker only after the archive committed: the rows are there, the DLQ empty.
    assert rocketmq_harness.dead_letter_depth(subscription) == 0
    rows = DeadLetter.objects.filter(cluster=broker_cluster, subscription=subscription)
    assert sorted(bytes(row.payload) for row in rows) == sorted(payloads)
    entry = AuditEntry.objects.get(action="archive.collect")
    assert (entry.actor_name, entry.cluster_name, entry.subscription, entry.count, entry.result) == (
        operator.username, broker_cluster.name, subscription, 3, "ok")

    # The collected letters read back through the API exactly as they were.
    listed = operator_api.get(f"/api/v1/dead-letters/?cluster={broker_cluster.pk}"
                              f"&subscription={subscription}&property=error=Timeout").json()
    assert listed["count"] == 3
    for summary in listed["results"]:
        detail = operator_api.get(f"/api/v1/dead-letters/{summary['id']}/").json()
        assert base64.b64decode(detail["payload"]) in payloads
        assert detail["retry_count"] == 2

    # Collecting again finds nothing new and makes no second row.
    again = operator_api.post(f"/api/v1/clusters/{broker_cluster.pk}/collect/",
                              {"subscription": subscription}, format="json")
    assert again.json()["collected"] == 0
    assert rows.count() == 3


def test_collect_with_a_limit_leaves_the_rest_on_the_broker(operator_api, broker_cluster, rocketmq_harness):
    subscription = rocketmq_harness.new_subscription()
    rocketmq_harness.put_dead_letters(subscription, [(f"m{i}".encode(), {}) for i in range(5)])
    response = operator_api.post(f"/api/v1/clusters/{broker_cluster.pk}/collect/",
                                 {"subscription": subscription, "limit": 2}, format="json")
    assert response.json()["collected"] == 2
    assert rocketmq_harness.dead_letter_depth(subscription) == 3
    assert DeadLetter.objects.filter(subscription=subscription).count() == 2


def test_discarding_the_dlq_on_the_broker_drops_it_and_is_audited(
        operator_api, operator, broker_cluster, rocketmq_harness):
    subscription = rocketmq_harness.new_subscription()
    rocketmq_harness.put_dead_letters(subscription, [(b"a", {}), (b"b", {})])
    response = operator_api.post(f"/api/v1/clusters/{broker_cluster.pk}/discard-dlq/",
                                 {"subscription": subscription, "confirm": True}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"subscription": subscription, "discarded": 2}
    assert rocketmq_harness.dead_letter_depth(subscription) == 0
    assert not DeadLetter.objects.filter(subscription=subscription).exists()
    entry = AuditEntry.objects.get(action="dlq.discard")
    assert (entry.actor_name, entry.subscription, entry.count, entry.result) == (
        operator.username, subscription, 2, "ok")


def test_discarding_the_dlq_without_confirm_leaves_it_alone(operator_api, broker_cluster, rocketmq_harness):
    subscription = rocketmq_harness.new_subscription()
    rocketmq_harness.put_dead_letters(subscription, [(b"a", {})])
    response = operator_api.post(f"/api/v1/clusters/{broker_cluster.pk}/discard-dlq/",
                                 {"subscription": subscription}, format="json")
    assert response.status_code == 400
    assert rocketmq_harness.dead_letter_depth(subscription) == 1


def test_rebuild_plans_then_restores_a_broken_topology_and_is_audited(
        operator_api, operator, broker_cluster, rocketmq_harness):
    subscription = rocketmq_harness.new_subscription()
    rocketmq_harness.break_topology(subscription)
    url = f"/api/v1/clusters/{broker_cluster.pk}/rebuild/"
    plan = operator_api.get(url, {"subscription": subscription})
    assert plan.status_code == 200, plan.content
    assert plan.json()["subscription"] == subscription
    assert plan.json()["steps"], "a broken topology must plan at least one step"
    assert not AuditEntry.objects.exists(), "planning changes nothing"

    applied = operator_api.post(url, {"subscription": subscription}, format="json")
    assert applied.status_code == 200, applied.content
    assert len(applied.json()["steps"]) == len(plan.json()["steps"])
    entry = AuditEntry.objects.get(action="topology.rebuild")
    assert (entry.actor_name, entry.subscription, entry.count, entry.result) == (
        operator.username, subscription, len(plan.json()["steps"]), "ok")
    # Idempotent: nothing is left to do.
    assert operator_api.get(url, {"subscription": subscription}).json()["steps"] == []


def test_peek_shows_the_retry_queue_without_consuming_it(api_client_as, viewer, broker_cluster,
                                                         rocketmq_harness):
    subscription = rocketmq_harness.new_subscription()
    rocketmq_harness.put_retry_messages(subscription, [(b'{"retry": 1}', {"why": "<script>x</script>"}),
                                                       (b"\x00\x01\x02", {})])
    api = api_client_as(viewer)
    url = f"/api/v1/clusters/{broker_cluster.pk}/retry-queue/"
    first = api.get(url, {"subscription": subscription})
    assert first.status_code == 200, first.content
    peeked = first.json()
    payloads = sorted(base64.b64decode(m["payload"]) for m in peeked)
    assert payloads == sorted([b'{"retry": 1}', b"\x00\x01\x02"])
    by_kind = {m["display"]["kind"]: m for m in peeked}
    assert set(by_kind) == {"json", "binary"}
    assert by_kind["json"]["properties"]["why"] == "<script>x</script>"
    assert len(api.get(url, {"subscription": subscription, "limit": 1}).json()) == 1
    # Peeking consumed nothing.
    assert len(api.get(url, {"subscription": subscription}).json()) == 2
