"""The push consumer against real Redis: what counts as failure, where failed messages
go, how many deliveries a max allows, broadcasting and orderly modes, and recovery when
Redis goes away or a consumer dies. Delay levels are shortened (see the
`rocketmq_connection` fixture); tests/brokers/rocketmq/test_schedule.py checks the real table."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
import redis

from brokers.rocketmq.connection import Connection
from brokers.rocketmq.consumer import ConsumeResult, PushConsumer, RetryLater
from brokers.rocketmq.delay import DelayScheduler
from brokers.rocketmq.message import Message, decode
from brokers.rocketmq.producer import Producer
from brokers.rocketmq.schedule import dead_letter_retry_schedule
from brokers.rocketmq.topology import registrations
from tests.fixtures.rocketmq import wait_for


class Recorder:
    """A listener that records every delivery and answers with `behaviour(message)`."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.seen: list[Message] = []
        self.lock = threading.Lock()

    def __call__(self, message):
        with self.lock:
            self.seen.append(message)
        return self.behaviour(message)


def stream(connection, topic):
    entries = connection.client.xrange(connection.keys.stream(topic))
    return [decode(f, entry_id=i.decode()) for i, f in entries]


def delayed(connection, topic):
    client = connection.client
    return [decode(client.hgetall(connection.keys.delayed_message(member.decode())))
            for member in client.zrange(connection.keys.delay_index(topic), 0, -1)]


def pending(connection, topic, group):
    return connection.client.xpending(connection.keys.stream(topic), group)["pending"]


def group_name():
    return f"g{uuid.uuid4().hex[:8]}"


def send(connection, *bodies, topic="orders", **fields):
    with Producer(connection) as producer:
        return [producer.send(Message(topic=topic, body=body, **fields)) for body in bodies]


def test_success_acknowledges_the_message(rocketmq_connection):
    group = group_name()
    listener = Recorder(lambda m: ConsumeResult.SUCCESS)
    [sent] = send(rocketmq_connection, b"ok")
    with PushConsumer(rocketmq_connection, group, listener, subscriptions={"orders": "*"}):
        assert wait_for(lambda: listener.seen)
        assert wait_for(lambda: pending(rocketmq_connection, "orders", group) == 0)
    assert listener.seen[0].message_id == sent.message_id
    assert delayed(rocketmq_connection, f"%RETRY%{group}") == []


def _raise(message):
    raise RuntimeError("boom")


def _hang(message):
    time.sleep(1.5)
    return ConsumeResult.SUCCESS


@pytest.mark.parametrize("behaviour,reason,timeout", [
    (lambda m: ConsumeResult.RECONSUME_LATER, "RECONSUME_LATER", 30),
    (lambda m: None, "returned nothing", 30),
    (_raise, "RuntimeError: boom", 30),
    (_hang, "consume timeout", 0.5),
])
def test_each_kind_of_failure_sends_a_new_copy_to_the_retry_topic_at_level_three(
        rocketmq_connection, behaviour, reason, timeout):
    group = group_name()
    [sent] = send(rocketmq_connection, b"fail me", tags="created", keys=("o-1",),
                  properties={"tenant": "acme"})
    with PushConsumer(rocketmq_connection, group, Recorder(behaviour), subscriptions={"orders": "*"},
                      consume_timeout=timeout):
        copies = wait_for(lambda: delayed(rocketmq_connection, f"%RETRY%{group}"))
        assert wait_for(lambda: pending(rocketmq_connection, "orders", group) == 0)
    [copy] = copies
    assert copy.message_id != sent.message_id
    assert copy.origin_message_id == sent.message_id
    assert copy.reconsume_times == 1 and copy.delay_level == 3
    assert copy.real_topic == "orders" and copy.topic == f"%RETRY%{group}"
    assert (copy.body, copy.tags, copy.keys, dict(copy.properties)) == (
        b"fail me", "created", ("o-1",), {"tenant": "acme"})
    assert reason in copy.failure_reason


def test_max_three_means_four_deliveries_then_the_dlq(rocketmq_connection):
    group = group_name()
    listener = Recorder(lambda m: ConsumeResult.RECONSUME_LATER)
    [sent] = send(rocketmq_connection, b"always fails")
    scheduler = DelayScheduler(rocketmq_connection).start()
    try:
        with PushConsumer(rocketmq_connection, group, listener, subscriptions={"orders": "*"},
                          max_reconsume_times=3):
            assert wait_for(lambda: stream(rocketmq_connection, f"%DLQ%{group}"), timeout=20)
            time.sleep(1.5)  # room for a (wrong) fifth delivery to show up
    finally:
        scheduler.stop()
    assert [m.reconsume_times for m in listener.seen] == [0, 1, 2, 3]
    ids = [m.message_id for m in listener.seen]
    assert len(set(ids)) == 4  # every retry is a new message
    assert {m.origin_message_id or m.message_id for m in listener.seen} == {sent.message_id}
    assert [m.topic for m in listener.seen] == ["orders"] + [f"%RETRY%{group}"] * 3
    [dead] = stream(rocketmq_connection, f"%DLQ%{group}")
    assert dead.origin_message_id == sent.message_id and dead.reconsume_times == 4
    assert dead.message_id not in ids
    steps = dead_letter_retry_schedule(dead.all_properties(), delay_levels=rocketmq_connection.delay_levels)
    assert [(s.destination, s.level) for s in steps] == [("retry", 3), ("retry", 4), ("retry", 5), ("dlq", 0)]
    assert delayed(rocketmq_connection, f"%RETRY%{group}") == []


def test_the_consumer_is_subscribed_to_its_retry_topic_automatically(rocketmq_connection):
    group = group_name()
    answers = iter([ConsumeResult.RECONSUME_LATER, ConsumeResult.SUCCESS])
    listener = Recorder(lambda m: next(answers))
    send(rocketmq_connection, b"once")
    scheduler = DelayScheduler(rocketmq_connection).start()
    try:
        with PushConsumer(rocketmq_connection, group, listener, subscriptions={"orders": "*"}):
            assert wait_for(lambda: len(listener.seen) == 2, timeout=10)
            assert wait_for(lambda: pending(rocketmq_connection, f"%RETRY%{group}", group) == 0)
    finally:
        scheduler.stop()
    assert listener.seen[1].topic == f"%RETRY%{group}"
    assert registrations(rocketmq_connection)[group].topics == ("orders",)
    assert stream(rocketmq_connection, f"%DLQ%{group}") == []


def test_a_requested_level_is_used_and_a_negative_level_goes_straight_to_the_dlq(rocketmq_connection):
    group = group_name()
    listener = Recorder(lambda m: RetryLater(level=1) if m.body == b"soon" else RetryLater(level=-1))
    send(rocketmq_connection, b"soon", b"dead now")
    with PushConsumer(rocketmq_connection, group, listener, subscriptions={"orders": "*"}):
        assert wait_for(lambda: delayed(rocketmq_connection, f"%RETRY%{group}")
                        and stream(rocketmq_connection, f"%DLQ%{group}"))
    [retry] = delayed(rocketmq_connection, f"%RETRY%{group}")
    assert (retry.body, retry.delay_level) == (b"soon", 1)
    [dead] = stream(rocketmq_connection, f"%DLQ%{group}")
    assert dead.body == b"dead now" and dead.reconsume_times == 1


def test_tag_expressions_filter_what_the_listener_sees(rocketmq_connection):
    group = group_name()
    listener = Recorder(lambda m: ConsumeResult.SUCCESS)
    with Producer(rocketmq_connection) as producer:
        for tag in ("TagA", "TagB", "TagC", ""):
            producer.send(Message(topic="orders", body=tag.encode() or b"none", tags=tag))
    with PushConsumer(rocketmq_connection, group, listener, subscriptions={"orders": "TagA || TagC"}):
        assert wait_for(lambda: pending(rocketmq_connection, "orders", group) == 0
                        and len(listener.seen) == 2)
        time.sleep(0.3)
    assert sorted(m.tags for m in listener.seen) == ["TagA", "TagC"]


def test_broadcasting_delivers_to_every_consumer_and_never_retries(rocketmq_connection, caplog):
    group = group_name()
    first = Recorder(lambda m: ConsumeResult.RECONSUME_LATER)
    second = Recorder(lambda m: ConsumeResult.SUCCESS)
    news = {"news": "*"}
    send(rocketmq_connection, b"before", topic="news")  # an instance starts after it: not delivered
    with caplog.at_level(logging.WARNING, logger="brokers.rocketmq.consumer"), \
            PushConsumer(rocketmq_connection, group, first, subscriptions=news, mode="broadcasting"), \
            PushConsumer(rocketmq_connection, group, second, subscriptions=news, mode="broadcasting"):
        send(rocketmq_connection, b"n1", b"n2", topic="news")
        assert wait_for(lambda: len(first.seen) == 2 and len(second.seen) == 2)
        time.sleep(0.5)
    assert [m.body for m in first.seen] == [b"n1", b"n2"]
    assert [m.body for m in second.seen] == [b"n1", b"n2"]
    assert "never retries" in caplog.text
    assert not rocketmq_connection.client.exists(rocketmq_connection.keys.stream(f"%RETRY%{group}"))
    assert delayed(rocketmq_connection, f"%RETRY%{group}") == []


def test_orderly_retries_in_place_blocking_the_queue_and_never_leaves_it(rocketmq_connection):
    group = group_name()
    failures = {"m1": 2}

    def behaviour(message):
        body = message.body.decode()
        if failures.get(body, 0) > 0:
            failures[body] -= 1
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    listener = Recorder(behaviour)
    send(rocketmq_connection, b"m1", b"m2", b"m3", topic="ledger")
    with PushConsumer(rocketmq_connection, group, listener, subscriptions={"ledger": "*"}, mode="orderly",
                      suspend_seconds=0.2):
        assert wait_for(lambda: len(listener.seen) == 5, timeout=10)
        assert wait_for(lambda: pending(rocketmq_connection, "ledger", group) == 0)
    assert [m.body for m in listener.seen] == [b"m1", b"m1", b"m1", b"m2", b"m3"]
    assert [m.reconsume_times for m in listener.seen[:3]] == [0, 1, 2]
    assert len({m.message_id for m in listener.seen[:3]}) == 1  # the same message, in place
    assert delayed(rocketmq_connection, f"%RETRY%{group}") == []
    assert stream(rocketmq_connection, f"%RETRY%{group}") == []


def test_orderly_with_a_max_sends_the_message_to_the_dlq_and_moves_on(rocketmq_connection):
    group = group_name()
    listener = Recorder(lambda m: ConsumeResult.SUCCESS if m.body == b"m2" else None)
    send(rocketmq_connection, b"m1", b"m2", topic="ledger")
    with PushConsumer(rocketmq_connection, group, listener, subscriptions={"ledger": "*"}, mode="orderly",
                      suspend_seconds=0.1, max_reconsume_times=2):
        assert wait_for(lambda: [m.body for m in listener.seen][-1:] == [b"m2"], timeout=10)
    assert [m.body for m in listener.seen] == [b"m1", b"m1", b"m1", b"m2"]
    [dead] = stream(rocketmq_connection, f"%DLQ%{group}")
    assert dead.body == b"m1"


def test_a_message_of_a_crashed_consumer_is_claimed_by_another_after_the_timeout(rocketmq_connection):
    group = group_name()
    listener = Recorder(lambda m: ConsumeResult.SUCCESS)
    # A consumer fetches the message and dies before settling it.
    from brokers.rocketmq.topology import subscription_ensure

    subscription_ensure(rocketmq_connection, group=group, topics=["orders"])
    [sent] = send(rocketmq_connection, b"orphan")
    key = rocketmq_connection.keys.stream("orders")
    assert rocketmq_connection.client.xreadgroup(group, "crashed", {key: ">"}, count=1)
    with PushConsumer(rocketmq_connection, group, listener, subscriptions={"orders": "*"},
                      consume_timeout=0.5):
        assert wait_for(lambda: listener.seen, timeout=10)
        assert wait_for(lambda: pending(rocketmq_connection, "orders", group) == 0)
    assert listener.seen[0].message_id == sent.message_id


def test_when_sending_back_fails_the_message_is_consumed_again_locally_after_five_seconds(private_redis):
    server = private_redis(persistent=True)
    connection = Connection.from_url(server.url, prefix="c:", timeout=1)
    group = group_name()
    restarted = threading.Event()

    def behaviour(message):
        if message.reconsume_times == 0:
            server.stop()  # Redis goes away while the listener runs: the send-back fails
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    listener = Recorder(behaviour)
    [sent] = send(connection, b"keep me")
    consumer = PushConsumer(connection, group, listener, subscriptions={"orders": "*"}).start()
    try:
        assert wait_for(lambda: listener.seen, timeout=10)
        time.sleep(1)
        server.start()  # same port, same data (append-only file)
        restarted.set()
        assert wait_for(lambda: len(listener.seen) == 2, timeout=15)
        assert wait_for(lambda: _safe_pending(connection, group) == 0, timeout=10)
    finally:
        consumer.shutdown()
    assert [m.reconsume_times for m in listener.seen] == [0, 1]
    assert listener.seen[1].message_id == sent.message_id  # the same message, consumed locally again
    assert delayed(connection, f"%RETRY%{group}") == []
    assert stream(connection, f"%DLQ%{group}") == []


def _safe_pending(connection, group):
    try:
        return pending(connection, "orders", group)
    except redis.RedisError:
        return None
