"""Benchmark: RabbitMQ dead letters back to their queue, the console's path vs the shovel.

N dead letters sit in `{queue}@failed` (as the consumer helper leaves them). The
console's path collects them into the archive (`archive_store` on PostgreSQL, ack
after commit) and republishes them from the archive to `master` with routing key
`{queue}`, with publisher confirms. The baseline is RabbitMQ's own shovel
(`rabbitmq_shovel`, enabled here with rabbitmq-plugins) moving the same N messages
from one queue to another with `ack-mode: on-confirm`, in the same run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/rabbitmq_dlq.py --n 100000

The archive goes to its own database (`<name>_bench_rabbitmq` next to the one in
DATABASE_URL), migrated here and emptied of this run's rows afterwards. The last
printed line is one JSON object: name, n, rate, baseline_rate, ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console_database import console_on_bench_database  # noqa: E402 - after the path

AMQP_URL = "amqp://127.0.0.1:5672/%2F"
ADMIN_URL = "http://127.0.0.1:15672"








def fill(config, queue: str, exchange: str, routing_key: str, n: int, *, tag: str) -> None:
    """N persistent dead letters as the consumer helper publishes them, confirmed."""
    import pika

    from brokers.rabbitmq.messages import (
        HEADER_DEAD_LETTER_ID,
        HEADER_FIRST_FAILURE,
        HEADER_LAST_FAILURE,
        HEADER_ORIG_ROUTING_KEY,
        HEADER_REPLAY_KEY,
        HEADER_RETRY_COUNT,
        now_ms,
    )
    from brokers.rabbitmq.publisher import Publication, publish_confirmed

    stamp = now_ms()
    chunk = 20_000
    for start in range(0, n, chunk):
        publications = []
        for i in range(start, min(n, start + chunk)):
            body = json.dumps({"order": i, "customer": f"c-{i % 977}", "amount": i % 500 + 0.99,
                               "items": [{"sku": f"sku-{i % 31}", "qty": 1 + i % 3}]}).encode()
            headers = {HEADER_ORIG_ROUTING_KEY: "orders.created", HEADER_RETRY_COUNT: 3,
                       HEADER_FIRST_FAILURE: stamp - 90_000, HEADER_LAST_FAILURE: stamp,
                       "x-redrive-error": "TimeoutException: payment gateway", "tenant": "acme",
                       HEADER_DEAD_LETTER_ID: f"{tag}-{i}", HEADER_REPLAY_KEY: f"fill-{i}"}
            properties = pika.BasicProperties(content_type="application/json", delivery_mode=2,
                                              message_id=f"{tag}-m{i}", headers=headers)
            publications.append(Publication(key=f"fill-{i}", exchange=exchange, routing_key=routing_key,
                                            body=body, properties=properties))
        results = publish_confirmed(config, publications)
        if not all(r.confirmed for r in results):
            raise SystemExit(f"filling {queue} failed: {next(r.error for r in results if not r.confirmed)}")


def amqp_channel():
    """A fresh connection's channel: the run is long, and an idle connection would miss
    its heartbeats while the console path keeps this process busy."""
    import pika

    return pika.BlockingConnection(pika.URLParameters(AMQP_URL)).channel()


def depth(channel, queue: str) -> int:
    return channel.queue_declare(queue=queue, passive=True).method.message_count


def console_path(config, cluster, queue: str, n: int, batch: int, replay_chunk: int) -> tuple[float, float]:
    from brokers import adapter_for
    from brokers.base import ReplayMessage
    from console.archive.models import DeadLetter
    from console.archive.services import archive_store

    def sink(letters):
        archive_store(cluster=cluster, letters=letters)

    started = time.perf_counter()
    with adapter_for(config) as adapter:
        collected = adapter.collect_dead_letters(queue, sink, batch_size=batch)
        collect_done = time.perf_counter()
        if collected != n:
            raise SystemExit(f"collected {collected} of {n}")
        rows = (DeadLetter.objects.filter(cluster=cluster, subscription=queue)
                .order_by("id").values_list("id", "subscription", "source", "payload", "properties",
                                            "origin_message_id"))
        confirmed = 0
        chunk: list[ReplayMessage] = []
        for row_id, subscription, source, payload, properties, origin in rows.iterator(chunk_size=5000):
            chunk.append(ReplayMessage(key=str(row_id), subscription=subscription, source=source,
                                       payload=bytes(payload), properties=properties,
                                       origin_message_id=origin))
            if len(chunk) >= replay_chunk:
                confirmed += sum(o.confirmed for o in adapter.republish(chunk))
                chunk = []
        if chunk:
            confirmed += sum(o.confirmed for o in adapter.republish(chunk))
    finished = time.perf_counter()
    if confirmed != n:
        raise SystemExit(f"republished {confirmed} of {n}")
    return collect_done - started, finished - collect_done


def shovel_path(source: str, destination: str, n: int) -> float:
    import requests

    subprocess.run(["rabbitmq-plugins", "enable", "--quiet", "rabbitmq_shovel", "rabbitmq_shovel_management"],
                   check=True, capture_output=True)
    name = f"redrive-bench-{uuid.uuid4().hex[:8]}"
    url = f"{ADMIN_URL}/api/parameters/shovel/{quote('/', safe='')}/{name}"
    value = {"src-protocol": "amqp091", "src-uri": "amqp://", "src-queue": source,
             "dest-protocol": "amqp091", "dest-uri": "amqp://", "dest-queue": destination,
             "ack-mode": "on-confirm", "src-delete-after": "never"}
    started = time.perf_counter()
    response = requests.put(url, json={"value": value}, auth=("guest", "guest"), timeout=10)
    response.raise_for_status()
    try:
        channel = amqp_channel()
        while depth(channel, destination) < n:
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        channel.connection.close()
    finally:
        requests.delete(url, auth=("guest", "guest"), timeout=10)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="collect batch size")
    parser.add_argument("--replay-chunk", type=int, default=5000, help="messages per republish call")
    args = parser.parse_args()
    n = args.n

    console_on_bench_database("rabbitmq")

    from brokers.base import ClusterConfig
    from brokers.rabbitmq.topology import Topology, declare_queue, declare_subscription, failed_queue
    from console.archive.models import DeadLetter
    from console.clusters.models import Cluster

    tag = uuid.uuid4().hex[:8]
    options = {"exchange": f"bench-{tag}", "retry_ttl_ms": 30_000, "max_retries": 3}
    config = ClusterConfig(kind="rabbitmq", name=f"bench-{tag}", service_url=AMQP_URL, admin_url=ADMIN_URL,
                           username="guest", password="guest", options=options, timeout_seconds=10)
    topology = Topology.from_options(options)
    queue = f"bench-{tag}@orders"
    shovel_source, shovel_destination = f"bench-{tag}-shovel-source", f"bench-{tag}-shovel-destination"
    cluster = Cluster(kind="rabbitmq", name=config.name, service_url=AMQP_URL, admin_url=ADMIN_URL,
                      username="guest", options=options)
    cluster.password = "guest"
    cluster.save()

    try:
        channel = amqp_channel()
        declare_subscription(channel, topology, queue, ["orders.created"])
        declare_queue(channel, shovel_source)
        declare_queue(channel, shovel_destination)
        channel.connection.close()
        print(f"filling {failed_queue(queue)} and {shovel_source} with {n} dead letters each", flush=True)
        fill(config, failed_queue(queue), topology.failed_exchange, queue, n, tag=tag)
        fill(config, shovel_source, "", shovel_source, n, tag=tag + "s")
        time.sleep(1)

        collect_seconds, republish_seconds = console_path(config, cluster, queue, n, args.batch,
                                                          args.replay_chunk)
        console_seconds = collect_seconds + republish_seconds
        channel = amqp_channel()
        if depth(channel, queue) != n or depth(channel, failed_queue(queue)) != 0:
            raise SystemExit("the console path did not move every message")
        channel.connection.close()
        print(json.dumps({"name": "rabbitmq_dlq.collect", "n": n, "seconds": round(collect_seconds, 2),
                          "rate": round(n / collect_seconds)}), flush=True)
        print(json.dumps({"name": "rabbitmq_dlq.republish", "n": n, "seconds": round(republish_seconds, 2),
                          "rate": round(n / republish_seconds)}), flush=True)

        shovel_seconds = shovel_path(shovel_source, shovel_destination, n)
        print(json.dumps({"name": "rabbitmq_dlq.shovel", "n": n, "seconds": round(shovel_seconds, 2),
                          "rate": round(n / shovel_seconds)}), flush=True)

        rate, baseline = n / console_seconds, n / shovel_seconds
        print(json.dumps({"name": "rabbitmq_dlq", "n": n, "rate": round(rate),
                          "baseline_rate": round(baseline), "ratio": round(rate / baseline, 3),
                          "collect_batch": args.batch,
                          "baseline": "shovel ack-mode on-confirm, queue to queue"}))
    finally:
        channel = amqp_channel()
        for name in (queue, f"{queue}@retry", failed_queue(queue), shovel_source, shovel_destination):
            channel.queue_delete(queue=name)
        for exchange in topology.exchanges:
            channel.exchange_delete(exchange=exchange)
        channel.connection.close()
        DeadLetter.objects.filter(cluster=cluster).delete()
        cluster.delete()


if __name__ == "__main__":
    main()
