"""Fixtures of the replay engine's tests: broker-backed clusters with archived dead
letters, and a real Celery worker started as a subprocess.

Celery in these tests talks to Redis database 9 (never the default 0), both the
test process that queues tasks and the worker that runs them, on a queue of this
test session's own: two test sessions running at once (two developers, or a CI run
next to a local one) never take each other's tasks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

CELERY_TEST_BROKER = "redis://127.0.0.1:6379/9"
CELERY_TEST_QUEUE = f"redrive-replay-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
KINDS = ["pulsar", "rabbitmq", "rocketmq"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def celery_on_test_redis():
    """Send every replay task these tests queue to this session's queue on Redis DB 9."""
    from console.celery import app

    app.conf.broker_url = CELERY_TEST_BROKER
    app.conf.task_routes = {"console.replay.tasks.*": {"queue": CELERY_TEST_QUEUE}}
    app.amqp.flush_routes()
    yield
    redis.Redis.from_url(CELERY_TEST_BROKER).delete(CELERY_TEST_QUEUE)


@pytest.fixture(params=KINDS)
def harness(request):
    return request.getfixturevalue(f"{request.param}_harness")


def cluster_from(harness, **overrides):
    from console.clusters.models import Cluster

    config = harness.cluster_config()
    cluster = Cluster(kind=config.kind, name=f"{config.name}-{os.getpid()}-{time.monotonic_ns()}",
                      service_url=config.service_url, admin_url=config.admin_url,
                      username=config.username, options=dict(config.options), collect_interval_seconds=0)
    cluster.password = config.password
    cluster.token = config.token
    for key, value in overrides.items():
        setattr(cluster, key, value)
    cluster.save()
    return cluster


@pytest.fixture
def broker_cluster(harness, db):
    return cluster_from(harness)


@pytest.fixture
def archive_letters(harness):
    """archive_letters(cluster, n) -> (subscription, archived rows): n dead letters put
    in a fresh subscription's DLQ on the real broker, then collected into the archive."""
    from console.archive.models import DeadLetter
    from console.archive.services import dead_letters_collect

    def make(cluster, n: int, *, properties=None, payload=None):
        subscription = harness.new_subscription()
        harness.put_dead_letters(subscription, [
            (payload(i) if payload else f'{{"order": {i}}}'.encode(),
             {"error": "TimeoutException", "n": str(i), **(properties or {})})
            for i in range(n)], retry_count=3)
        collected = 0
        deadline = time.monotonic() + 30
        while collected < n and time.monotonic() < deadline:
            collected += dead_letters_collect(cluster=cluster, subscription=subscription, actor=None)
        assert collected == n, f"collected {collected} of {n}"
        return subscription, list(DeadLetter.objects.filter(cluster=cluster, subscription=subscription)
                                  .order_by("pk"))

    return make


def payloads_received(harness, subscription: str, expected: int, *, timeout: float = 15.0,
                      settle: float = 2.0) -> list[bytes]:
    """Everything the subscription receives from its source: at least `expected`
    messages, then whatever else arrives within `settle` seconds (duplicates)."""
    received = [body for body, _ in harness.receive_from_source(subscription, expected, timeout=timeout)]
    received += [body for body, _ in harness.receive_from_source(subscription, 10_000, timeout=settle)]
    return received


class Worker:
    """A `celery -A console worker` subprocess on the test database and Redis DB 9."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.process: subprocess.Popen | None = None
        self.log = ROOT / "var" / f"replay-test-worker-{os.getpid()}.log"

    def start(self) -> Worker:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DATABASE_URL": self.database_url, "CELERY_BROKER_URL": CELERY_TEST_BROKER,
               "DJANGO_SETTINGS_MODULE": "console.settings", "LOG_LEVEL": "INFO"}
        env.pop("TEST_DATABASE_NAME", None)
        self.process = subprocess.Popen(
            [str(Path(sys.executable).with_name("celery")), "-A", "console", "worker", "--pool=solo",
             "-Q", CELERY_TEST_QUEUE, "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-l", "info",
             "-n", f"replay-test-{os.getpid()}@%h"],
            cwd=ROOT, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        return self

    def kill(self) -> None:
        """SIGKILL, no goodbye: what a crashed host or the OOM killer does."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def celery_worker(transactional_db):
    """Start a worker (call .start()); it is stopped after the test. The session's
    queue is emptied first so tasks left by an earlier test do not reach this one."""
    from django.db import connection

    redis.Redis.from_url(CELERY_TEST_BROKER).delete(CELERY_TEST_QUEUE)
    settings_dict = connection.settings_dict
    url = (f"postgres://{settings_dict['USER'] or 'postgres'}@{settings_dict['HOST'] or '127.0.0.1'}:"
           f"{settings_dict['PORT'] or 5432}/{settings_dict['NAME']}")
    workers: list[Worker] = []

    def start() -> Worker:
        worker = Worker(url).start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


def wait_for(predicate, *, timeout: float = 60.0, interval: float = 0.2, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {message}")
