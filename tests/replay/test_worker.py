"""The replay guarantees through a real Celery worker (a subprocess on the test
database and Redis DB 9), against each real broker.

- no loss when the worker is killed with SIGKILL mid-job;
- the broker going away mid-job: Pulsar's broker (the test session's own pulsar-lite)
  is really stopped and started again. RabbitMQ and the RocketMQ-style broker's Redis
  are shared with other users of this machine and must not be restarted, so for them
  the cluster is pointed at a closed port mid-job and back, which is what the engine
  sees of a broker that is down (connection refused) and then comes back;
- two operators pressing replay on the same selection at once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
import redis
from django.core.exceptions import ValidationError
from django.db import connection

from console.archive.models import DeadLetter
from console.replay import services
from console.replay.models import ReplayJob, ReplayLedgerEntry
from tests.replay.conftest import (
    CELERY_TEST_BROKER,
    CELERY_TEST_QUEUE,
    cluster_from,
    payloads_received,
    wait_for,
)


def job_state(job_id: int) -> ReplayJob:
    return ReplayJob.objects.get(pk=job_id)


def assert_every_letter_replayed_once_per_ledger(harness, subscription, letters, job_ids):
    """Every selected letter ends replayed; the ledger holds one confirm per letter;
    a copy received twice is one whose entry says it was sent again after a crash."""
    ids = [x.pk for x in letters]
    assert set(DeadLetter.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"replayed"}
    confirmed = ReplayLedgerEntry.objects.filter(job_id__in=job_ids, status="confirmed")
    assert sorted(confirmed.values_list("dead_letter_id", flat=True)) == sorted(ids)
    received = Counter(payloads_received(harness, subscription, len(letters)))
    assert set(received) == {bytes(x.payload) for x in letters}
    resent = {bytes(e.dead_letter.payload)
              for e in confirmed.filter(attempts__gt=1).select_related("dead_letter")}
    twice = {payload for payload, count in received.items() if count > 1}
    assert twice <= resent, "a copy went out twice though the ledger had recorded its confirm"


@pytest.mark.django_db(transaction=True)
def test_a_job_killed_with_sigkill_mid_way_resumes_and_loses_nothing(
        harness, archive_letters, celery_worker, operator, settings):
    cluster = cluster_from(harness)
    subscription, letters = archive_letters(cluster, 160)
    worker = celery_worker()
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], rate_limit=40,
                                     batch_size=10)
    wait_for(lambda: job_state(job.pk).done >= 30, timeout=90, message="the job to get going")
    worker.kill()
    killed = job_state(job.pk)
    assert killed.state == "running" and killed.done < 160

    # The killed run never reports again; recovery (beat runs it every minute) sees
    # that and queues the job for the next worker.
    settings.REPLAY_STALE_SECONDS = 1
    time.sleep(1.5)
    celery_worker()
    assert services.replay_jobs_recover() == [job.pk]
    wait_for(lambda: job_state(job.pk).state == "done", timeout=120, message="the resumed job to finish")

    job = job_state(job.pk)
    assert (job.done, job.failed, job.remaining) == (160, 0, 0)
    assert_every_letter_replayed_once_per_ledger(harness, subscription, letters, [job.pk])


def interrupt_broker(harness, cluster, request):
    """Make the broker unreachable; return a function that brings it back."""
    if harness.kind == "pulsar":
        from brokers.pulsar import embedded

        broker = request.getfixturevalue("pulsar_broker")
        # Come back on the same port, as a restarted broker does: the probe in
        # free_port binds without SO_REUSEADDR and would refuse the port while the old
        # connections sit in TIME_WAIT; the broker itself binds with it.
        monkeypatch = request.getfixturevalue("monkeypatch")
        original = embedded.free_port
        monkeypatch.setattr(embedded, "free_port", lambda preferred=None: preferred or original())
        port = broker.port
        broker.stop()

        def restart():
            broker.start()
            assert broker.port == port

        return restart
    good = (cluster.service_url, cluster.admin_url)
    closed = harness.unreachable_config()
    cluster.service_url, cluster.admin_url = closed.service_url, closed.admin_url
    cluster.save()

    def restore():
        cluster.service_url, cluster.admin_url = good
        cluster.save()

    return restore


@pytest.mark.django_db(transaction=True)
def test_the_broker_going_away_mid_job_only_delays_it(harness, archive_letters, celery_worker, operator,
                                                     request):
    cluster = cluster_from(harness)
    subscription, letters = archive_letters(cluster, 120)
    celery_worker()
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], rate_limit=40,
                                     batch_size=10)
    wait_for(lambda: job_state(job.pk).done >= 20, timeout=90, message="the job to get going")
    restore = interrupt_broker(harness, cluster, request)
    try:
        wait_for(lambda: "unreachable" in job_state(job.pk).state_reason, timeout=60,
                 message="the run to notice the broker is gone")
        stalled = job_state(job.pk)
        assert stalled.state == "running" and stalled.done < 120
    finally:
        restore()
    wait_for(lambda: job_state(job.pk).state == "done", timeout=120, message="the job to finish")

    job = job_state(job.pk)
    assert (job.done, job.failed) == (120, 0)
    assert_every_letter_replayed_once_per_ledger(harness, subscription, letters, [job.pk])


@pytest.mark.django_db(transaction=True)
def test_two_operators_pressing_replay_at_once_send_each_letter_once(
        harness, archive_letters, celery_worker, make_user):
    cluster = cluster_from(harness)
    subscription, letters = archive_letters(cluster, 40)
    ids = [x.pk for x in letters]
    alice, bob = make_user("operator"), make_user("operator")
    celery_worker()
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def press(user):
        barrier.wait()
        try:
            results[user.username] = services.replay_job_create(actor=user, letter_ids=ids, rate_limit=None)
        except ValidationError as exc:
            results[user.username] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=press, args=(user,)) for user in (alice, bob)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    jobs = [r for r in results.values() if isinstance(r, ReplayJob)]
    refused = [r for r in results.values() if isinstance(r, ValidationError)]
    assert len(jobs) == 1 and len(refused) == 1
    assert f"#{jobs[0].pk}" in refused[0].messages[0]
    wait_for(lambda: job_state(jobs[0].pk).state == "done", timeout=90, message="the job to finish")
    assert_every_letter_replayed_once_per_ledger(harness, subscription, letters, [jobs[0].pk])
    assert Counter(payloads_received(harness, subscription, 0, timeout=0.1, settle=1.0)) == Counter()


@pytest.mark.django_db(transaction=True)
def test_a_filter_matching_nothing_finishes_at_once_without_queueing_a_task(make_cluster, operator):
    queue = redis.Redis.from_url(CELERY_TEST_BROKER)
    queue.delete(CELERY_TEST_QUEUE)
    cluster = make_cluster()
    dry = services.replay_job_create(actor=operator, filters={"cluster": cluster.pk, "text": "nothing"},
                                     dry_run=True)
    real = services.replay_job_create(actor=operator, filters={"cluster": cluster.pk, "text": "nothing"})
    assert (dry.state, dry.total, dry.dry_run) == ("done", 0, True)
    assert (real.state, real.total, real.finished_at is not None) == ("done", 0, True)
    assert queue.llen(CELERY_TEST_QUEUE) == 0


@pytest.mark.django_db(transaction=True)
def test_the_database_dropping_the_workers_connections_mid_job_is_recovered(
        harness, archive_letters, celery_worker, operator, settings):
    """What a worker sees of a PostgreSQL restart: its connections are cut. The shared
    server itself cannot be restarted here, so the test cuts the worker's backends
    (pg_terminate_backend) mid-job instead. The run dies with the error; recovery
    queues the job again and it finishes without losing or doubling a letter."""
    cluster = cluster_from(harness)
    subscription, letters = archive_letters(cluster, 120)
    celery_worker()
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], rate_limit=40,
                                     batch_size=10)
    wait_for(lambda: job_state(job.pk).done >= 20, timeout=90, message="the job to get going")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    settings.REPLAY_STALE_SECONDS = 2
    time.sleep(0.5)
    if job_state(job.pk).state != "done":
        wait_for(lambda: services.replay_jobs_recover() or job_state(job.pk).state == "done",
                 timeout=60, interval=1.0, message="recovery to pick the job up")
    wait_for(lambda: job_state(job.pk).state == "done", timeout=120, message="the job to finish")

    job = job_state(job.pk)
    assert (job.done, job.failed) == (120, 0)
    assert_every_letter_replayed_once_per_ledger(harness, subscription, letters, [job.pk])
