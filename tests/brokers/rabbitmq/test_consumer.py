"""The consumer side against the real RabbitMQ: topology, retries through the TTL queue,
dead-lettering after the last retry, and what a crash leaves behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from urllib.parse import quote

import pika
import pytest
import requests

from brokers.base import BrokerError, ReplayMessage
from brokers.rabbitmq.adapter import RabbitMQAdapter
from brokers.rabbitmq.consumer import RetryingConsumer, publish_json
from brokers.rabbitmq.topology import declare_subscription, failed_queue, retry_queue, validate_queue_name

ROOT = Path(__file__).resolve().parents[3]


def management_get(path: str):
    response = requests.get(f"http://127.0.0.1:15672/api{path}", auth=("guest", "guest"), timeout=5)
    response.raise_for_status()
    return response.json()


def bindings_of(exchange: str) -> set[tuple[str, str]]:
    found = management_get(f"/exchanges/%2F/{quote(exchange, safe='')}/bindings/source")
    return {(b["destination"], b["routing_key"]) for b in found}


def collect(harness, queue):
    batches = []
    with RabbitMQAdapter(harness.cluster_config()) as adapter:
        adapter.collect_dead_letters(queue, batches.append)
    return [letter for batch in batches for letter in batch]


class Flaky:
    """A handler failing the first `failures` deliveries of each message."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.seen: list = []

    def __call__(self, message) -> None:
        self.seen.append(message)
        order = message.json()["order"]
        if sum(1 for m in self.seen if m.json()["order"] == order) <= self.failures:
            raise TimeoutError(f"payment gateway timed out for order {order}")


def test_declaring_the_topology_twice_gives_the_section_3_layout(rabbitmq_harness):
    harness = rabbitmq_harness
    name = harness.new_subscription(routing_keys=("orders.created",))
    declare_subscription(harness.channel(), harness.topology, name, ["orders.created"])

    t = harness.topology
    for exchange in t.exchanges:
        found = management_get(f"/exchanges/%2F/{quote(exchange, safe='')}")
        assert found["type"] == "topic" and found["durable"]
    assert bindings_of(t.exchange) == {(name, "orders.created"), (name, name)}
    assert bindings_of(t.retry_exchange) == {(retry_queue(name), name)}
    assert bindings_of(t.failed_exchange) == {(failed_queue(name), name)}
    retry = management_get(f"/queues/%2F/{quote(retry_queue(name), safe='')}")
    assert retry["arguments"] == {"x-dead-letter-exchange": t.exchange,
                                  "x-dead-letter-routing-key": name, "x-message-ttl": 600_000}
    assert retry["durable"] and not retry["auto_delete"] and not retry["exclusive"]


def test_redeclaring_with_another_ttl_is_a_clear_error_and_keeps_the_queue(make_rabbitmq_harness):
    first = make_rabbitmq_harness(retry_ttl_ms=1000)
    name = first.new_subscription()
    first.put_retry_messages(name, [(b"waiting", {})])
    other_ttl = first.topology.__class__(**{**first.topology.__dict__, "retry_ttl_ms": 2000})

    with pytest.raises(BrokerError, match="other settings") as caught:
        declare_subscription(first.channel(), other_ttl, name)
    assert caught.value.permanent
    assert first.depth(retry_queue(name)) == 1


@pytest.mark.parametrize("name", ["", "amq.orders", "a.*.b", "orders.#", "x@retry", "x@failed", "q" * 250])
def test_queue_names_that_would_break_routing_are_refused(name):
    with pytest.raises(BrokerError) as caught:
        validate_queue_name(name)
    assert caught.value.permanent


def test_only_the_failing_subscriber_sees_the_retry(make_rabbitmq_harness):
    harness = make_rabbitmq_harness(retry_ttl_ms=200)
    failing = harness.new_subscription(routing_keys=("orders.created",))
    healthy = harness.new_subscription(routing_keys=("orders.created",))
    config = harness.cluster_config()
    publish_json(config, "orders.created", [{"order": 1}])

    flaky = Flaky(failures=1)
    stats = RetryingConsumer(config, failing, flaky, declare=False).run(max_messages=2, idle_timeout=10)
    assert list(stats.outcomes) == ["retry", "ok"]
    first, second = flaky.seen
    assert first.routing_key == "orders.created"
    assert second.routing_key == failing  # came back from the retry queue to this queue only
    assert second.original_routing_key == "orders.created"
    assert second.retry_count == 1
    assert [(d["queue"], d["reason"]) for d in second.x_death] == [(retry_queue(failing), "expired")]

    ok = []
    other = RetryingConsumer(config, healthy, ok.append, declare=False).run(idle_timeout=1.5)
    assert other.handled == 1 and [m.json() for m in ok] == [{"order": 1}]
    assert harness.depth(failing) == harness.depth(healthy) == 0


def test_a_message_failing_every_time_is_retried_max_times_then_dead_lettered(make_rabbitmq_harness):
    harness = make_rabbitmq_harness(retry_ttl_ms=100, max_retries=2)
    name = harness.new_subscription(routing_keys=("orders.*",))
    config = harness.cluster_config()
    publish_json(config, "orders.created", [{"order": 7}], headers={"tenant": "acme"})

    always = Flaky(failures=99)
    stats = RetryingConsumer(config, name, always, declare=False).run(max_messages=3, idle_timeout=10)

    assert list(stats.outcomes) == ["retry", "retry", "failed"]  # 1 delivery + 2 retries
    assert [m.retry_count for m in always.seen] == [0, 1, 2]
    assert harness.depth(name) == harness.depth(retry_queue(name)) == 0
    [letter] = collect(harness, name)
    assert letter.retry_count == 2
    assert letter.source == "orders.created"
    assert letter.properties["x-orig-routing-key"] == "orders.created"
    assert letter.properties["tenant"] == "acme"
    assert "TimeoutError: payment gateway timed out" in letter.properties["x-redrive-error"]
    assert letter.first_failure_at <= letter.last_failure_at
    # RabbitMQ's own record is shown: the message expired from the retry queue (its count
    # is per queue and reason, which is why Redrive counts with its own header).
    deaths = json.loads(letter.properties["x-death"])
    assert {d["reason"] for d in deaths} == {"expired"}
    assert letter.origin_message_id == always.seen[0].properties.message_id


def test_non_json_and_five_megabyte_bodies_survive_retry_and_dead_lettering(make_rabbitmq_harness):
    harness = make_rabbitmq_harness(retry_ttl_ms=100, max_retries=1)
    name = harness.new_subscription(routing_keys=("blobs",))
    big = os.urandom(5 * 1024 * 1024)
    channel = harness.channel()
    for body in (b"\xff\xfe not json \x00", big):
        channel.basic_publish(harness.topology.exchange, "blobs", body,
                              pika.BasicProperties(delivery_mode=2), mandatory=True)

    def handler(message):
        message.json()  # raises on both bodies

    stats = RetryingConsumer(harness.cluster_config(), name, handler, declare=False).run(
        max_messages=4, idle_timeout=10)
    assert sorted(stats.outcomes) == ["failed", "failed", "retry", "retry"]
    letters = collect(harness, name)
    assert sorted(len(x.payload) for x in letters) == [len(b"\xff\xfe not json \x00"), len(big)]
    assert {x.payload for x in letters} == {b"\xff\xfe not json \x00", big}

    replays = [ReplayMessage(key=str(i), subscription=name, source=x.source, payload=x.payload,
                             properties=x.properties) for i, x in enumerate(letters)]
    with RabbitMQAdapter(harness.cluster_config()) as adapter:
        assert all(o.confirmed for o in adapter.republish(replays))
    assert {body for body, _ in harness.receive(name, 2)} == {b"\xff\xfe not json \x00", big}


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs, the connection just goes."""


class CrashingBeforeAck(RetryingConsumer):
    def _acknowledge(self, channel, delivery_tag):
        raise Crash


def test_a_crash_between_the_confirmed_copy_and_the_ack_leaves_the_message_twice_not_never(
        rabbitmq_harness):
    harness = rabbitmq_harness
    name = harness.new_subscription(routing_keys=("orders.created",))
    config = harness.cluster_config()
    publish_json(config, "orders.created", [{"order": 3}])

    with pytest.raises(Crash):
        CrashingBeforeAck(config, name, Flaky(failures=1), declare=False).run(idle_timeout=10)

    assert harness.depth(name) == 1  # the original, redelivered
    assert harness.depth(retry_queue(name)) == 1  # the confirmed copy


def test_a_consumer_process_killed_inside_its_handler_loses_nothing(rabbitmq_harness):
    harness = rabbitmq_harness
    name = harness.new_subscription(routing_keys=("orders.created",))
    config = harness.cluster_config()
    publish_json(config, "orders.created", [{"order": 1}, {"order": 2}])
    script = textwrap.dedent(f"""
        import os
        from brokers.base import ClusterConfig
        from brokers.rabbitmq.consumer import RetryingConsumer
        config = ClusterConfig(kind="rabbitmq", name="crash", service_url={config.service_url!r},
                               username="guest", password="guest", options={dict(config.options)!r})
        RetryingConsumer(config, {name!r}, lambda message: os._exit(3), declare=False,
                         prefetch=2).run(idle_timeout=10)
    """)
    process = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=60)
    assert process.returncode == 3
    assert harness.depth(name) == 2
    assert harness.depth(retry_queue(name)) == harness.depth(failed_queue(name)) == 0


def test_a_failure_whose_copy_cannot_be_routed_stays_in_the_queue(rabbitmq_harness):
    harness = rabbitmq_harness
    name = harness.new_subscription(routing_keys=("orders.created",))
    harness.break_topology(name)  # the retry queue is gone: the copy would go nowhere
    config = harness.cluster_config()
    publish_json(config, "orders.created", [{"order": 1}])
    logged = []

    stats = RetryingConsumer(config, name, Flaky(failures=99), declare=False, log=logged.append).run(
        max_messages=1, idle_timeout=10)

    assert stats.copy_errors == 1 and list(stats.outcomes) == []
    assert "routed the copy of a failed message nowhere" in logged[0]
    assert harness.depth(name) == 1


def test_the_consumer_stops_when_asked(rabbitmq_harness):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    stats = RetryingConsumer(harness.cluster_config(), name, lambda m: None, declare=False).run(stop=stop)
    assert stats.handled == 0
