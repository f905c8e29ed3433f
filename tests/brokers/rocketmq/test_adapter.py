"""The console adapter beyond the shared contract: what the inventory counts, rebuild of
a DLQ's group without touching messages, peek's due times, what a dead letter carries,
and replay to the group's retry topic only."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from brokers import adapter_for
from brokers.base import BrokerError, ClusterConfig, KnownSubscription, ReplayMessage
from brokers.rocketmq.message import Message, decode, prepared
from brokers.rocketmq.naming import DLQ_GROUP
from brokers.rocketmq.producer import Producer
from brokers.rocketmq.retry import send_back
from brokers.rocketmq.topology import subscription_ensure
from tests.fixtures.rocketmq import LIBRARY_DB, SHARED_URL, free_port


def config_for(connection, **extra):
    return ClusterConfig(kind="rocketmq", name="t", service_url=SHARED_URL.format(db=LIBRARY_DB),
                         options={"key_prefix": connection.keys.prefix}, **extra)


def read(connection, topic, group, count):
    key = connection.keys.stream(topic)
    [(_stream, entries)] = connection.client.xreadgroup(group, "c1", {key: ">"}, count=count)
    return [decode(fields, entry_id=entry_id.decode(), stream=key) for entry_id, fields in entries]


def info_of(adapter, name):
    return {s.name: s for s in adapter.list_subscriptions()}[name]


@pytest.fixture
def billing(rocketmq_connection):
    """Group billing on topic orders: 4 sent, 3 fetched, one retried, one dead, one in flight."""
    subscription_ensure(rocketmq_connection, group="billing", topics=["orders"], max_reconsume_times=5)
    with Producer(rocketmq_connection) as producer:
        for i in range(4):
            producer.send(Message(topic="orders", body=f"m{i}".encode(), tags="created", keys=(f"o {i}",),
                                  properties={"tenant": "acme"}))
    first, second, _third = read(rocketmq_connection, "orders", "billing", 3)
    retried = send_back(rocketmq_connection, first, group="billing", max_reconsume_times=5, reason="Timeout")
    dead = send_back(rocketmq_connection, second, group="billing", max_reconsume_times=5, requested_level=-1,
                     reason="ValueError: bad order")
    return {"retried": retried, "dead": dead, "first": first, "second": second}


def test_inventory_counts_backlog_delayed_in_flight_and_dead_letters(rocketmq_connection, billing):
    with adapter_for(config_for(rocketmq_connection)) as adapter:
        info = info_of(adapter, "billing")
    assert (info.source, info.mode) == ("orders", "clustering")
    assert (info.retry_queue, info.dead_letter_queue) == ("%RETRY%billing", "%DLQ%billing")
    assert info.backlog == 1
    assert info.retry_depth == 1 and info.details["delayed"] == 1
    assert info.details["in_flight"] == 1
    assert info.dead_letter_depth == 1
    assert info.details["max_reconsume_times"] == 5
    assert info.healthy


def test_a_dlq_without_its_group_is_reported_and_rebuilt_without_touching_its_messages(
        rocketmq_connection, billing):
    dlq = rocketmq_connection.keys.stream("%DLQ%billing")
    rocketmq_connection.client.xgroup_destroy(dlq, DLQ_GROUP)
    with adapter_for(config_for(rocketmq_connection)) as adapter:
        assert any("no console group" in p for p in info_of(adapter, "billing").problems)
        plan = adapter.plan_rebuild("billing")
        assert [(s.action, s.target) for s in plan.steps] == [("create consumer group", "%DLQ%billing")]
        assert adapter.apply_rebuild(plan).steps == plan.steps
        assert info_of(adapter, "billing").healthy
    assert rocketmq_connection.client.xlen(dlq) == 1


def test_rebuilding_an_unknown_group_is_a_clear_permanent_error(rocketmq_connection):
    with adapter_for(config_for(rocketmq_connection)) as adapter, \
            pytest.raises(BrokerError, match="no consumer group") as caught:
        adapter.plan_rebuild("nobody")
    assert caught.value.permanent


def test_groups_found_on_streams_and_groups_told_to_the_console_are_listed(rocketmq_connection):
    rocketmq_connection.client.sadd(rocketmq_connection.keys.topics, "payments")
    payments = rocketmq_connection.keys.stream("payments")
    rocketmq_connection.client.xgroup_create(payments, "ledger", mkstream=True)
    config = config_for(rocketmq_connection, known_subscriptions=(KnownSubscription("audit", "orders"),))
    with adapter_for(config) as adapter:
        listed = {s.name: s for s in adapter.list_subscriptions()}
    assert listed["ledger"].source == "payments"
    assert any("retry stream" in p for p in listed["ledger"].problems)
    assert listed["audit"].source == "orders" and not listed["audit"].healthy


def test_peek_shows_when_each_retry_is_due_and_leaves_it_waiting(rocketmq_connection, billing):
    with adapter_for(config_for(rocketmq_connection)) as adapter:
        [peeked] = adapter.peek_retry_queue("billing")
        assert adapter.peek_retry_queue("billing") == [peeked]
    assert peeked.due_at == datetime.fromtimestamp(billing["retried"].due_at_ms / 1000, tz=UTC)
    assert peeked.retry_count == 1
    assert peeked.properties["ORIGIN_MESSAGE_ID"] == billing["first"].message_id
    assert peeked.properties["DELAY_LEVEL"] == "3"
    assert peeked.properties["tenant"] == "acme"


def test_a_dead_letter_carries_its_origin_topic_failure_times_and_reason(rocketmq_connection, billing):
    batches = []
    with adapter_for(config_for(rocketmq_connection)) as adapter:
        adapter.collect_dead_letters("billing", batches.append)
    [[letter]] = batches
    assert letter.broker_message_id == billing["dead"].message_id
    assert letter.origin_message_id == billing["second"].message_id
    assert letter.source == "orders" and letter.retry_count == 0
    assert letter.first_failure_at is not None and letter.last_failure_at >= letter.first_failure_at
    assert letter.properties["FAILURE_REASON"] == "ValueError: bad order"
    assert letter.properties["CONSUMER_GROUP"] == "billing"
    assert letter.properties["TAGS"] == "created"


def test_replay_to_the_retry_topic_reaches_only_that_group_with_a_replay_marker(rocketmq_connection, billing):
    batches = []
    with adapter_for(config_for(rocketmq_connection)) as adapter:
        adapter.collect_dead_letters("billing", batches.append)
        [[letter]] = batches
        destinations = [value for value, _label in adapter.replay_destinations("billing")]
        replay = ReplayMessage(key="1", subscription="billing", source=letter.source, payload=letter.payload,
                               properties=letter.properties, origin_message_id=letter.origin_message_id,
                               destination=destinations[1])
        wrong = ReplayMessage(key="2", subscription="billing", source=letter.source, payload=b"x",
                              destination="%DLQ%billing")
        ok, refused = adapter.republish([replay, wrong])
    assert ok.confirmed and not refused.confirmed and refused.permanent
    [[_id, fields]] = rocketmq_connection.client.xrange(rocketmq_connection.keys.stream("%RETRY%billing"))
    copy = decode(fields)
    assert copy.message_id == ok.broker_message_id
    assert copy.reconsume_times == 0 and copy.replay_of == billing["second"].message_id
    assert copy.real_topic == "orders" and copy.tags == "created" and copy.keys == ("o 1",)
    assert dict(copy.properties) == {"tenant": "acme"}


def test_republish_to_an_unreachable_redis_raises_broker_error(rocketmq_connection):
    config = ClusterConfig(kind="rocketmq", name="gone", service_url=f"redis://127.0.0.1:{free_port()}/6",
                           timeout_seconds=1)
    message = prepared(Message(topic="orders", body=b"x"))
    with adapter_for(config) as adapter, pytest.raises(BrokerError, match="unreachable"):
        adapter.republish([ReplayMessage(key="1", subscription="billing", source="orders",
                                         payload=message.body)])
