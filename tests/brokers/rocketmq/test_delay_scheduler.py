"""The delay set and its scheduler: due messages reach their stream, once, even across a
killed scheduler process or two schedulers at once; the real level table sets due times."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from brokers.rocketmq.connection import Connection
from brokers.rocketmq.delay import DelayScheduler, delay_store, move_due
from brokers.rocketmq.message import Message, decode, now_ms, prepared
from brokers.rocketmq.producer import Producer
from brokers.rocketmq.retry import send_back
from brokers.rocketmq.topology import subscription_ensure
from tests.fixtures.rocketmq import LIBRARY_DB, SHARED_URL, wait_for

ROOT = Path(__file__).resolve().parents[3]


def stream(connection, topic):
    return [decode(f) for _i, f in connection.client.xrange(connection.keys.stream(topic))]


def test_a_message_moves_when_it_is_due_and_not_a_moment_before(rocketmq_connection):
    message = prepared(Message(topic="later", body=b"x"))
    due = now_ms() + 60_000
    delay_store(rocketmq_connection, message, due)
    assert move_due(rocketmq_connection, now=due - 1) == 0
    assert stream(rocketmq_connection, "later") == []
    assert move_due(rocketmq_connection, now=due) == 1
    [moved] = stream(rocketmq_connection, "later")
    assert moved.message_id == message.message_id
    assert rocketmq_connection.client.zcard(rocketmq_connection.keys.delay) == 0
    assert not rocketmq_connection.client.exists(rocketmq_connection.keys.delayed_message(message.message_id))


def test_a_producer_delayed_message_reaches_its_topic_through_the_scheduler(rocketmq_connection):
    scheduler = DelayScheduler(rocketmq_connection).start()
    try:
        with Producer(rocketmq_connection) as producer:
            result = producer.send(Message(topic="later", body=b"x"), delay_level=1)
        assert stream(rocketmq_connection, "later") == []  # waiting in the delay set
        arrived = wait_for(lambda: stream(rocketmq_connection, "later"), timeout=5)
    finally:
        scheduler.stop()
    assert [m.message_id for m in arrived] == [result.message_id]


def _scheduler_process(prefix: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        from brokers.rocketmq.connection import Connection
        from brokers.rocketmq.delay import DelayScheduler
        DelayScheduler(Connection.from_url({SHARED_URL.format(db=LIBRARY_DB)!r}, prefix={prefix!r})).run()
    """)
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)


def test_the_scheduler_survives_being_killed_and_delivers_each_message_once(rocketmq_connection):
    prefix = rocketmq_connection.keys.prefix
    first = _scheduler_process(prefix)
    with Producer(rocketmq_connection) as producer:
        sent = [producer.send(Message(topic="later", body=f"m{i}".encode()), delay_level=4).message_id
                for i in range(50)]  # level 4 is 0.3 s in the test table
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    with Producer(rocketmq_connection) as producer:
        sent += [producer.send(Message(topic="later", body=f"n{i}".encode()), delay_level=5).message_id
                 for i in range(50)]
    second = _scheduler_process(prefix)
    try:
        assert wait_for(lambda: len(stream(rocketmq_connection, "later")) >= 100, timeout=20)
    finally:
        second.terminate()
        second.wait(10)
    ids = [m.message_id for m in stream(rocketmq_connection, "later")]
    assert sorted(ids) == sorted(sent)  # each exactly once
    assert rocketmq_connection.client.zcard(rocketmq_connection.keys.delay) == 0


def test_two_schedulers_at_once_never_deliver_a_message_twice(rocketmq_connection):
    due = now_ms() + 300
    messages = [prepared(Message(topic="later", body=f"m{i}".encode())) for i in range(400)]
    for message in messages:
        delay_store(rocketmq_connection, message, due)
    schedulers = [DelayScheduler(rocketmq_connection).start() for _ in range(2)]
    try:
        assert wait_for(lambda: len(stream(rocketmq_connection, "later")) >= 400, timeout=10)
    finally:
        for scheduler in schedulers:
            scheduler.stop()
    assert len(stream(rocketmq_connection, "later")) == 400


def test_with_the_real_table_a_first_failure_is_due_ten_seconds_later(rocketmq_prefix):
    connection = Connection.from_url(SHARED_URL.format(db=LIBRARY_DB), prefix=rocketmq_prefix)
    subscription_ensure(connection, group="billing", topics=["orders"])
    failed = prepared(Message(topic="orders", body=b"x"))
    before = now_ms()
    first = send_back(connection, failed, group="billing", max_reconsume_times=16)
    sixteenth = send_back(connection, prepared(Message(topic="orders", body=b"y", reconsume_times=15)),
                          group="billing", max_reconsume_times=16)
    after = now_ms()
    assert first.level == 3 and before + 10_000 <= first.due_at_ms <= after + 10_000
    assert sixteenth.level == 18 and before + 7_200_000 <= sixteenth.due_at_ms <= after + 7_200_000
    scores = dict(connection.client.zrange(connection.keys.delay_index("%RETRY%billing"), 0, -1,
                                           withscores=True))
    assert sorted(int(s) for s in scores.values()) == [first.due_at_ms, sixteenth.due_at_ms]
