"""Benchmark: replay jobs through a real Celery worker, per broker.

For each broker (pulsar-lite started here, RabbitMQ on 127.0.0.1, the RocketMQ-style
broker on the local Redis), N dead letters are put in the archive (PostgreSQL) for a
fresh subscription whose topology the broker's test harness creates. Then:

- baseline: the adapter's own `republish` of the same N messages, held in memory, in
  chunks of --batch, no database, no Celery: what the broker takes through Redrive's
  adapter, measured in the same run;
- unthrottled: one replay job over all N (`rate_limit=None`), created with the
  service the pages use and run by a `celery -A console worker` subprocess; timed
  end to end, from the call that creates the job (selection and ledger included)
  until the worker marks it done;
- throttled: a job at --throttle msg/s over enough letters for --throttle-seconds;
  the achieved rate is letters over the worker's running time (started -> finished).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/replay_jobs.py --n 100000

The archive goes to its own database (`<name>_bench_replay`), migrated here; Celery
uses Redis database 9 (--celery-broker). Queues, streams and topics made here are
removed afterwards. One JSON line per measured path; the last line sums up with
`name`, `n`, `rate`, `baseline_rate` and `ratio` (the slowest broker's unthrottled
ratio).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console_database import console_on_bench_database  # noqa: E402 - after the path

# --- brokers ----------------------------------------------------------------------------

class Brokers:
    """The three test harnesses, driving real brokers; cleaned up on close."""

    def __init__(self) -> None:
        self.closers: list = []
        self.pulsar_dir: Path | None = None

    def harness(self, kind: str):
        if kind == "rabbitmq":
            from tests.fixtures.rabbitmq import RabbitMQHarness

            harness = RabbitMQHarness()

            def close_rabbitmq() -> None:
                # Its connection sat idle through the whole run: open a fresh one to clean up.
                harness._connection = None
                harness.close()

            self.closers.append(close_rabbitmq)
            return harness
        if kind == "rocketmq":
            from tests.fixtures.rocketmq import RocketMQHarness

            harness = RocketMQHarness(f"bench-replay-{uuid.uuid4().hex[:10]}:")
            self.closers.append(harness.close)
            return harness
        import logging

        import pulsar

        from brokers.pulsar.embedded import EmbeddedPulsar
        from tests.fixtures.pulsar import PulsarHarness

        self.pulsar_dir = Path(tempfile.mkdtemp(prefix="redrive-bench-pulsar-"))
        broker = EmbeddedPulsar(self.pulsar_dir)
        broker.start()
        quiet = logging.getLogger("bench.pulsar.client")
        quiet.setLevel(logging.WARNING)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=quiet)
        self.closers += [broker.stop, client.close]
        return PulsarHarness(broker, client)

    def close(self) -> None:
        for close in reversed(self.closers):
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - cleanup goes on
                print(f"cleanup: {exc}", file=sys.stderr)
        if self.pulsar_dir:
            shutil.rmtree(self.pulsar_dir, ignore_errors=True)


def source_of(harness, subscription: str) -> str:
    if harness.kind == "pulsar":
        return harness.sources[subscription]
    if harness.kind == "rocketmq":
        return harness.topics[subscription]
    return f"orders.{harness.tag}.created"


def make_cluster(harness):
    from console.clusters.models import Cluster

    config = harness.cluster_config()
    cluster = Cluster(kind=config.kind, name=f"bench-{config.kind}-{uuid.uuid4().hex[:8]}",
                      service_url=config.service_url, admin_url=config.admin_url, username=config.username,
                      options=dict(config.options), collect_interval_seconds=0)
    cluster.password = config.password
    cluster.save()
    return cluster


def archive(cluster, subscription: str, source: str, n: int, *, tag: str) -> None:
    """N dead letters in the archive, through the same store collecting uses."""
    from brokers.base import DeadLetter as BrokerDeadLetter
    from console.archive.services import archive_store

    for start in range(0, n, 5000):
        archive_store(cluster=cluster, letters=[
            BrokerDeadLetter(broker_message_id=f"{tag}-{i}", subscription=subscription, source=source,
                             payload=json.dumps({"order": i, "pad": "x" * 200}).encode(),
                             properties={"error": "TimeoutException", "tenant": "bench"}, retry_count=3,
                             origin_message_id=f"{tag}-origin-{i}")
            for i in range(start, min(n, start + 5000))])


def baseline(harness, subscription: str, source: str, n: int, batch: int) -> float:
    """Seconds for the adapter alone to republish n in-memory messages."""
    from brokers import adapter_for
    from brokers.base import ReplayMessage

    payload = json.dumps({"order": 0, "pad": "x" * 200}).encode()
    messages = [ReplayMessage(key=str(i), subscription=subscription, source=source, payload=payload,
                              properties={"error": "TimeoutException", "tenant": "bench"},
                              origin_message_id=f"baseline-{i}") for i in range(n)]
    with adapter_for(harness.cluster_config()) as adapter:
        started = time.perf_counter()
        for start in range(0, n, batch):
            outcomes = adapter.republish(messages[start:start + batch])
            assert all(o.confirmed for o in outcomes), [o for o in outcomes if not o.confirmed][:1]
        return time.perf_counter() - started


def wait_done(job_id: int, timeout: float) -> object:
    from console.replay.models import ReplayJob

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = ReplayJob.objects.get(pk=job_id)
        if job.state not in (ReplayJob.STATE_QUEUED, ReplayJob.STATE_RUNNING):
            return job
        time.sleep(0.2)
    raise SystemExit(f"job {job_id} did not finish within {timeout} s")


def start_worker(database_url: str, celery_broker: str, log: Path) -> subprocess.Popen:
    import redis

    redis.Redis.from_url(celery_broker).delete("celery")
    env = {**os.environ, "DATABASE_URL": database_url, "CELERY_BROKER_URL": celery_broker,
           "LOG_LEVEL": "WARNING"}
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("celery")), "-A", "console", "worker", "--pool=solo",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning",
         "-n", f"bench-replay-{os.getpid()}@%h"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def line(payload: dict) -> dict:
    print(json.dumps(payload), flush=True)
    return payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500, help="job batch size and baseline chunk")
    parser.add_argument("--throttle", type=float, default=500.0, help="msg/s of the throttled run")
    parser.add_argument("--throttle-seconds", type=int, default=60)
    parser.add_argument("--kinds", default="rabbitmq,rocketmq,pulsar")
    parser.add_argument("--celery-broker", default="redis://127.0.0.1:6379/9")
    args = parser.parse_args()

    database_url = console_on_bench_database(
        "replay", CELERY_BROKER_URL=args.celery_broker,
        LOG_LEVEL=os.environ.get("LOG_LEVEL", "WARNING"))
    from console.celery import app
    from console.replay import services

    app.conf.broker_url = args.celery_broker
    log = ROOT / "var" / "bench-replay-worker.log"
    log.parent.mkdir(exist_ok=True)
    worker = start_worker(database_url, args.celery_broker, log)
    brokers = Brokers()
    results = []
    try:
        for kind in args.kinds.split(","):
            harness = brokers.harness(kind)
            subscription = harness.new_subscription()
            source = source_of(harness, subscription)
            cluster = make_cluster(harness)
            tag = uuid.uuid4().hex[:8]

            baseline_seconds = baseline(harness, subscription, source, args.n, args.batch)
            archive(cluster, subscription, source, args.n, tag=f"{tag}-u")
            started = time.perf_counter()
            job = services.replay_job_create(actor=None, filters={"cluster": cluster.pk, "state": "parked"},
                                             rate_limit=None, batch_size=args.batch,
                                             description="benchmark, unthrottled")
            created = time.perf_counter() - started
            job = wait_done(job.pk, timeout=3600)
            seconds = time.perf_counter() - started
            assert (job.state, job.done) == ("done", args.n), (job.state, job.done, job.state_reason)
            run_seconds = (job.finished_at - job.started_at).total_seconds()
            rate, base = args.n / seconds, args.n / baseline_seconds
            results.append(line({
                "name": f"replay_job_{kind}", "n": args.n, "rate": round(rate, 1),
                "baseline_rate": round(base, 1), "ratio": round(rate / base, 3),
                "create_seconds": round(created, 2), "worker_rate": round(args.n / run_seconds, 1),
                "batch": args.batch}))

            throttled_n = int(min(args.n, args.throttle * args.throttle_seconds))
            archive(cluster, subscription, source, throttled_n, tag=f"{tag}-t")
            job = services.replay_job_create(actor=None, filters={"cluster": cluster.pk, "state": "parked"},
                                             rate_limit=args.throttle, batch_size=args.batch,
                                             description="benchmark, throttled")
            job = wait_done(job.pk, timeout=throttled_n / args.throttle * 3 + 120)
            assert job.done == throttled_n, (job.state, job.done)
            achieved = throttled_n / (job.finished_at - job.started_at).total_seconds()
            line({"name": f"replay_job_{kind}_throttled", "n": throttled_n, "rate": round(achieved, 1),
                  "target_rate": args.throttle, "accuracy": round(achieved / args.throttle, 4),
                  "baseline_rate": round(base, 1), "ratio": round(achieved / base, 3)})
    finally:
        worker.terminate()
        worker.wait(30)
        brokers.close()
    slowest = min(results, key=lambda r: r["ratio"])
    line({"name": "replay_jobs", "n": args.n, "rate": slowest["rate"],
          "baseline_rate": slowest["baseline_rate"], "ratio": slowest["ratio"], "slowest": slowest["name"],
          **{f"{r['name'].removeprefix('replay_job_')}_ratio": r["ratio"] for r in results}})


if __name__ == "__main__":
    main()
