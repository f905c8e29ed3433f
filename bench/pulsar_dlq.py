"""Benchmark: Pulsar dead letters into the archive and back, against a raw client loop.

N dead letters (default 100,000, with the properties `RetryConsumer` puts on them) sit
on the DLQ of a subscription on an embedded pulsar-lite broker started here. Measured:

- collect: `PulsarAdapter.collect_dead_letters` into the archive (`archive_store` on
  PostgreSQL; each batch acknowledged only after its commit);
- republish: the replay path, archived rows read back and `PulsarAdapter.republish`ed
  to their REAL_TOPIC with broker confirms, in chunks (reading the rows is timed
  apart and printed as `archive_read_seconds`);
- for information, collect with a sink that keeps nothing (the adapter's own share);
- baseline: the raw `pulsar-client` loop on another DLQ holding the same N letters in
  the same run: receive, send_async to a topic, acknowledge, then flush (no console code).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/pulsar_dlq.py --n 100000

The archive goes to its own database (`<name>_bench_pulsar` next to the one in
DATABASE_URL), migrated here; this run's rows are deleted afterwards. Each line is
JSON; the last one sums up (rate and ratio of the slower of collect and republish).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console_database import console_on_bench_database  # noqa: E402 - after the path

BODY = b'{"order": 123456, "customer": "c-42", "amount": "19.90", "currency": "EUR", "lines": 3}'








def fill(client, topology, n: int) -> None:
    """N dead letters as `RetryConsumer` leaves them, the DLQ subscribed first."""
    from brokers.pulsar.naming import CONSOLE_SUBSCRIPTION
    from brokers.pulsar.retry import dead_letter_subscription_ensure

    dead_letter_subscription_ensure(client, topology.dead_letter_topic, CONSOLE_SUBSCRIPTION)
    producer = client.create_producer(topology.dead_letter_topic, batching_enabled=True,
                                      batching_max_messages=1000, block_if_queue_full=True,
                                      max_pending_messages=10_000)
    for i in range(n):
        producer.send_async(BODY, None, properties={
            "REAL_TOPIC": topology.source, "ORIGIN_MESSAGE_ID": f"(7,{i},-1,-1)",
            "RETRY_TOPIC": topology.retry_topic, "RECONSUMETIMES": "16", "DELAY_TIME": "7200000",
            "error": "TimeoutException: payment gateway", "tenant": "acme"})
    producer.flush()
    producer.close()


def raw_loop(client, dlq: str, destination: str, n: int) -> float:
    import pulsar

    from brokers.pulsar.naming import CONSOLE_SUBSCRIPTION

    consumer = client.subscribe(dlq, CONSOLE_SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=1000)
    producer = client.create_producer(destination, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      block_if_queue_full=True, max_pending_messages=10_000)
    started = time.perf_counter()
    for _ in range(n):
        message = consumer.receive(30_000)
        producer.send_async(message.data(), None, properties=message.properties())
        consumer.acknowledge(message)
    producer.flush()
    elapsed = time.perf_counter() - started
    producer.close()
    consumer.close()
    return elapsed


def console_path(config, cluster, subscription: str, n: int, batch: int,
                 chunk_size: int) -> tuple[float, float, float]:
    """(collect seconds, archive read seconds, republish seconds)."""
    from brokers import adapter_for
    from brokers.base import ReplayMessage
    from console.archive.models import DeadLetter
    from console.archive.services import archive_store

    def sink(letters):
        archive_store(cluster=cluster, letters=letters)

    with adapter_for(config) as adapter:
        started = time.perf_counter()
        collected = adapter.collect_dead_letters(subscription, sink, batch_size=batch)
        collect_seconds = time.perf_counter() - started
        if collected != n:
            raise SystemExit(f"collected {collected} of {n}")
        # The replay engine reads archived rows, then republishes them chunk by chunk;
        # the two are timed apart so the broker path is not hidden behind the database.
        started = time.perf_counter()
        rows = (DeadLetter.objects.filter(cluster=cluster, subscription=subscription).order_by("id")
                .values_list("id", "subscription", "source", "payload", "properties", "origin_message_id"))
        replays = [ReplayMessage(key=str(row_id), subscription=sub, source=source, payload=bytes(payload),
                                 properties=properties, origin_message_id=origin)
                   for row_id, sub, source, payload, properties, origin in rows.iterator(chunk_size=5000)]
        read_seconds = time.perf_counter() - started
        started = time.perf_counter()
        confirmed = 0
        for start in range(0, len(replays), chunk_size):
            confirmed += sum(o.confirmed for o in adapter.republish(replays[start:start + chunk_size]))
        republish_seconds = time.perf_counter() - started
    if confirmed != n:
        raise SystemExit(f"republished {confirmed} of {n}")
    return collect_seconds, read_seconds, republish_seconds


def adapter_only_collect(config, subscription: str, n: int, batch: int) -> float:
    """Collect with a sink that keeps nothing: the adapter's own share of the time."""
    from brokers import adapter_for

    with adapter_for(config) as adapter:
        started = time.perf_counter()
        collected = adapter.collect_dead_letters(subscription, lambda letters: None, batch_size=batch)
        elapsed = time.perf_counter() - started
    if collected != n:
        raise SystemExit(f"collected {collected} of {n} without archive")
    return elapsed


def line(name: str, n: int, seconds: float, baseline_seconds: float, **extra) -> dict:
    rate, baseline = n / seconds, n / baseline_seconds
    result = {"name": name, "n": n, "rate": round(rate, 1), "baseline_rate": round(baseline, 1),
              "ratio": round(rate / baseline, 3), **extra}
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="collect batch size")
    parser.add_argument("--replay-chunk", type=int, default=5000, help="messages per republish call")
    args = parser.parse_args()
    n = args.n

    console_on_bench_database("pulsar")

    from brokers.base import ClusterConfig, KnownSubscription
    from brokers.pulsar.embedded import EmbeddedPulsar
    from brokers.pulsar.naming import retry_topology
    from brokers.pulsar.retry import client_connect
    from console.archive.models import DeadLetter
    from console.clusters.models import Cluster

    tag = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="redrive-bench-pulsar-") as data_dir, \
            EmbeddedPulsar(data_dir) as broker:
        source = f"persistent://public/default/bench-{tag}-orders"
        console_topology = retry_topology(source, f"bench-{tag}-billing")
        bare_topology = retry_topology(source, f"bench-{tag}-bare")
        raw_topology = retry_topology(source, f"bench-{tag}-raw")
        config = ClusterConfig(
            kind="pulsar", name=f"bench-{tag}", service_url=broker.service_url,
            known_subscriptions=tuple(KnownSubscription(t.subscription, source, "Shared")
                                      for t in (console_topology, bare_topology)),
            timeout_seconds=30)
        cluster = Cluster.objects.create(kind="pulsar", name=config.name, service_url=broker.service_url)
        client = client_connect(broker.service_url, timeout_seconds=30)
        try:
            print(f"filling three DLQs with {n} dead letters each", flush=True)
            for topology in (console_topology, bare_topology, raw_topology):
                fill(client, topology, n)
            baseline = raw_loop(client, raw_topology.dead_letter_topic, f"{source}-raw-destination", n)
            bare_seconds = adapter_only_collect(config, bare_topology.subscription, n, args.batch)
            collect_seconds, read_seconds, republish_seconds = console_path(
                config, cluster, console_topology.subscription, n, args.batch, args.replay_chunk)
        finally:
            client.close()
            DeadLetter.objects.filter(cluster=cluster).delete()
            cluster.delete()
    machine = (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
               f"Python {platform.python_version()}")
    line("pulsar_collect_without_archive", n, bare_seconds, baseline, batch=args.batch,
         note="information: the adapter's share, sink keeps nothing")
    collect = line("pulsar_collect", n, collect_seconds, baseline, batch=args.batch)
    republish = line("pulsar_republish", n, republish_seconds, baseline, chunk=args.replay_chunk,
                     archive_read_seconds=round(read_seconds, 2))
    slower = min(collect, republish, key=lambda r: r["ratio"])
    line("pulsar_dlq", n, n / slower["rate"], baseline, collect_ratio=collect["ratio"],
         republish_ratio=republish["ratio"], machine=machine)


if __name__ == "__main__":
    main()
