"""The simple consumer: invisible durations, ack, change_invisible_duration, retries and DLQ."""

from __future__ import annotations

import time
import uuid

import pytest

from brokers.rocketmq.message import Message, decode, now_ms
from brokers.rocketmq.producer import Producer
from brokers.rocketmq.simple import ReceiptError, SimpleConsumer


@pytest.fixture
def consumer(rocketmq_connection):
    simple = SimpleConsumer(rocketmq_connection, f"s{uuid.uuid4().hex[:8]}", {"orders": "*"}).start()
    return simple


def send(connection, *bodies):
    with Producer(connection) as producer:
        return [producer.send(Message(topic="orders", body=body)) for body in bodies]


def sleep_until(ms):
    time.sleep(max(0.0, (ms - now_ms()) / 1000) + 0.05)


def test_a_received_message_is_invisible_until_its_duration_ends_then_comes_back(
        rocketmq_connection, consumer):
    [sent] = send(rocketmq_connection, b"m")
    [first] = consumer.receive(10, invisible_duration=2)
    assert first.message.message_id == sent.message_id and first.message.reconsume_times == 0
    assert consumer.receive(10, invisible_duration=2) == []  # invisible
    sleep_until(first.receipt.invisible_until_ms)
    [again] = consumer.receive(10, invisible_duration=5)
    assert again.message.message_id == sent.message_id
    assert again.message.reconsume_times == 1


def test_ack_settles_the_message_for_good(rocketmq_connection, consumer):
    send(rocketmq_connection, b"m")
    [received] = consumer.receive(1, invisible_duration=5)
    consumer.ack(received)
    key = rocketmq_connection.keys.stream("orders")
    assert rocketmq_connection.client.xpending(key, consumer.group)["pending"] == 0
    # Nothing is left to make it visible again: no deadline, no receipt.
    assert rocketmq_connection.client.zcard(rocketmq_connection.keys.invisible(consumer.group)) == 0
    assert rocketmq_connection.client.hlen(rocketmq_connection.keys.receipts(consumer.group)) == 0
    assert consumer.receive(10, invisible_duration=1) == []


def test_the_retry_interval_is_the_invisible_duration_minus_the_time_spent(rocketmq_connection, consumer):
    send(rocketmq_connection, b"m")
    [received] = consumer.receive(1, invisible_duration=3.0)
    time.sleep(0.5)  # processing took 0.5 s and failed (no ack)
    # Visible again when the duration ends, i.e. 2.5 s after processing stopped.
    assert consumer.receive(1, invisible_duration=3.0) == []
    sleep_until(received.receipt.invisible_until_ms)
    assert [r.message.body for r in consumer.receive(1, invisible_duration=3.0)] == [b"m"]


def test_processing_past_the_duration_is_retried_at_once_and_the_late_ack_is_refused(
        rocketmq_connection, consumer):
    send(rocketmq_connection, b"m")
    [received] = consumer.receive(1, invisible_duration=0.2)
    time.sleep(0.4)
    with pytest.raises(ReceiptError, match="has ended"):
        consumer.ack(received)
    [again] = consumer.receive(1, invisible_duration=5)
    with pytest.raises(ReceiptError, match="no longer valid"):
        consumer.ack(received)  # the old receipt cannot ack the new delivery
    consumer.ack(again)


def test_change_invisible_duration_extends_only_before_timeout_and_ack(rocketmq_connection, consumer):
    send(rocketmq_connection, b"a", b"b")
    first, second = consumer.receive(2, invisible_duration=1.5)
    extended = consumer.change_invisible_duration(first, 5)
    assert extended.receipt.invisible_until_ms > first.receipt.invisible_until_ms
    sleep_until(first.receipt.invisible_until_ms)
    # Only the one not extended is visible again.
    assert [r.message.body for r in consumer.receive(10, invisible_duration=5)] == [second.message.body]
    consumer.ack(extended)
    with pytest.raises(ReceiptError):
        consumer.change_invisible_duration(extended, 5)  # after ack
    with pytest.raises(ReceiptError):
        consumer.change_invisible_duration(second, 5)  # after timeout


def test_after_max_retries_a_timed_out_message_goes_to_the_dlq(rocketmq_connection):
    group = f"s{uuid.uuid4().hex[:8]}"
    consumer = SimpleConsumer(rocketmq_connection, group, {"orders": "*"}, max_reconsume_times=2).start()
    [sent] = send(rocketmq_connection, b"m")
    seen = []
    for _ in range(3):
        [received] = consumer.receive(1, invisible_duration=0.2, wait_seconds=2)
        seen.append(received.message.reconsume_times)
        sleep_until(received.receipt.invisible_until_ms)
    assert seen == [0, 1, 2]
    assert consumer.receive(1, invisible_duration=0.2) == []
    [[_id, fields]] = rocketmq_connection.client.xrange(rocketmq_connection.keys.stream(f"%DLQ%{group}"))
    dead = decode(fields)
    assert dead.origin_message_id == sent.message_id and dead.reconsume_times == 3
    source = rocketmq_connection.keys.stream("orders")
    assert rocketmq_connection.client.xpending(source, group)["pending"] == 0


def test_two_simple_consumers_of_a_group_never_hold_the_same_message(rocketmq_connection, consumer):
    other = SimpleConsumer(rocketmq_connection, consumer.group, {"orders": "*"}).start()
    send(rocketmq_connection, *[f"m{i}".encode() for i in range(20)])
    mine = consumer.receive(10, invisible_duration=5)
    theirs = other.receive(20, invisible_duration=5)
    bodies = [r.message.body for r in mine + theirs]
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(20))
