"""The replay engine against each real broker, runs driven in the test process.

The same tests run over Pulsar, the RocketMQ-style broker and RabbitMQ (the
`harness` fixture), like the adapter contract suite. Runs here call the service a
Celery task calls; tests/replay/test_worker.py does the same through a real worker.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.core.exceptions import ValidationError

from console.archive.models import DeadLetter
from console.audit.models import AuditEntry
from console.replay import services
from console.replay.models import ReplayJob, ReplayLedgerEntry
from tests.replay.conftest import payloads_received


def run_to_end(job: ReplayJob, *, max_runs: int = 20) -> ReplayJob:
    for _ in range(max_runs):
        services.replay_job_run(job_id=job.pk)
        job.refresh_from_db()
        if job.state != ReplayJob.STATE_RUNNING and job.state != ReplayJob.STATE_QUEUED:
            return job
    raise AssertionError(f"job still {job.state} after {max_runs} runs")


def test_a_job_puts_every_selected_letter_back_and_records_each_confirm(
        harness, broker_cluster, archive_letters, operator):
    subscription, letters = archive_letters(broker_cluster, 12, properties={"tenant": "acme"})
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], rate_limit=None,
                                     batch_size=5)
    job = run_to_end(job)

    assert (job.state, job.done, job.failed, job.skipped, job.remaining) == ("done", 12, 0, 0, 0)
    received = harness.receive_from_source(subscription, 12)
    assert sorted(body for body, _ in received) == sorted(bytes(x.payload) for x in letters)
    for _, props in received:
        assert props["tenant"] == "acme"
        assert harness.retry_count_of(props) == 0
    assert set(DeadLetter.objects.filter(pk__in=[x.pk for x in letters]).values_list("state", flat=True)) \
        == {"replayed"}
    ledger = ReplayLedgerEntry.objects.filter(job=job)
    assert ledger.count() == 12
    assert set(ledger.values_list("status", flat=True)) == {"confirmed"}
    assert set(ledger.values_list("attempts", flat=True)) == {1}
    assert AuditEntry.objects.filter(action="replay.start", count=12).exists()
    assert AuditEntry.objects.filter(action="replay.finish", detail__contains=f"job #{job.pk}").exists()


def test_resuming_never_publishes_again_what_the_ledger_says_was_confirmed(
        harness, broker_cluster, archive_letters, operator):
    subscription, letters = archive_letters(broker_cluster, 60)
    # 40 msg/s in batches of 10: a 0.3 s budget sends at most three batches and stops,
    # as a pause would.
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], rate_limit=40,
                                     batch_size=10)
    assert services.replay_job_run(job_id=job.pk, budget_seconds=0.3) == "continued"
    job.refresh_from_db()
    assert 0 < job.done < 60, job.done

    job = run_to_end(job)
    assert (job.state, job.done) == ("done", 60)
    received = payloads_received(harness, subscription, 60)
    assert Counter(received) == Counter(bytes(x.payload) for x in letters)
    assert set(ReplayLedgerEntry.objects.filter(job=job).values_list("attempts", flat=True)) == {1}


def test_a_crash_between_publish_and_record_resends_that_batch_and_loses_nothing(
        harness, broker_cluster, archive_letters, operator):
    """A run that died after claiming a batch (letters `replaying`, entries `claimed`)
    but before recording the broker's confirms: the next run sends exactly that batch
    again, then the rest. Nothing is lost; the ledger's attempts say what went twice."""
    subscription, letters = archive_letters(broker_cluster, 8)
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], rate_limit=None,
                                     batch_size=3)
    ReplayJob.objects.filter(pk=job.pk).update(state="running")
    claimed = services._claim_batch(job, 3)  # the dead run's batch; it may or may not have been sent
    assert DeadLetter.objects.filter(state="replaying").count() == 3

    job = run_to_end(job)
    assert (job.state, job.done, job.failed) == ("done", 8, 0)
    twice = ReplayLedgerEntry.objects.filter(job=job, attempts=2)
    assert set(twice.values_list("pk", flat=True)) == {e.pk for e in claimed}
    assert set(DeadLetter.objects.filter(pk__in=[x.pk for x in letters]).values_list("state", flat=True)) \
        == {"replayed"}
    received = payloads_received(harness, subscription, 8)
    assert Counter(received) == Counter(bytes(x.payload) for x in letters)


def test_a_letter_another_job_already_replayed_is_skipped_with_the_reason(
        harness, broker_cluster, archive_letters, operator):
    subscription, letters = archive_letters(broker_cluster, 6)
    ids = [x.pk for x in letters]
    first = services.replay_job_create(actor=operator, letter_ids=ids, rate_limit=None)
    # The first job's run failed (say the broker was down); an operator starts another
    # job over the same letters instead of resuming, then resumes the first one too.
    ReplayJob.objects.filter(pk=first.pk).update(state="failed")
    second = run_to_end(services.replay_job_create(actor=operator, letter_ids=ids, rate_limit=None))
    assert second.done == 6
    services.replay_job_resume(job_id=first.pk, actor=operator)
    first = run_to_end(first)

    assert (first.state, first.done, first.skipped) == ("done", 0, 6)
    reasons = set(ReplayLedgerEntry.objects.filter(job=first).values_list("reason", flat=True))
    assert reasons == {f"already replayed (replayed by job #{second.pk})"}
    received = payloads_received(harness, subscription, 6)
    assert Counter(received) == Counter(bytes(x.payload) for x in letters)


def test_an_unreachable_broker_fails_the_job_resumably_and_resume_finishes_it(
        harness, broker_cluster, archive_letters, operator, settings):
    settings.REPLAY_UNREACHABLE_SECONDS = 2
    subscription, letters = archive_letters(broker_cluster, 5)
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], rate_limit=None)
    good_url, good_admin = broker_cluster.service_url, broker_cluster.admin_url
    unreachable = harness.unreachable_config()
    broker_cluster.service_url, broker_cluster.admin_url = unreachable.service_url, unreachable.admin_url
    broker_cluster.save()

    assert services.replay_job_run(job_id=job.pk) == "failed"
    job.refresh_from_db()
    assert job.state == "failed" and "unreachable" in job.state_reason
    # Nothing confirmed, nothing lost: every letter is still in the archive, held by the job.
    assert DeadLetter.objects.filter(pk__in=[x.pk for x in letters]).exclude(state="replaying").count() == 0

    broker_cluster.service_url, broker_cluster.admin_url = good_url, good_admin
    broker_cluster.save()
    services.replay_job_resume(job_id=job.pk, actor=operator)
    job = run_to_end(job)
    assert (job.state, job.done) == ("done", 5)
    assert sorted(payloads_received(harness, subscription, 5)) == sorted(bytes(x.payload) for x in letters)


def test_an_unknown_destination_is_refused_before_anything_is_sent(
        harness, broker_cluster, archive_letters, operator):
    _subscription, letters = archive_letters(broker_cluster, 2)
    with pytest.raises(ValidationError, match="not a replay destination"):
        services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters],
                                   destination="no-such-destination-anywhere")
    assert not ReplayJob.objects.exists()


def test_every_destination_the_adapter_offers_is_accepted(harness, broker_cluster, archive_letters,
                                                          operator):
    from console.clusters.services import cluster_adapter

    subscription, letters = archive_letters(broker_cluster, 1)
    with cluster_adapter(broker_cluster) as adapter:
        offered = [value for value, _ in adapter.replay_destinations(subscription) if value]
    for value in offered:
        job = services.replay_job_create(actor=operator, letter_ids=[letters[0].pk], destination=value,
                                         dry_run=True)
        assert job.destination == value and job.total == 1


def test_resend_sends_the_edited_copy_and_keeps_the_original(harness, broker_cluster, archive_letters,
                                                              operator):
    subscription, [letter] = archive_letters(broker_cluster, 1)
    original = bytes(letter.payload)
    job = services.dead_letter_resend(letter=letter, actor=operator, payload=b'{"order": "fixed"}',
                                      properties={**letter.properties, "error": "fixed by hand"})
    job = run_to_end(job)

    assert job.done == 1
    [(body, props)] = harness.receive_from_source(subscription, 1)
    assert body == b'{"order": "fixed"}'
    assert props["error"] == "fixed by hand"
    letter.refresh_from_db()
    assert bytes(letter.payload) == original and letter.properties["error"] == "TimeoutException"
    assert letter.state == "replayed"
    entry = AuditEntry.objects.get(action="replay.resend")
    assert "fixed by hand" in entry.detail and '"order": "fixed"' in entry.detail


def make_permanently_unsendable(harness, cluster, letter) -> None:
    """Change one archived letter so its broker refuses it for good: for RabbitMQ a
    body over the cluster's configured size limit; for Pulsar and the RocketMQ-style
    broker an origin topic whose name the broker can never accept (as if the topic
    it came from had been renamed to something invalid)."""
    if harness.kind == "rabbitmq":
        cluster.options = {**cluster.options, "max_message_bytes": 1000}
        cluster.save()
        letter.payload = b"x" * 5000
        letter.save(update_fields=["payload"])
    else:
        topic = "persistent://no such tenant/ns/bad topic" if harness.kind == "pulsar" else "bad topic!"
        letter.properties = {**letter.properties, "REAL_TOPIC": topic}
        letter.source = topic
        letter.save(update_fields=["properties", "source"])


def test_a_permanent_error_fails_that_letter_with_the_brokers_message_and_the_job_goes_on(
        harness, broker_cluster, archive_letters, operator):
    subscription, letters = archive_letters(broker_cluster, 5)
    bad = letters[2]
    make_permanently_unsendable(harness, broker_cluster, bad)
    job = run_to_end(services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters],
                                                rate_limit=None, batch_size=2))

    assert (job.state, job.done, job.failed) == ("done", 4, 1)
    bad.refresh_from_db()
    assert bad.state == "failed"
    entry = ReplayLedgerEntry.objects.get(job=job, dead_letter=bad)
    assert entry.status == "failed" and entry.reason
    assert entry.reason in bad.state_reason
    good = [bytes(x.payload) for x in letters if x.pk != bad.pk]
    assert sorted(payloads_received(harness, subscription, 4)) == sorted(good)


def test_auto_collect_moves_every_dlq_of_the_cluster_into_the_archive(harness, broker_cluster):
    """What the per-cluster beat entry runs. Pulsar's depths come from a metrics
    snapshot refreshed every few seconds, so the collect is repeated until it shows."""
    import time

    subscription = harness.new_subscription()
    harness.put_dead_letters(subscription, [(f"auto {i}".encode(), {"error": "Timeout"}) for i in range(7)])
    deadline = time.monotonic() + 30
    moved = 0
    while moved < 7 and time.monotonic() < deadline:
        moved += services.archive_collect_cluster(cluster_id=broker_cluster.pk)
        time.sleep(0.5 if moved < 7 else 0)
    assert moved == 7
    archived = DeadLetter.objects.filter(cluster=broker_cluster, subscription=subscription)
    assert sorted(bytes(x.payload) for x in archived) == sorted(f"auto {i}".encode() for i in range(7))
    assert harness.dead_letter_depth(subscription) == 0
    assert AuditEntry.objects.filter(action="archive.collect", subscription=subscription, count=7).exists()


def test_auto_collect_of_an_unreachable_cluster_changes_nothing(harness, make_cluster):
    unreachable = harness.unreachable_config()
    cluster = make_cluster(kind=harness.kind, service_url=unreachable.service_url,
                           admin_url=unreachable.admin_url, options=dict(unreachable.options))
    assert services.archive_collect_cluster(cluster_id=cluster.pk) == 0
    assert services.archive_collect_cluster(cluster_id=987654) == 0
    assert not DeadLetter.objects.exists()
