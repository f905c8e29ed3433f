"""The Pulsar adapter beyond the shared contract, against pulsar-lite."""

from __future__ import annotations

import os
import time

import pulsar
import pytest

from brokers.base import BrokerError, ClusterConfig, KnownSubscription, ReplayMessage
from brokers.pulsar.adapter import REPLAY_OF, PulsarAdapter
from brokers.pulsar.embedded import free_port
from tests.fixtures.pulsar import unique

HOSTILE = '<img src=x onerror=alert(1)> "; DROP TABLE dead_letters; -- \u202e\x07'


@pytest.fixture
def registered(pulsar_harness):
    """A subscription with its topology, known to the console by registration (no
    waiting for the broker's metrics), and an adapter seeing it."""
    name = unique("sub")
    pulsar_harness.sources[name] = f"persistent://public/default/{unique('orders')}"
    pulsar_harness.retry_consumer(name).close()
    config = ClusterConfig(
        kind="pulsar", name="lite", service_url=pulsar_harness.broker.service_url,
        options={"metrics_url": pulsar_harness.broker.metrics_url},
        known_subscriptions=(KnownSubscription(name, pulsar_harness.sources[name], "Shared"),),
        timeout_seconds=10)
    with PulsarAdapter(config) as adapter:
        yield name, adapter


def collect(adapter, name, **options):
    batches = []
    adapter.collect_dead_letters(name, batches.append, **options)
    return [letter for batch in batches for letter in batch]


def test_collected_letters_keep_every_property_the_retry_count_and_a_stable_id(pulsar_harness, registered):
    name, adapter = registered
    pulsar_harness.put_dead_letters(name, [(b"one", {"tenant": "acme", "note": HOSTILE})], retry_count=4)

    def refuse(batch):
        raise RuntimeError("archive down")

    seen = []
    with pytest.raises(RuntimeError):
        adapter.collect_dead_letters(name, lambda batch: (seen.extend(batch), refuse(batch)))
    [letter] = collect(adapter, name)

    assert letter.broker_message_id == seen[0].broker_message_id  # same id when collected again
    assert letter.broker_message_id.startswith(pulsar_harness.topology(name).dead_letter_topic + "@")
    assert letter.retry_count == 4
    assert letter.source == pulsar_harness.sources[name]
    assert letter.origin_message_id.startswith("(")
    assert dict(letter.properties) == {
        "tenant": "acme", "note": HOSTILE, "REAL_TOPIC": pulsar_harness.sources[name],
        "ORIGIN_MESSAGE_ID": letter.origin_message_id,
        "RETRY_TOPIC": pulsar_harness.topology(name).retry_topic,
        "RECONSUMETIMES": "4", "DELAY_TIME": "1000",
    }
    assert letter.last_failure_at is not None


def test_a_five_megabyte_dead_letter_is_collected_whole(pulsar_harness, registered):
    name, adapter = registered
    payload = os.urandom(5_000_000)
    pulsar_harness.put_dead_letters(name, [(payload, {})], retry_count=0)
    [letter] = collect(adapter, name)
    assert letter.payload == payload


def test_republish_marks_the_replay_resets_the_count_and_drops_retry_bookkeeping(pulsar_harness, registered):
    name, adapter = registered
    pulsar_harness.put_dead_letters(name, [(b"\xff\xfe not utf-8", {"tenant": "acme"})], retry_count=2)
    [letter] = collect(adapter, name)
    [outcome] = adapter.republish([ReplayMessage(
        key="41", subscription=name, source=letter.source, payload=letter.payload,
        properties=letter.properties, origin_message_id=letter.origin_message_id)])
    assert outcome.confirmed and outcome.broker_message_id.startswith(letter.source + "@")

    [(payload, properties)] = pulsar_harness.receive_from_source(name, 1)
    assert payload == b"\xff\xfe not utf-8"
    assert properties["RECONSUMETIMES"] == "0"
    assert properties[REPLAY_OF] == letter.origin_message_id
    assert properties["ORIGIN_MESSAGE_ID"] == letter.origin_message_id
    assert properties["REAL_TOPIC"] == letter.source
    assert "DELAY_TIME" not in properties and "RETRY_TOPIC" not in properties


def test_republish_reports_bad_messages_one_by_one_and_still_sends_the_good_ones(pulsar_harness, registered):
    name, adapter = registered
    source = pulsar_harness.sources[name]
    too_big = os.urandom(6 * 1024 * 1024)
    outcomes = adapter.republish([
        ReplayMessage(key="bad-topic", subscription=name, source="persistent://no such/topic",
                      payload=b"x", properties={"REAL_TOPIC": "persistent://no such/topic"}),
        ReplayMessage(key="too-big", subscription=name, source=source, payload=too_big),
        ReplayMessage(key="good", subscription=name, source=source, payload=b"fine"),
    ])
    by_key = {o.key: o for o in outcomes}
    assert [o.key for o in outcomes] == ["bad-topic", "too-big", "good"]
    assert not by_key["bad-topic"].confirmed and by_key["bad-topic"].permanent
    assert "not a valid Pulsar topic name" in by_key["bad-topic"].error
    assert not by_key["too-big"].confirmed and by_key["too-big"].permanent
    assert by_key["good"].confirmed
    assert [p for p, _ in pulsar_harness.receive_from_source(name, 1)] == [b"fine"]


def test_republish_to_the_retry_topic_destination(pulsar_harness, registered):
    name, adapter = registered
    retry_topic = pulsar_harness.topology(name).retry_topic
    assert [value for value, _ in adapter.replay_destinations(name)] == ["", retry_topic]
    [outcome] = adapter.republish([ReplayMessage(
        key="1", subscription=name, source=pulsar_harness.sources[name], payload=b"again",
        destination=retry_topic)])
    assert outcome.confirmed
    assert [m.payload for m in adapter.peek_retry_queue(name)] == [b"again"]


def test_republish_raises_when_the_broker_cannot_be_reached():
    config = ClusterConfig(kind="pulsar", name="down", service_url=f"pulsar://127.0.0.1:{free_port()}",
                           timeout_seconds=2)
    with PulsarAdapter(config) as adapter, pytest.raises(BrokerError) as caught:
        adapter.republish([ReplayMessage(key="1", subscription="s", source="orders", payload=b"x")])
    assert not caught.value.permanent


def test_peek_shows_the_retry_count_and_when_the_retry_is_due(pulsar_harness, registered):
    name, adapter = registered
    pulsar_harness.put_retry_messages(name, [(b"later", {"k": "v"})])
    [peeked] = adapter.peek_retry_queue(name)
    assert peeked.retry_count == 1
    assert peeked.properties["k"] == "v"
    assert peeked.due_at is not None
    assert collect(adapter, name) == []  # peeking moved nothing to the DLQ either
    assert [m.payload for m in adapter.peek_retry_queue(name, limit=5)] == [b"later"]


def test_without_admin_or_metrics_the_registered_subscription_is_listed_with_health_unknown(pulsar_harness):
    name = unique("sub")
    source = f"persistent://public/default/{unique('orders')}"
    config = ClusterConfig(kind="pulsar", name="bare", service_url=pulsar_harness.broker.service_url,
                           known_subscriptions=(KnownSubscription(name, source, "Key_Shared"),))
    with PulsarAdapter(config) as adapter:
        [info] = adapter.list_subscriptions()
        assert (info.name, info.source, info.mode) == (name, source, "Key_Shared")
        assert info.problems == () and info.details["dlq_subscriptions"] == "unknown"
        plan = adapter.plan_rebuild(name)
        assert [s.action for s in plan.steps] == ["create topic", "create subscription"]
        assert all("harmless" in s.detail for s in plan.steps)
        adapter.apply_rebuild(plan)
    # The DLQ subscription now exists at the earliest position: a letter written to
    # the DLQ before anyone reads is kept for it.
    client = pulsar_harness.client
    producer = client.create_producer(info.dead_letter_queue)
    producer.send(b"kept")
    producer.close()
    consumer = client.subscribe(info.dead_letter_queue, "redrive",
                                initial_position=pulsar.InitialPosition.Latest)
    try:
        assert consumer.receive(5000).data() == b"kept"
    finally:
        consumer.close()


def test_a_bad_naming_version_option_is_a_permanent_error():
    with pytest.raises(BrokerError) as caught:
        PulsarAdapter(ClusterConfig(kind="pulsar", name="x", service_url="pulsar://127.0.0.1:1",
                                    options={"naming_version": "2.8"}))
    assert caught.value.permanent


def test_an_unknown_subscription_is_a_permanent_error(registered):
    _, adapter = registered
    with pytest.raises(BrokerError) as caught:
        collect(adapter, "nobody-" + unique("x"))
    assert caught.value.permanent


def test_the_registered_mode_is_shown_next_to_what_the_metrics_found(registered):
    name, adapter = registered
    [info] = [s for s in adapter.list_subscriptions() if s.name == name]
    assert info.mode == "Shared"
    assert info.details["inventory"] == "broker metrics"
    assert info.retry_queue.endswith(f"-{name}-RETRY")


CRASHING_COLLECTOR = """
import json, os, sys
from brokers.base import ClusterConfig, KnownSubscription
from brokers.pulsar.adapter import PulsarAdapter
url, name, source, out = sys.argv[1:5]
config = ClusterConfig(kind="pulsar", name="lite", service_url=url,
                       known_subscriptions=(KnownSubscription(name, source),))
def sink(batch):
    with open(out, "w") as handle:
        json.dump([letter.broker_message_id for letter in batch], handle)
    os._exit(9)  # the archive committed, the process dies before the acknowledgement
PulsarAdapter(config).collect_dead_letters(name, sink)
"""


def test_a_crash_after_the_archive_commit_but_before_the_ack_loses_nothing(pulsar_harness, registered,
                                                                           tmp_path):
    import json
    import subprocess
    import sys

    name, adapter = registered
    pulsar_harness.put_dead_letters(name, [(b"a", {}), (b"b", {})])
    out = tmp_path / "ids.json"
    result = subprocess.run([sys.executable, "-c", CRASHING_COLLECTOR, pulsar_harness.broker.service_url,
                             name, pulsar_harness.sources[name], str(out)], capture_output=True, timeout=60)
    assert result.returncode == 9, result.stderr.decode()[-2000:]

    # The broker gives the unacknowledged letters back once it sees the dead
    # connection, which on a loaded machine may take a few seconds.
    again, deadline = [], time.monotonic() + 30
    while len(again) < 2 and time.monotonic() < deadline:
        again += collect(adapter, name)
    # Both letters are still on the broker, with the ids the archive already has, so
    # storing them again adds no duplicate.
    assert sorted(x.payload for x in again) == [b"a", b"b"]
    assert set(json.loads(out.read_text())) <= {x.broker_message_id for x in again}


def test_republish_raises_once_the_broker_goes_away_between_chunks(tmp_path):
    """A replay job calls republish chunk after chunk on one adapter: when the broker
    disappears in between, the next call must say so rather than time out per message."""
    from brokers.pulsar.embedded import EmbeddedPulsar

    broker = EmbeddedPulsar(tmp_path).start()
    try:
        config = ClusterConfig(kind="pulsar", name="brief", service_url=broker.service_url, timeout_seconds=3)
        with PulsarAdapter(config) as adapter:
            message = ReplayMessage(key="1", subscription="s", source="persistent://public/default/brief",
                                    payload=b"x")
            assert adapter.republish([message])[0].confirmed
            broker.stop()
            with pytest.raises(BrokerError) as caught:
                adapter.republish([message])
            assert not caught.value.permanent
    finally:
        broker.stop()
