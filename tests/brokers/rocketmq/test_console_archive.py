"""The console's own services over a RocketMQ-style cluster: inventory, and collecting
dead letters into the archive on PostgreSQL (the real sink), acknowledged only after
the commit."""

from __future__ import annotations

from brokers.rocketmq.message import Message
from brokers.rocketmq.retry import send_back
from brokers.rocketmq.topology import subscription_ensure
from tests.fixtures.rocketmq import LIBRARY_DB, SHARED_URL


def test_collect_moves_dead_letters_into_the_archive_once(make_cluster, rocketmq_connection):
    from console.archive.models import DeadLetter
    from console.archive.services import dead_letters_collect
    from console.clusters.selectors import cluster_inventory

    cluster = make_cluster("rocketmq", service_url=SHARED_URL.format(db=LIBRARY_DB),
                           options={"key_prefix": rocketmq_connection.keys.prefix})
    subscription_ensure(rocketmq_connection, group="billing", topics=["orders"], max_reconsume_times=3)
    for i in range(3):
        send_back(rocketmq_connection, Message(topic="orders", body=f"order {i}".encode(), reconsume_times=3,
                                               properties={"tenant": "acme"}),
                  group="billing", max_reconsume_times=3, reason="card declined")

    [info] = cluster_inventory(cluster=cluster).subscriptions
    assert (info.name, info.dead_letter_depth) == ("billing", 3)

    assert dead_letters_collect(cluster=cluster, subscription="billing", actor=None) == 3
    rows = DeadLetter.objects.filter(cluster=cluster).order_by("payload_preview")
    assert [bytes(r.payload) for r in rows] == [b"order 0", b"order 1", b"order 2"]
    assert all(r.retry_count == 3 and r.source == "orders" and r.properties["tenant"] == "acme" for r in rows)
    assert all(r.properties["FAILURE_REASON"] == "card declined" for r in rows)
    assert rocketmq_connection.client.xlen(rocketmq_connection.keys.stream("%DLQ%billing")) == 0
    assert dead_letters_collect(cluster=cluster, subscription="billing", actor=None) == 0
    assert DeadLetter.objects.filter(cluster=cluster).count() == 3
