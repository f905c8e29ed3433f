"""Benchmark: the RocketMQ-style broker against raw redis-py on the same Redis.

Three paths, each for N messages, each next to a raw redis-py baseline run in the same
process against the same server:

- produce: `Producer.send_batch` in chunks of 500 (validation, ids, born time, topic
  registration) vs pipelined XADD of the same body in chunks of 500;
- consume-and-ack: a clustering `PushConsumer` whose listener succeeds vs XREADGROUP
  of 500 + one XACK per batch;
- fail-to-retry: a `PushConsumer` whose listener fails, so every message is sent back
  to %RETRY%{group} as a delayed copy (one Lua script per message) vs XREADGROUP of 500
  and, per message, the same writes (HSET, two ZADD) and XACK in one pipeline.

Also prints, for information, one-at-a-time `Producer.send` against one XADD per round
trip. Run from the project root with Redis up:

    .venv/bin/python bench/rocketmq_streams.py --n 100000

Uses Redis database 8 (never 0, which Celery uses, nor 5, the console's default) under a
unique key prefix it deletes afterwards. Each measurement is repeated `--rounds` times (default 3)
on fresh streams and the fastest round of each side counts, which keeps other load on a
shared machine from deciding the figures. Each line is JSON; the last sums up (its rate
and ratio are those of the slower of produce and consume-and-ack, the paths with a
target of 0.5 of raw).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from brokers.rocketmq.connection import Connection  # noqa: E402
from brokers.rocketmq.consumer import ConsumeResult, PushConsumer  # noqa: E402
from brokers.rocketmq.message import Message  # noqa: E402
from brokers.rocketmq.producer import Producer  # noqa: E402

CHUNK = 500
BODY = b'{"order": 123456, "customer": "c-42", "amount": "19.90", "currency": "EUR", "lines": 3}'


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def line(name: str, n: int, seconds: float, baseline_seconds: float, **extra) -> dict:
    rate, baseline = n / seconds, n / baseline_seconds
    result = {"name": name, "n": n, "rate": round(rate, 1), "baseline_rate": round(baseline, 1),
              "ratio": round(rate / baseline, 3), **extra}
    print(json.dumps(result), flush=True)
    return result


def raw_produce(client: redis.Redis, key: str, n: int) -> None:
    for start in range(0, n, CHUNK):
        pipe = client.pipeline(transaction=False)
        for _i in range(start, min(n, start + CHUNK)):
            pipe.xadd(key, {b"id": uuid.uuid4().hex.encode(), b"b": BODY})
        pipe.execute()


def our_produce(producer: Producer, topic: str, n: int) -> None:
    for start in range(0, n, CHUNK):
        producer.send_batch([Message(topic=topic, body=BODY) for _ in range(start, min(n, start + CHUNK))])


def raw_consume(client: redis.Redis, key: str, group: str, n: int) -> None:
    client.xgroup_create(key, group, id="0")
    done = 0
    while done < n:
        answer = client.xreadgroup(group, "raw", {key: ">"}, count=CHUNK, block=1000)
        if not answer:
            break
        entries = answer[0][1]
        client.xack(key, group, *[entry_id for entry_id, _ in entries])
        done += len(entries)


def raw_fail_to_retry(client: redis.Redis, key: str, group: str, n: int, prefix: str) -> None:
    client.xgroup_create(key, group, id="0")
    done = 0
    due = int(time.time() * 1000) + 3_600_000
    while done < n:
        answer = client.xreadgroup(group, "raw", {key: ">"}, count=CHUNK, block=1000)
        if not answer:
            break
        pipe = client.pipeline(transaction=False)
        for entry_id, fields in answer[0][1]:
            copy_id = uuid.uuid4().hex
            pipe.hset(f"{prefix}raw-delayed:{copy_id}", mapping={**fields, b"rc": b"1"})
            pipe.zadd(f"{prefix}raw-delay", {copy_id: due})
            pipe.zadd(f"{prefix}raw-delay-index", {copy_id: due})
            pipe.xack(key, group, entry_id)
        pipe.execute()
        done += len(answer[0][1])


def our_consume(connection: Connection, topic: str, group: str, n: int, result: ConsumeResult,
                finished: callable) -> None:
    counter = {"n": 0}
    lock = threading.Lock()
    done = threading.Event()

    def listener(message):
        with lock:
            counter["n"] += 1
            if counter["n"] >= n:
                done.set()
        return result

    consumer = PushConsumer(connection, group, listener, subscriptions={topic: "*"}, threads=1, batch=500,
                            max_inflight=1024, consume_timeout=600)
    consumer.start()
    done.wait(600)
    # Count until the last message is settled on Redis, not just handed to the listener.
    while not finished():
        time.sleep(0.005)
    consumer.shutdown()


def one_round(connection: Connection, n: int, round_number: int) -> dict[str, tuple[float, float]]:
    """(our seconds, raw seconds) of each path, on fresh streams."""
    client = connection.client
    prefix = connection.keys.prefix
    topic = f"orders{round_number}"
    raw_key = f"{prefix}raw:{topic}"
    stream = connection.keys.stream(topic)
    timings = {}

    baseline = timed(lambda: raw_produce(client, raw_key, n))
    with Producer(connection) as producer:
        ours = timed(lambda: our_produce(producer, topic, n))
    timings["rocketmq_produce_batch"] = (ours, baseline)

    def settled(group: str):
        def check() -> bool:
            info = {g["name"].decode(): g for g in client.xinfo_groups(stream)}[group]
            return info["lag"] == 0 and info["pending"] == 0
        return check

    baseline = timed(lambda: raw_consume(client, raw_key, "raw-group", n))
    ours = timed(lambda: our_consume(connection, topic, "bench-group", n, ConsumeResult.SUCCESS,
                                     settled("bench-group")))
    timings["rocketmq_consume_ack"] = (ours, baseline)

    baseline = timed(lambda: raw_fail_to_retry(client, raw_key, "raw-fail", n, prefix))
    ours = timed(lambda: our_consume(connection, topic, "fail-group", n, ConsumeResult.RECONSUME_LATER,
                                     settled("fail-group")))
    assert client.zcard(connection.keys.delay_index("%RETRY%fail-group")) == n * (round_number + 1)
    timings["rocketmq_fail_to_retry"] = (ours, baseline)

    single = min(n, 20_000)

    def raw_single() -> None:
        for _ in range(single):
            client.xadd(f"{prefix}raw:single", {b"id": uuid.uuid4().hex.encode(), b"b": BODY})

    baseline = timed(raw_single)
    with Producer(connection) as producer:
        ours = timed(lambda: [producer.send(Message(topic="single", body=BODY)) for _ in range(single)])
    timings["rocketmq_produce_one_at_a_time"] = (ours * n / single, baseline * n / single)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="repeat each measurement; the fastest round of each side counts")
    parser.add_argument("--url", default=os.environ.get("ROCKETMQ_BENCH_URL", "redis://127.0.0.1:6379/8"))
    args = parser.parse_args()
    n = args.n
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    connection = Connection.from_url(args.url, prefix=prefix, timeout=30)
    client = connection.client
    try:
        print(json.dumps({"machine": platform.platform(), "python": platform.python_version(),
                          "redis": client.info("server")["redis_version"], "cpus": os.cpu_count(),
                          "load_average": os.getloadavg()[0], "rounds": args.rounds}), flush=True)
        best: dict[str, tuple[float, float]] = {}
        for round_number in range(args.rounds):
            for name, (ours, raw) in one_round(connection, n, round_number).items():
                previous = best.get(name, (float("inf"), float("inf")))
                best[name] = (min(previous[0], ours), min(previous[1], raw))
        results = {name: line(name, n, ours, raw, **({"info_only": True} if "one_at_a_time" in name else {}))
                   for name, (ours, raw) in best.items()}
        targeted = [results["rocketmq_produce_batch"], results["rocketmq_consume_ack"]]
        slowest = min(targeted, key=lambda r: r["ratio"])
        print(json.dumps({"name": "rocketmq_streams", "n": n, "rate": slowest["rate"],
                          "baseline_rate": slowest["baseline_rate"], "ratio": slowest["ratio"],
                          "produce_ratio": targeted[0]["ratio"], "consume_ack_ratio": targeted[1]["ratio"],
                          "fail_to_retry_ratio": results["rocketmq_fail_to_retry"]["ratio"],
                          "target": 0.5}), flush=True)
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*", count=5000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start:start + 1000])
        connection.close()


if __name__ == "__main__":
    main()
