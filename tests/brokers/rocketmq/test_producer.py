"""The producer: sync and async sends, immediate retry, flow-control back-off, and the
outbox that keeps what Redis could not take (tested by stopping a real redis-server)."""

from __future__ import annotations

import random
import threading

import pytest
import redis

from brokers.base import BrokerError
from brokers.rocketmq.connection import Connection
from brokers.rocketmq.message import Message, decode
from brokers.rocketmq.outbox import Outbox
from brokers.rocketmq.producer import BackoffPolicy, Producer, SendStatus
from tests.fixtures.rocketmq import free_port, wait_for


def entries(connection, topic):
    return [decode(fields) for _id, fields in connection.client.xrange(connection.keys.stream(topic))]


def test_send_returns_once_the_message_is_stored_with_an_id_and_born_time(rocketmq_connection):
    with Producer(rocketmq_connection) as producer:
        result = producer.send(Message(topic="orders", body=b'{"order": 1}', tags="created", keys=("o-1",)))
    assert result.status == SendStatus.SEND_OK and result.attempts == 1
    [message] = entries(rocketmq_connection, "orders")
    assert message.message_id == result.message_id
    assert message.born_at_ms > 0 and message.reconsume_times == 0
    assert (message.tags, message.keys) == ("created", ("o-1",))


def test_send_async_calls_back_with_the_result(rocketmq_connection):
    done = threading.Event()
    seen = []

    def callback(result, error):
        seen.append((result, error))
        done.set()

    with Producer(rocketmq_connection) as producer:
        future = producer.send_async(Message(topic="orders", body=b"async"), callback)
        assert future.result(timeout=10).ok
        assert done.wait(10)
    [(result, error)] = seen
    assert error is None and result.ok
    assert [m.body for m in entries(rocketmq_connection, "orders")] == [b"async"]


def test_send_async_reports_a_message_that_can_never_be_sent_to_the_callback(rocketmq_connection):
    seen = []
    with Producer(rocketmq_connection) as producer:
        producer.send_async(Message(topic="orders", body=b""), lambda r, e: seen.append((r, e)))
    [(result, error)] = seen
    assert result is None and "empty" in str(error)


def test_ordinary_errors_are_retried_at_once_and_then_raise_a_clear_error_without_an_outbox():
    # (With an outbox, the default, the message would be kept: see the outbox tests.)
    connection = Connection.from_url(f"redis://127.0.0.1:{free_port()}/6", prefix="x:", timeout=1)
    waits = []
    producer = Producer(connection, outbox=None, sleep=waits.append)
    with pytest.raises(BrokerError, match="after 3 attempts.*unreachable") as caught:
        producer.send(Message(topic="orders", body=b"x"))
    assert not caught.value.permanent
    assert waits == []  # no back-off for errors other than flow control


def test_backoff_waits_start_at_one_second_grow_by_1_6_with_jitter_and_stop_at_120():
    waits = BackoffPolicy().waits(random.Random(7))
    values = [next(waits) for _ in range(20)]
    assert values[0] == 1.0
    current = 1.0
    for value in values[1:]:
        current = min(current * 1.6, 120.0)
        assert current * 0.8 <= value <= current * 1.2
    assert max(values) <= 144.0
    assert values[-1] >= 96.0


def test_flow_control_is_retried_after_a_back_off(private_redis):
    server = private_redis()
    admin = redis.Redis(port=server.port)
    admin.config_set("maxmemory", 1)  # every write is refused with OOM
    waits = []

    def sleep(seconds):
        waits.append(seconds)
        admin.config_set("maxmemory", 0)  # the server recovers while the producer waits

    connection = Connection.from_url(server.url, prefix="p:")
    producer = Producer(connection, outbox=None, sleep=sleep)
    result = producer.send(Message(topic="orders", body=b"x"))
    assert result.ok and result.attempts == 2
    assert waits == [1.0]
    assert [m.body for m in entries(connection, "orders")] == [b"x"]


def test_a_send_redis_cannot_take_goes_to_the_outbox_and_arrives_after_redis_returns(private_redis, tmp_path):
    server = private_redis()
    connection = Connection.from_url(server.url, prefix="p:", timeout=1)
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    with Producer(connection, outbox=outbox, outbox_interval=0.2) as producer:
        assert producer.send(Message(topic="orders", body=b"before")).ok
        server.stop()

        result = producer.send(Message(topic="orders", body=b"during", keys=("k 1",), properties={"a": "b"}))
        async_results = []
        producer.send_async(Message(topic="orders", body=b"async during"),
                            lambda r, e: async_results.append(r)).result(timeout=10)

        assert result.status == SendStatus.DEFERRED
        assert "unreachable" in result.error and "outbox" in result.error
        assert [r.status for r in async_results] == [SendStatus.DEFERRED]
        assert outbox.count() == 2  # on disk while Redis is away

        server.start()  # comes back empty: only the outbox can bring the messages
        assert wait_for(lambda: len(entries(connection, "orders")) == 2, timeout=15)
    arrived = entries(connection, "orders")
    assert [m.body for m in arrived] == [b"during", b"async during"]
    assert arrived[0].message_id == result.message_id
    assert arrived[0].keys == ("k 1",) and arrived[0].properties == {"a": "b"}
    assert outbox.count() == 0


def test_the_outbox_survives_the_producer_process_and_a_new_producer_drains_it(private_redis, tmp_path):
    server = private_redis()
    connection = Connection.from_url(server.url, prefix="p:", timeout=1)
    path = tmp_path / "outbox.sqlite3"
    server.stop()
    first = Producer(connection, outbox=path)  # never started: no retrier, like a crashed process
    assert first.send(Message(topic="orders", body=b"kept")).status == SendStatus.DEFERRED
    server.start()

    second = Producer(connection, outbox=path)
    assert second.drain_outbox() == 1
    assert [m.body for m in entries(connection, "orders")] == [b"kept"]
    assert Outbox(path).count() == 0


def test_send_batch_sends_all_in_one_pipeline(rocketmq_connection):
    with Producer(rocketmq_connection) as producer:
        results = producer.send_batch([Message(topic="orders", body=f"m{i}".encode()) for i in range(50)])
    assert all(r.ok for r in results)
    assert [m.body for m in entries(rocketmq_connection, "orders")] == [f"m{i}".encode() for i in range(50)]
