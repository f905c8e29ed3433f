"""`RetryConsumer.reconsume_later` and the negative-ack route, against pulsar-lite.

pulsar-lite ignores deliver-after: every retry copy is delivered at once. So these
tests check the delay that was *chosen* (DELAY_TIME) and that only Shared/Key_Shared
consumers ask for delayed delivery (`delayed_delivery`), never that the broker waited:
that the broker holds a delayed message back cannot be covered here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pulsar
import pytest

from brokers.pulsar.naming import CONSOLE_SUBSCRIPTION, retry_topology
from brokers.pulsar.retry import (
    RetryConsumer,
    negative_ack_consumer,
    retry_count_of,
)
from tests.fixtures.pulsar import drain, unique

SEVENTEEN_FAILURES = 17


@pytest.fixture
def names():
    return f"persistent://public/default/{unique('orders')}", unique("billing")


def publish(client, topic, *messages, properties=None):
    producer = client.create_producer(topic)
    for payload in messages:
        producer.send(payload, properties=dict(properties or {}))
    producer.close()


def retry_consumer(client, topic, subscription, **options):
    options.setdefault("initial_position", pulsar.InitialPosition.Earliest)
    return RetryConsumer(client, topic, subscription, **options)


def dlq_messages(client, topic, subscription, *, dead_letter_topic=None):
    dlq = dead_letter_topic or retry_topology(topic, subscription).dead_letter_topic
    consumer = client.subscribe(dlq, CONSOLE_SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared)
    try:
        return drain(consumer, timeout_ms=1000)
    finally:
        consumer.close()


def test_a_retry_is_a_new_message_on_the_retry_topic_carrying_every_property(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b'{"order": 7}', properties={"tenant": "acme", "trace": "t-1"})
    with retry_consumer(pulsar_client, topic, sub) as consumer:
        original = consumer.receive(10_000)
        decision = consumer.reconsume_later(original, delay=30, properties={"error": "Timeout"})
        copy = consumer.receive(10_000)
        consumer.acknowledge(copy)

    topology = retry_topology(topic, sub)
    assert not decision.dead_letter
    assert copy.topic_name() == topology.retry_topic
    assert copy.data() == b'{"order": 7}'
    assert str(copy.message_id()) != str(original.message_id())
    assert copy.properties() == {
        "tenant": "acme", "trace": "t-1", "error": "Timeout",
        "REAL_TOPIC": topic, "ORIGIN_MESSAGE_ID": str(original.message_id()),
        "RETRY_TOPIC": topology.retry_topic, "RECONSUMETIMES": "1", "DELAY_TIME": "30000",
    }


def test_the_original_is_acknowledged_once_the_copy_is_published(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"once")
    with retry_consumer(pulsar_client, topic, sub) as consumer:
        consumer.reconsume_later(consumer.receive(10_000), delay=1)
        consumer.acknowledge(consumer.receive(10_000))  # the retry copy
    # A new consumer on the subscription gets nothing back: the original was acked.
    with retry_consumer(pulsar_client, topic, sub) as again:
        assert again.poll(1500) is None


def test_seventeenth_failure_goes_to_the_dlq_by_default_with_the_origin_kept(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"poison", properties={"tenant": "acme"})
    decisions, ids = [], []
    with retry_consumer(pulsar_client, topic, sub, delay_levels=[1]) as consumer:
        origin = None
        for _ in range(SEVENTEEN_FAILURES):
            message = consumer.receive(10_000)
            origin = origin or str(message.message_id())
            ids.append(str(message.message_id()) + message.topic_name())
            decisions.append(consumer.reconsume_later(message))
        assert consumer.poll(1000) is None  # nothing left to retry

    assert [d.dead_letter for d in decisions] == [False] * 16 + [True]
    assert [d.retry_count for d in decisions[:16]] == list(range(1, 17))
    assert len(set(ids)) == SEVENTEEN_FAILURES  # each retry was a new message
    [dead] = dlq_messages(pulsar_client, topic, sub)
    assert dead.data() == b"poison"
    assert dead.properties()["RECONSUMETIMES"] == "16"
    assert dead.properties()["ORIGIN_MESSAGE_ID"] == origin
    assert dead.properties()["REAL_TOPIC"] == topic
    assert dead.properties()["tenant"] == "acme"


def test_a_lower_max_sends_the_message_to_the_dlq_sooner(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"x")
    with retry_consumer(pulsar_client, topic, sub, max_redeliver_count=2, delay_levels=[1]) as consumer:
        decisions = [consumer.reconsume_later(consumer.receive(10_000)) for _ in range(3)]
    assert [d.dead_letter for d in decisions] == [False, False, True]
    assert len(dlq_messages(pulsar_client, topic, sub)) == 1


def test_level_increment_waits_level_n_on_retry_n_capped_at_the_last(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"slow")
    with retry_consumer(pulsar_client, topic, sub, max_redeliver_count=20) as consumer:
        message = consumer.receive(10_000)
        delays = []
        for _ in range(20):
            consumer.reconsume_later(message)
            message = consumer.receive(10_000)
            delays.append(int(message.properties()["DELAY_TIME"]) // 1000)
        consumer.acknowledge(message)
    assert delays == [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                      3600, 7200, 7200, 7200]


def test_explicit_levels_and_delays_set_delay_time(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"a", b"b", b"c")
    with retry_consumer(pulsar_client, topic, sub) as consumer:
        got = {}
        for choice in ({"level": 18}, {"delay": 864_000}, {"level": 4}):
            consumer.reconsume_later(consumer.receive(10_000), **choice)
        for _ in range(3):
            copy = consumer.receive(10_000)
            got[copy.data()] = copy.properties()["DELAY_TIME"]
            consumer.acknowledge(copy)
    assert sorted(got.values()) == sorted(["7200000", "864000000", "30000"])


@pytest.mark.parametrize("choice", [{"delay": 0.5}, {"delay": 864_001}, {"level": 0}, {"level": 19},
                                    {"delay": 5, "level": 2}])
def test_a_delay_out_of_range_is_refused_and_the_original_stays(pulsar_client, names, choice):
    topic, sub = names
    publish(pulsar_client, topic, b"keep")
    with retry_consumer(pulsar_client, topic, sub) as consumer:
        message = consumer.receive(10_000)
        with pytest.raises(ValueError):
            consumer.reconsume_later(message, **choice)
    with retry_consumer(pulsar_client, topic, sub) as again:
        redelivered = again.receive(10_000)
        assert redelivered.data() == b"keep"
        assert redelivered.topic_name() == topic  # not a retry copy: the original came back


def test_the_dlq_has_its_subscription_before_the_first_dead_letter(pulsar_client, names):
    """The subscription is made at construction; a dead letter written later is kept
    for it. Checked by attaching at the *latest* position after the fact: only an
    existing subscription still holds the message."""
    topic, sub = names
    with retry_consumer(pulsar_client, topic, sub, max_redeliver_count=0):
        pass
    publish(pulsar_client, topic, b"doomed")
    with retry_consumer(pulsar_client, topic, sub, max_redeliver_count=0) as consumer:
        assert consumer.reconsume_later(consumer.receive(10_000)).dead_letter
    dlq = retry_topology(topic, sub).dead_letter_topic
    late = pulsar_client.subscribe(dlq, CONSOLE_SUBSCRIPTION, initial_position=pulsar.InitialPosition.Latest)
    try:
        assert late.receive(5000).data() == b"doomed"
    finally:
        late.close()


@pytest.mark.parametrize("consumer_type", ["Key_Shared", "Exclusive", "Failover"])
def test_other_subscription_types_retry_through_the_retry_topic(pulsar_client, names, consumer_type):
    topic, sub = names
    publish(pulsar_client, topic, b"typed")
    with retry_consumer(pulsar_client, topic, sub, consumer_type=consumer_type) as consumer:
        consumer.reconsume_later(consumer.receive(10_000), delay=60)
        copy = consumer.receive(10_000)
        consumer.acknowledge(copy)
    assert copy.topic_name().endswith(f"-{sub}-RETRY")
    assert copy.properties()["RECONSUMETIMES"] == "1"
    assert consumer.delayed_delivery is (consumer_type == "Key_Shared")


def test_older_naming_and_overrides_are_used_on_the_broker(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"old")
    with retry_consumer(pulsar_client, topic, sub, naming_version="2.7") as consumer:
        consumer.reconsume_later(consumer.receive(10_000), delay=1)
        copy = consumer.receive(10_000)
        consumer.acknowledge(copy)
    assert copy.topic_name() == f"persistent://public/default/{sub}-RETRY"
    custom_dlq = unique("custom-dead")
    publish(pulsar_client, topic, b"custom")
    with retry_consumer(pulsar_client, topic, sub, dead_letter_topic=custom_dlq,
                        max_redeliver_count=0) as consumer:
        consumer.reconsume_later(consumer.receive(10_000))
    [dead] = dlq_messages(pulsar_client, topic, sub,
                          dead_letter_topic=f"persistent://public/default/{custom_dlq}")
    assert dead.data() == b"custom"


CRASH_SCRIPT = textwrap.dedent("""
    import os, sys
    import pulsar
    from brokers.pulsar.retry import RetryConsumer
    url, topic, sub = sys.argv[1:4]
    client = pulsar.Client(url)
    consumer = RetryConsumer(client, topic, sub, initial_position=pulsar.InitialPosition.Earliest)
    message = consumer.receive(10000)
    class Crash:
        def acknowledge(self, message):
            os._exit(17)  # the process dies after the publish, before the ack
    consumer._consumer = Crash()
    consumer.reconsume_later(message, delay=5)
""")


def test_a_crash_between_publish_and_ack_leaves_a_duplicate_never_a_loss(pulsar_broker, pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"survivor")
    result = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, pulsar_broker.service_url, topic, sub],
                            cwd=os.getcwd(), capture_output=True, timeout=60)
    assert result.returncode == 17, result.stderr.decode()[-2000:]

    topology = retry_topology(topic, sub)
    expected = sorted([(b"survivor", topic), (b"survivor", topology.retry_topic)])
    # The broker hands the unacknowledged original back once it sees the dead
    # connection, which on a loaded machine may take a few seconds.
    with retry_consumer(pulsar_client, topic, sub) as consumer:
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            message = consumer.poll(1000)
            if message is not None:
                seen.append((message.data(), message.topic_name()))
                consumer.acknowledge(message)
        assert consumer.poll(1000) is None  # and nothing more than the duplicate
    assert sorted(seen) == expected


def test_a_failed_publish_raises_and_leaves_the_original_unacknowledged(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"unsent")
    with retry_consumer(pulsar_client, topic, sub) as consumer:
        message = consumer.receive(10_000)
        consumer._producer(consumer.topology.retry_topic).close()  # the publish will fail
        with pytest.raises(pulsar.PulsarException):
            consumer.reconsume_later(message, delay=1)
        consumer._producers.clear()
    with retry_consumer(pulsar_client, topic, sub) as again:
        back = again.receive(10_000)
        assert (back.data(), back.topic_name()) == (b"unsent", topic)


def test_negative_ack_redelivers_the_same_message_and_dead_letters_it_after_the_max(pulsar_client, names):
    """The client's own route: no copy, the count is the broker's redelivery count."""
    topic, sub = names
    consumer = negative_ack_consumer(pulsar_client, topic, sub, max_redeliver_count=2,
                                     negative_ack_redelivery_delay_ms=100,
                                     initial_position=pulsar.InitialPosition.Earliest)
    publish(pulsar_client, topic, b"nack me", properties={"tenant": "acme"})
    counts, ids = [], set()
    try:
        while True:
            try:
                message = consumer.receive(3000)
            except pulsar.Timeout:
                break
            counts.append(retry_count_of(message))
            ids.add(str(message.message_id()))
            consumer.negative_acknowledge(message)
    finally:
        consumer.close()
    assert counts == [0, 1, 2]
    assert len(ids) == 1  # the same message every time, unlike reconsume_later
    [dead] = dlq_messages(pulsar_client, topic, sub)
    assert dead.data() == b"nack me"
    assert dead.properties()["REAL_TOPIC"] == topic
    assert dead.properties()["tenant"] == "acme"
    assert "RECONSUMETIMES" not in dead.properties()


BINARY = bytes(range(256)) * 3 + b"\xff\xfe\x00\xc3\x28"
HOSTILE = {"note": '<script>alert(1)</script> \'; DROP TABLE x; -- \u202e 日本', "k\u00e9y": "v\nw"}


def test_binary_payloads_and_hostile_properties_survive_retries_to_the_dlq(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, BINARY, properties=HOSTILE)
    with retry_consumer(pulsar_client, topic, sub, max_redeliver_count=1, delay_levels=[1]) as consumer:
        consumer.reconsume_later(consumer.receive(10_000))
        consumer.reconsume_later(consumer.receive(10_000))
    [dead] = dlq_messages(pulsar_client, topic, sub)
    assert dead.data() == BINARY
    assert {k: dead.properties()[k] for k in HOSTILE} == HOSTILE


def test_a_five_megabyte_payload_goes_through_retry_and_dlq(pulsar_client, names):
    topic, sub = names
    payload = os.urandom(5_000_000)
    publish(pulsar_client, topic, payload)
    with retry_consumer(pulsar_client, topic, sub, max_redeliver_count=1, delay_levels=[1]) as consumer:
        consumer.reconsume_later(consumer.receive(10_000))
        consumer.reconsume_later(consumer.receive(10_000))
    [dead] = dlq_messages(pulsar_client, topic, sub)
    assert dead.data() == payload


def test_non_string_properties_are_refused_before_anything_is_sent(pulsar_client, names):
    topic, sub = names
    publish(pulsar_client, topic, b"p")
    with retry_consumer(pulsar_client, topic, sub) as consumer:
        message = consumer.receive(10_000)
        with pytest.raises(ValueError, match="strings"):
            consumer.reconsume_later(message, properties={"count": 3})
    with retry_consumer(pulsar_client, topic, sub) as again:
        assert again.receive(10_000).topic_name() == topic


def test_an_invalid_topic_name_is_refused_before_subscribing(pulsar_client):
    from brokers.pulsar.naming import InvalidName

    with pytest.raises(InvalidName):
        RetryConsumer(pulsar_client, "persistent://bad name/x", "billing")
