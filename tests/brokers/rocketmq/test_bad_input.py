"""Bad input gets a clear error and changes nothing; odd but valid input survives unchanged."""

from __future__ import annotations

import pytest

from brokers import adapter_for
from brokers.base import BrokerError, ClusterConfig
from brokers.rocketmq.consumer import PushConsumer
from brokers.rocketmq.message import MAX_MESSAGE_BYTES, Message, MessageError, decode
from brokers.rocketmq.producer import Producer
from brokers.rocketmq.topology import subscription_ensure


def stored(connection, topic):
    return [decode(fields) for _id, fields in connection.client.xrange(connection.keys.stream(topic))]


def test_keys_with_separators_and_odd_tags_round_trip_unchanged(rocketmq_connection):
    keys = ("order 1", "a,b", "x||y", "tab\there", "日本")
    with Producer(rocketmq_connection) as producer:
        producer.send(Message(topic="orders", body=b"x", tags="Tag A,B", keys=keys,
                              properties={"note": "a b || c", "emoji": "\u202e"}))
    [message] = stored(rocketmq_connection, "orders")
    assert message.keys == keys
    assert message.tags == "Tag A,B"
    assert message.properties == {"note": "a b || c", "emoji": "\u202e"}


@pytest.mark.parametrize("tag", ["TagA||TagB", "*", " padded "])
def test_a_tag_that_could_never_match_a_subscription_is_refused(rocketmq_connection, tag):
    with Producer(rocketmq_connection) as producer, pytest.raises(MessageError, match="tag"):
        producer.send(Message(topic="orders", body=b"x", tags=tag))
    assert stored(rocketmq_connection, "orders") == []


def test_an_empty_body_is_refused_with_a_clear_error(rocketmq_connection):
    with Producer(rocketmq_connection) as producer, pytest.raises(MessageError, match="empty"):
        producer.send(Message(topic="orders", body=b""))
    assert stored(rocketmq_connection, "orders") == []


def test_a_four_mebibyte_body_is_sent_whole_and_one_byte_more_is_refused(rocketmq_connection):
    big = bytes(range(256)) * (MAX_MESSAGE_BYTES // 256)
    assert len(big) == MAX_MESSAGE_BYTES
    with Producer(rocketmq_connection) as producer:
        assert producer.send(Message(topic="big", body=big)).ok
        with pytest.raises(MessageError, match="more than"):
            producer.send(Message(topic="big", body=big + b"!"))
    [message] = stored(rocketmq_connection, "big")
    assert message.body == big


def test_a_reserved_property_name_is_refused(rocketmq_connection):
    with Producer(rocketmq_connection) as producer, pytest.raises(MessageError, match="system property"):
        producer.send(Message(topic="orders", body=b"x", properties={"RECONSUME_TIMES": "0"}))


@pytest.mark.parametrize("topic", ["", "has space", "%DLQ%billing", "%RETRY%billing", "x" * 200])
def test_bad_or_system_topics_are_refused_for_producers(rocketmq_connection, topic):
    with Producer(rocketmq_connection) as producer, pytest.raises(MessageError):
        producer.send(Message(topic=topic, body=b"x"))


def test_a_consumer_group_name_with_percent_is_refused_everywhere_with_a_clear_error(rocketmq_connection):
    with pytest.raises(MessageError, match="'%' is reserved"):
        subscription_ensure(rocketmq_connection, group="bill%ing", topics=["orders"])
    with pytest.raises(MessageError, match="'%' is reserved"):
        PushConsumer(rocketmq_connection, "bill%ing", lambda m: None, subscriptions={"orders": "*"}).start()
    config = ClusterConfig(kind="rocketmq", name="x", service_url="redis://127.0.0.1:6379/6",
                           options={"key_prefix": rocketmq_connection.keys.prefix})
    with adapter_for(config) as adapter:
        with pytest.raises(BrokerError, match="'%' is reserved") as caught:
            adapter.plan_rebuild("%DLQ%billing")
        assert caught.value.permanent
        with pytest.raises(BrokerError, match="'%' is reserved"):
            adapter.discard_dead_letters("bill%ing")
    assert rocketmq_connection.client.keys(f"{rocketmq_connection.keys.prefix}*") == []


def test_consumers_cannot_subscribe_to_a_dlq(rocketmq_connection):
    consumer = PushConsumer(rocketmq_connection, "billing", lambda m: None)
    with pytest.raises(MessageError, match="dead-letter topic"):
        consumer.subscribe("%DLQ%billing")
