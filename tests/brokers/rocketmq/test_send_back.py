"""Sending a failed message back is all or nothing: if the copy cannot be stored, the
original is not acknowledged and stays pending for the group."""

from __future__ import annotations

import pytest

from brokers.base import BrokerError
from brokers.rocketmq.message import Message, decode
from brokers.rocketmq.producer import Producer
from brokers.rocketmq.retry import send_back, send_back_many
from brokers.rocketmq.topology import subscription_ensure


def fetch(connection, group, count=1):
    key = connection.keys.stream("orders")
    [(_stream, entries)] = connection.client.xreadgroup(group, "c1", {key: ">"}, count=count)
    return [decode(fields, entry_id=entry_id.decode(), stream=key) for entry_id, fields in entries]


def pending(connection, group):
    return connection.client.xpending(connection.keys.stream("orders"), group)["pending"]


@pytest.fixture
def two_fetched(rocketmq_connection):
    subscription_ensure(rocketmq_connection, group="billing", topics=["orders"])
    with Producer(rocketmq_connection) as producer:
        producer.send(Message(topic="orders", body=b"a"))
        producer.send(Message(topic="orders", body=b"b"))
    return fetch(rocketmq_connection, "billing", 2)


def test_when_the_retry_copy_cannot_be_stored_the_original_stays_pending(rocketmq_connection, two_fetched):
    # Make Redis refuse the write: the delay set's key holds a value of the wrong type.
    rocketmq_connection.client.set(rocketmq_connection.keys.delay, "in the way")
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        send_back(rocketmq_connection, two_fetched[0], group="billing", max_reconsume_times=16)
    assert pending(rocketmq_connection, "billing") == 2

    rocketmq_connection.client.delete(rocketmq_connection.keys.delay)
    sent = send_back(rocketmq_connection, two_fetched[0], group="billing", max_reconsume_times=16)
    assert sent.destination == "retry"
    assert pending(rocketmq_connection, "billing") == 1


def test_in_a_batch_each_message_is_sent_back_or_left_pending_on_its_own(rocketmq_connection, two_fetched):
    dlq = rocketmq_connection.keys.stream("%DLQ%billing")
    rocketmq_connection.client.delete(dlq)
    rocketmq_connection.client.set(dlq, "in the way")  # the DLQ write will fail, the retry will not
    retry, dead = two_fetched
    answers = send_back_many(rocketmq_connection, [(retry, 0, "slow"), (dead, -1, "bad")], group="billing",
                             max_reconsume_times=16)
    assert answers[0].destination == "retry"
    assert isinstance(answers[1], BrokerError)
    [still_pending] = rocketmq_connection.client.xpending_range(
        rocketmq_connection.keys.stream("orders"), "billing", "-", "+", 10)
    assert still_pending["message_id"].decode() == dead.entry_id
