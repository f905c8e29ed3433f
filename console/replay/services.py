"""Writes of the replay engine: creating and running replay jobs, controlling them,
resending one letter, replay policies (schedules), auto-collect and retention.

How a job moves a message, and why nothing is lost (see docs/replay.md):

1. Creating a job writes one `pending` ledger entry per selected letter, in the same
   transaction as the job; the task is queued only after that commit.
2. A run *claims* a batch: in one transaction the letters go `parked/failed ->
   replaying` and their entries `pending -> claimed`. A letter already replaying,
   replayed or discarded is skipped with the reason written on its entry.
3. The batch is published; the adapter returns only after the broker confirmed each
   copy (or said why not).
4. One transaction records the outcomes: confirmed entries and `replayed` letters,
   or failed ones with the broker's message.

A crash between 2 and 4 leaves the letter in the archive, `replaying`, with a
`claimed` entry: the next run of the job publishes it again (its `attempts` grows).
That window, one batch at most, is the only place a copy can reach the broker twice,
and the replay marker (the origin message id) lets consumers drop it. A confirmed
entry is never published again by its job. The archived letter itself is never
deleted by a replay, so a crash at any instant leaves every message in the archive
and possibly also on the broker, never in neither.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from brokers.base import BrokerAdapter, BrokerError, ReplayMessage, ReplayOutcome
from console.archive.models import DeadLetter
from console.archive.selectors import dead_letter_list
from console.audit.services import audit_record
from console.clusters.models import Cluster
from console.clusters.services import cluster_adapter
from console.replay.models import ReplayJob, ReplayLedgerEntry, ReplayPolicy, RetentionSetting

logger = logging.getLogger(__name__)


# Limits an operator can choose within. The default rate is deliberately modest: a
# replay should not become the storm that filled the DLQ in the first place.
DEFAULT_RATE = 100.0
MAX_RATE = 50_000.0
DEFAULT_BATCH = 100
MAX_BATCH = 1000
# Transient per-message failures are retried this many times in all before the letter
# is marked failed.
MAX_ATTEMPTS = 5
# Back-off between retries, the producer numbers of semantics.md: 1 s, x1.6, +-20 %
# jitter, capped.
BACKOFF_INITIAL, BACKOFF_MULTIPLIER, BACKOFF_JITTER, BACKOFF_MAX = 1.0, 1.6, 0.2, 30.0

ELIGIBLE_STATES = (DeadLetter.STATE_PARKED, DeadLetter.STATE_FAILED)
# Jobs whose pending letters no other job may take.
HOLDING_STATES = ReplayJob.ACTIVE_STATES
CREATE_LOCK_KEY = 0x5245504C  # any constant; serialises job creation on PostgreSQL


def stale_after() -> timedelta:
    """A running job whose run has not reported for this long is taken to be dead."""
    return timedelta(seconds=settings.REPLAY_STALE_SECONDS)


def slice_seconds() -> float:
    """A run works this long, then hands over to a fresh task (keeps tasks short)."""
    return float(settings.REPLAY_SLICE_SECONDS)


def unreachable_give_up_seconds() -> float:
    """How long a run keeps retrying an unreachable broker before the job fails
    (resumable)."""
    return float(settings.REPLAY_UNREACHABLE_SECONDS)


# --- validation -------------------------------------------------------------------

def rate_limit_clean(value) -> float | None:
    """A rate in messages per second, or None for unthrottled; clear errors otherwise."""
    if value is None:
        return None
    try:
        rate = float(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError({"rate_limit": "The rate must be a number of messages per second."}) from exc
    if math.isnan(rate) or math.isinf(rate):
        raise ValidationError({"rate_limit": "The rate must be a finite number of messages per second."})
    if rate <= 0:
        raise ValidationError({"rate_limit": "The rate must be more than 0 messages per second "
                                             "(ask for 'unthrottled' to send without a limit)."})
    if rate > MAX_RATE:
        raise ValidationError({"rate_limit": f"The rate may be at most {MAX_RATE:,.0f} messages per "
                                             "second (ask for 'unthrottled' instead)."})
    return rate


def batch_size_clean(value) -> int:
    try:
        size = int(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError({"batch_size": "The batch size must be a whole number."}) from exc
    if not 1 <= size <= MAX_BATCH:
        raise ValidationError({"batch_size": f"The batch size must be between 1 and {MAX_BATCH}."})
    return size


def _destination_check(*, letters, destination: str) -> None:
    """A destination other than the default must be one the adapter offers for the
    selection's one subscription."""
    if not destination:
        return
    targets = list(letters.values_list("cluster_id", "subscription").distinct().order_by()[:2])
    if len(targets) != 1:
        raise ValidationError({"destination": "A destination other than where the letters came from "
                                              "needs a selection from one subscription of one cluster."})
    cluster_id, subscription = targets[0]
    cluster = Cluster.objects.get(pk=cluster_id)
    try:
        with cluster_adapter(cluster) as adapter:
            offered = [value for value, _label in adapter.replay_destinations(subscription)]
    except BrokerError as exc:
        raise ValidationError({"destination": f"Could not ask {cluster.name} for its destinations: "
                                              f"{exc.message}"}) from exc
    if destination not in offered:
        raise ValidationError({"destination": f"{destination!r} is not a replay destination of "
                                              f"{subscription} on {cluster.name}."})


# --- creating jobs ----------------------------------------------------------------

def _json_safe_filters(filters: Mapping) -> dict:
    """Filters as stored on the job (dates as ISO strings, the property as key=value)."""
    stored = {}
    for key, value in filters.items():
        if hasattr(value, "isoformat"):
            value = value.isoformat()
        elif key == "property" and isinstance(value, tuple | list):
            value = f"{value[0]}={value[1]}"
        stored[key] = value
    return stored


def replay_filters_parse(stored: Mapping) -> dict:
    """Stored filters back to `dead_letter_list` arguments, validated like the archive page."""
    from console.archive.forms import ArchiveFilterForm

    form = ArchiveFilterForm({k: v for k, v in stored.items() if v not in (None, "")})
    if not form.is_valid():
        raise ValidationError({"filters": [f"{field}: {' '.join(errors)}"
                                           for field, errors in form.errors.items()]})
    return form.filters()


def _lock_job_creation() -> None:
    # Two operators pressing replay at the same instant: their creations run one after
    # the other, so the second sees the first one's selection as taken.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CREATE_LOCK_KEY])


def replay_job_create(
    *, actor, letter_ids: Sequence[int] | None = None, filters: Mapping | None = None,
    rate_limit: float | None = DEFAULT_RATE, batch_size: int = DEFAULT_BATCH,
    destination: str = "", dry_run: bool = False, description: str = "",
    policy: ReplayPolicy | None = None, limit: int | None = None,
    overrides: Mapping[int, tuple[bytes | None, dict | None]] | None = None,
) -> ReplayJob:
    """Create a replay job over a selection (`letter_ids`) or everything matching
    `filters` (arguments of `dead_letter_list`), and queue it once committed.

    Only parked or failed letters are selected. Letters already held by another
    active job are left to it; if that leaves nothing, the request is refused with
    the job that holds them. A dry run only counts: it is recorded as a finished job
    with `total` set and sends nothing.
    """
    if (letter_ids is None) == (filters is None):
        raise ValidationError("Give either a selection of dead letters or a filter.")
    rate = rate_limit_clean(rate_limit)
    size = batch_size_clean(batch_size)
    destination = (destination or "").strip()
    if len(destination) > 500:
        raise ValidationError({"destination": "The destination name is too long."})

    if letter_ids is not None:
        ids = sorted({int(i) for i in letter_ids})
        if not ids:
            raise ValidationError("Select at least one dead letter.")
        found = DeadLetter.objects.filter(pk__in=ids)
        if not found.exists():
            raise ValidationError("None of the selected dead letters exists.")
        matching = found
        stored_filters: dict = {}
    else:
        matching = dead_letter_list(**dict(filters))
        stored_filters = _json_safe_filters(filters)
    eligible = matching.filter(state__in=ELIGIBLE_STATES)
    _destination_check(letters=eligible, destination=destination)

    with transaction.atomic():
        _lock_job_creation()
        held = ReplayLedgerEntry.objects.filter(
            status__in=[ReplayLedgerEntry.STATUS_PENDING, ReplayLedgerEntry.STATUS_CLAIMED],
            job__state__in=HOLDING_STATES,
        )
        free = eligible.exclude(pk__in=held.values("dead_letter_id")).order_by("pk")
        picked = free.values_list("pk", flat=True)
        if limit:
            picked = picked[:limit]
        count = picked.count()
        if not count and not dry_run:
            holders = sorted(set(held.filter(dead_letter__in=eligible)
                                 .values_list("job_id", flat=True)[:5]))
            if holders:
                raise ValidationError(
                    "Every selected dead letter is already in replay job "
                    + ", ".join(f"#{pk}" for pk in holders) + "; nothing new to replay.")
        now = timezone.now()
        job = ReplayJob.objects.create(
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
            created_by_name=actor.get_username() if getattr(actor, "is_authenticated", False)
            else ("policy " + policy.name if policy else "system"),
            policy=policy, description=description[:500], filters=stored_filters,
            rate_limit=rate, batch_size=size, destination=destination, dry_run=dry_run,
            total=count,
        )
        targets = list(free.values_list("cluster__name", "subscription").distinct().order_by()[:2])
        cluster_name, subscription = targets[0] if len(targets) == 1 else ("", "")
        cluster = Cluster(name=cluster_name) if cluster_name else None
        detail = (f"job #{job.pk}; rate={'unthrottled' if rate is None else f'{rate:g}/s'}; "
                  f"batch={size}; destination={destination or 'origin'}; "
                  + (f"filters={json.dumps(stored_filters, sort_keys=True)}" if letter_ids is None
                     else "selection"))
        if dry_run:
            job.state, job.finished_at, job.started_at = ReplayJob.STATE_DONE, now, now
            job.state_reason = f"dry run: {count} dead letter(s) would be replayed"
            job.save(update_fields=["state", "finished_at", "started_at", "state_reason"])
            audit_record(actor=actor, action="replay.dry_run", cluster=cluster,
                         subscription=subscription, count=count, detail=detail)
            return job
        inserted = _ledger_fill(job=job, picked=picked, overrides=overrides or {})
        if inserted != count:
            job.total = inserted
            job.save(update_fields=["total"])
        selected = inserted
        audit_record(actor=actor, action="replay.start", cluster=cluster, subscription=subscription,
                     count=selected, detail=detail)
        if not selected:
            # Nothing matched: the job is finished at once, no task needed.
            job.state, job.started_at, job.finished_at = ReplayJob.STATE_DONE, now, now
            job.state_reason = "nothing matched the selection"
            job.save(update_fields=["state", "started_at", "finished_at", "state_reason"])
            audit_record(actor=actor, action="replay.finish", cluster=cluster,
                         subscription=subscription, count=0, detail=f"job #{job.pk}: nothing to send")
            return job
        _enqueue_on_commit(job.pk)
    return job


def _ledger_fill(*, job: ReplayJob, picked, overrides: Mapping) -> int:
    """One pending ledger entry per picked letter; returns how many. On PostgreSQL a
    single INSERT ... SELECT (100,000 letters in about a second instead of a minute
    of object building)."""
    if overrides or connection.vendor != "postgresql":
        ids = list(picked)
        for start in range(0, len(ids), 5000):
            ReplayLedgerEntry.objects.bulk_create([
                ReplayLedgerEntry(job=job, dead_letter_id=pk,
                                  payload_override=overrides.get(pk, (None, None))[0],
                                  properties_override=overrides.get(pk, (None, None))[1])
                for pk in ids[start:start + 5000]
            ])
        return len(ids)
    select_sql, params = picked.query.sql_with_params()
    table = ReplayLedgerEntry._meta.db_table
    with connection.cursor() as cursor:
        # Table name from the model; the selection is the ORM's own compiled query.
        cursor.execute(
            f"INSERT INTO {table} (job_id, dead_letter_id, status, attempts, broker_message_id, "  # noqa: S608
            "reason, updated_at) SELECT %s, picked.id, %s, 0, '', '', now() "
            f"FROM ({select_sql}) AS picked(id)",
            [job.pk, ReplayLedgerEntry.STATUS_PENDING, *params])
        return cursor.rowcount


def _enqueue_on_commit(job_id: int) -> None:
    from console.replay import tasks

    transaction.on_commit(lambda: tasks.replay_job_run.delay(job_id))


# --- resending one letter -----------------------------------------------------------

def _properties_diff(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    lines = []
    for key in sorted(set(before) | set(after)):
        if key not in after:
            lines.append(f"- property {key!r} removed (was {before[key]!r})")
        elif key not in before:
            lines.append(f"+ property {key!r} added: {after[key]!r}")
        elif before[key] != after[key]:
            lines.append(f"~ property {key!r}: {before[key]!r} -> {after[key]!r}")
    return lines


def _payload_diff(before: bytes, after: bytes) -> list[str]:
    import difflib

    if before == after:
        return []
    try:
        old, new = before.decode("utf-8"), after.decode("utf-8")
    except UnicodeDecodeError:
        return [f"~ payload replaced ({len(before)} -> {len(after)} bytes)"]
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "original", "edited", lineterm="", n=1)
    return ["~ payload:", *list(diff)[:200]]


def properties_clean(raw) -> dict[str, str]:
    """Edited properties: a JSON object (or mapping) of string keys to string values."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValidationError({"properties": f"Properties must be a JSON object: {exc.msg}."}) from exc
    if not isinstance(raw, dict):
        raise ValidationError({"properties": "Properties must be a JSON object of strings."})
    if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in raw.items()):
        raise ValidationError({"properties": "Every property needs a non-empty text key and a text value."})
    return raw


def dead_letter_resend(*, letter: DeadLetter, actor, payload: bytes | None = None,
                       properties: Mapping[str, str] | None = None, destination: str = "") -> ReplayJob:
    """Put one dead letter back, optionally edited. The archived original stays as it
    was; the edited copy is kept on the job's ledger entry and its diff goes to the
    audit log. Runs as a one-letter job so it has the same guarantees as any other."""
    if letter.state not in ELIGIBLE_STATES:
        raise ValidationError(f"Dead letter {letter.pk} is {letter.get_state_display()}; only parked or "
                              "failed letters can be resent.")
    max_size = settings.REPLAY_MAX_EDITED_PAYLOAD
    if payload is not None and len(payload) > max_size:
        raise ValidationError({"payload": f"The edited payload is larger than {max_size} bytes."})
    original_payload = bytes(letter.payload)
    new_payload = None if payload is None or payload == original_payload else bytes(payload)
    new_properties = None
    if properties is not None:
        cleaned = properties_clean(dict(properties) if isinstance(properties, Mapping) else properties)
        if cleaned != letter.properties:
            new_properties = cleaned
    diff = _payload_diff(original_payload, new_payload) if new_payload is not None else []
    if new_properties is not None:
        diff += _properties_diff(letter.properties, new_properties)
    with transaction.atomic():
        job = replay_job_create(
            actor=actor, letter_ids=[letter.pk], rate_limit=None, batch_size=1,
            destination=destination, description=f"resend of dead letter {letter.pk}"
            + (" (edited)" if diff else ""),
            overrides={letter.pk: (new_payload, new_properties)} if diff else None,
        )
        audit_record(actor=actor, action="replay.resend", cluster=letter.cluster,
                     subscription=letter.subscription, count=1,
                     detail=f"dead letter {letter.pk}, job #{job.pk}; "
                     + ("edited:\n" + "\n".join(diff) if diff else "unchanged"))
    return job


# --- controlling jobs ---------------------------------------------------------------

def _job_locked(job_id: int) -> ReplayJob:
    return ReplayJob.objects.select_for_update().get(pk=job_id)


def _run_alive(job: ReplayJob) -> bool:
    return bool(job.lease_id) and job.heartbeat_at is not None and (
        timezone.now() - job.heartbeat_at < stale_after())


def replay_job_pause(*, job_id: int, actor) -> ReplayJob:
    """Stop sending after the batch in flight; resumable."""
    with transaction.atomic():
        job = _job_locked(job_id)
        if job.state not in (ReplayJob.STATE_QUEUED, ReplayJob.STATE_RUNNING):
            raise ValidationError(f"Replay job #{job.pk} is {job.state}; only a queued or running job "
                                  "can be paused.")
        job.state = ReplayJob.STATE_PAUSED
        job.save(update_fields=["state"])
        audit_record(actor=actor, action="replay.pause", count=job.remaining, detail=f"job #{job.pk}")
    return job


def replay_job_resume(*, job_id: int, actor) -> ReplayJob:
    """Queue a paused or failed job again, or a running one whose run has died."""
    with transaction.atomic():
        job = _job_locked(job_id)
        if job.state == ReplayJob.STATE_RUNNING:
            if _run_alive(job):
                raise ValidationError(f"Replay job #{job.pk} is running; there is nothing to resume.")
            job.lease_id = ""  # the run that held it stopped reporting: it is dead
        elif job.state in (ReplayJob.STATE_PAUSED, ReplayJob.STATE_FAILED):
            job.state = ReplayJob.STATE_QUEUED
            job.heartbeat_at = timezone.now()  # queued at; see replay_jobs_recover
        else:
            raise ValidationError(f"Replay job #{job.pk} is {job.state}; only a paused, failed or "
                                  "stalled job can be resumed.")
        job.state_reason = ""
        job.save(update_fields=["state", "lease_id", "state_reason", "heartbeat_at"])
        audit_record(actor=actor, action="replay.resume", count=job.remaining, detail=f"job #{job.pk}")
        _enqueue_on_commit(job.pk)
    return job


def replay_job_cancel(*, job_id: int, actor) -> ReplayJob:
    """Stop for good. Letters not sent yet stay parked. A letter whose publish was in
    flight in a run that died is marked failed with that said, so no letter stays
    `replaying` without an owner."""
    with transaction.atomic():
        job = _job_locked(job_id)
        if job.state in ReplayJob.FINAL_STATES:
            raise ValidationError(f"Replay job #{job.pk} is already {job.state}.")
        job.state = ReplayJob.STATE_CANCELLED
        job.finished_at = timezone.now()
        job.save(update_fields=["state", "finished_at"])
        if not _run_alive(job):
            _orphans_resolve(job)
        audit_record(actor=actor, action="replay.cancel", count=job.remaining,
                     detail=f"job #{job.pk}: {job.done} replayed, {job.failed} failed, "
                            f"{job.remaining} not sent")
    return job


def _orphans_resolve(job: ReplayJob) -> int:
    """Claimed entries of a job that will not run again: the publish may or may not
    have reached the broker. Say so on the letter (failed) rather than guess."""
    reason = (f"replay job #{job.pk} stopped while this letter's publish was unconfirmed; it may "
              "have reached the broker. Check the destination before replaying it again.")
    entries = ReplayLedgerEntry.objects.filter(job=job, status=ReplayLedgerEntry.STATUS_CLAIMED)
    letter_ids = list(entries.values_list("dead_letter_id", flat=True))
    if not letter_ids:
        return 0
    entries.update(status=ReplayLedgerEntry.STATUS_FAILED, reason=reason)
    DeadLetter.objects.filter(pk__in=letter_ids, state=DeadLetter.STATE_REPLAYING).update(
        state=DeadLetter.STATE_FAILED, state_reason=reason, state_changed_at=timezone.now())
    ReplayJob.objects.filter(pk=job.pk).update(failed=F("failed") + len(letter_ids))
    job.failed += len(letter_ids)
    return len(letter_ids)


def replay_jobs_recover(*, actor=None) -> list[int]:
    """Beat calls this every minute: re-queue jobs whose run died (worker killed,
    host lost) and resolve in-flight letters of stopped jobs. Returns the job ids
    queued again."""
    now = timezone.now()
    cutoff = now - stale_after()
    # A queued job normally waits its turn behind other jobs; only one queued for
    # much longer has probably lost its task (Redis emptied) and is queued again.
    queued_cutoff = now - max(stale_after() * 10, timedelta(minutes=10))
    requeued = []
    stalled = ReplayJob.objects.filter(
        Q(state=ReplayJob.STATE_RUNNING) & (Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
        | Q(state=ReplayJob.STATE_QUEUED) & (Q(heartbeat_at__lt=queued_cutoff)
                                            | Q(heartbeat_at__isnull=True, created_at__lt=queued_cutoff))
    ).values_list("pk", flat=True)
    for job_id in list(stalled):
        with transaction.atomic():
            job = _job_locked(job_id)
            if job.state not in (ReplayJob.STATE_RUNNING, ReplayJob.STATE_QUEUED) or _run_alive(job):
                continue
            # Stamped so the next sweep leaves it alone while the new task waits its turn.
            job.lease_id, job.heartbeat_at = "", timezone.now()
            job.save(update_fields=["lease_id", "heartbeat_at"])
            audit_record(actor=actor, action="replay.recover", count=job.remaining,
                         detail=f"job #{job.pk}: its run stopped reporting; queued again")
            _enqueue_on_commit(job.pk)
            requeued.append(job.pk)
    stopped = ReplayJob.objects.filter(
        state__in=ReplayJob.FINAL_STATES, ledger__status=ReplayLedgerEntry.STATUS_CLAIMED,
    ).distinct().values_list("pk", flat=True)
    for job_id in list(stopped):
        with transaction.atomic():
            job = _job_locked(job_id)
            if not _run_alive(job):
                _orphans_resolve(job)
    return requeued


# --- running jobs -------------------------------------------------------------------

class _StopRun(Exception):
    """The job was paused or cancelled, or another run owns it: stop quietly."""


class _JobFailed(Exception):
    """The job cannot go on (broker unreachable for too long, permanent broker error)."""


@dataclass
class _Pacer:
    """Sends at `rate` messages per second on average: message i goes no earlier than
    start + i / rate. Batches are at most a quarter second of traffic, so over a
    minute the achieved rate is within a fraction of a percent of the target."""

    rate: float | None
    start: float = 0.0
    sent: int = 0

    def wait_for(self, count: int, heartbeat) -> None:
        if self.rate is None:
            self.sent += count
            return
        now = time.monotonic()
        if not self.sent:
            self.start = now
        due = self.start + self.sent / self.rate
        while due > now:
            time.sleep(min(due - now, 5.0))
            heartbeat()
            now = time.monotonic()
        self.sent += count


def _effective_batch(job: ReplayJob) -> int:
    if job.rate_limit is None:
        return job.batch_size
    return max(1, min(job.batch_size, int(job.rate_limit / 4) or 1))


class _Backoff:
    def __init__(self) -> None:
        self.current = BACKOFF_INITIAL

    def next(self) -> float:
        wait = self.current + random.uniform(-BACKOFF_JITTER, BACKOFF_JITTER) * self.current
        self.current = min(self.current * BACKOFF_MULTIPLIER, BACKOFF_MAX)
        return max(wait, 0.05)


class _Run:
    """One execution of a job by one worker task, holding the job's lease."""

    def __init__(self, job_id: int, lease: str) -> None:
        self.job_id = job_id
        self.lease = lease
        self.adapters: dict[int, BrokerAdapter] = {}
        self.fingerprints: dict[int, tuple] = {}
        self.started = time.monotonic()
        self.processed = 0

    # lease and control
    def heartbeat(self, *, reason: str | None = None) -> str:
        """Report alive; return the job's state. Raise _StopRun if the lease is lost."""
        now = timezone.now()
        elapsed = max(time.monotonic() - self.started, 1e-6)
        fields: dict = {"heartbeat_at": now}
        if self.processed:
            fields["achieved_rate"] = self.processed / elapsed
        if reason is not None:
            fields["state_reason"] = reason[:2000]
        if not ReplayJob.objects.filter(pk=self.job_id, lease_id=self.lease).update(**fields):
            raise _StopRun("lease lost")
        return ReplayJob.objects.values_list("state", flat=True).get(pk=self.job_id)

    def check_running(self, *, reason: str | None = None) -> None:
        if self.heartbeat(reason=reason) != ReplayJob.STATE_RUNNING:
            raise _StopRun("paused or cancelled")

    # adapters
    def adapter(self, cluster_id: int) -> BrokerAdapter:
        """The cluster's adapter, rebuilt whenever the cluster's connection settings
        changed: an operator who fixes (or moves) a cluster while a job runs or waits
        out an outage sees it take effect at the next batch."""
        fingerprint = Cluster.objects.filter(pk=cluster_id).values_list(
            "kind", "service_url", "admin_url", "username", "password_encrypted", "token_encrypted",
            "options").first()
        if fingerprint is None:
            raise _JobFailed(f"cluster {cluster_id} was deleted")
        if self.fingerprints.get(cluster_id) != fingerprint:
            self.drop_adapter(cluster_id)
        if cluster_id not in self.adapters:
            self.adapters[cluster_id] = cluster_adapter(Cluster.objects.get(pk=cluster_id))
            self.fingerprints[cluster_id] = fingerprint
        return self.adapters[cluster_id]

    def drop_adapter(self, cluster_id: int) -> None:
        self.fingerprints.pop(cluster_id, None)
        adapter = self.adapters.pop(cluster_id, None)
        if adapter is not None:
            try:
                adapter.close()
            except BrokerError:
                logger.info("closing a failed adapter raised; ignored")

    def close(self) -> None:
        for cluster_id in list(self.adapters):
            self.drop_adapter(cluster_id)


def _lease_acquire(job_id: int) -> str | None:
    with transaction.atomic():
        try:
            job = _job_locked(job_id)
        except ReplayJob.DoesNotExist:
            logger.warning("replay job %s does not exist; task dropped", job_id)
            return None
        if job.state == ReplayJob.STATE_QUEUED:
            job.state = ReplayJob.STATE_RUNNING
            job.started_at = job.started_at or timezone.now()
        if job.state != ReplayJob.STATE_RUNNING or _run_alive(job):
            return None
        job.lease_id = uuid.uuid4().hex
        job.heartbeat_at = timezone.now()
        job.state_reason = ""
        job.save(update_fields=["state", "started_at", "lease_id", "heartbeat_at", "state_reason"])
        return job.lease_id


@dataclass
class _Claimed:
    """A claimed ledger entry with what publishing it needs, read in one query."""

    pk: int
    dead_letter_id: int
    cluster_id: int
    attempts: int
    message: ReplayMessage
    status: str = ""
    broker_message_id: str = ""
    reason: str = ""


def _claim_batch(job: ReplayJob, limit: int, *, orphans_first: bool = True) -> list[_Claimed]:
    """The next entries to publish, claimed for this job.

    First the job's own `claimed` entries: a run holds the lease alone, so these were
    in flight when an earlier run died; they are published again (a run looks for
    them once, when it starts: it resolves every batch it claims itself). Then
    pending ones, each letter locked and moved to `replaying` in the same
    transaction, which is what stops two jobs from sending one letter.
    """
    ledger = ReplayLedgerEntry.objects.filter(job_id=job.pk)
    with transaction.atomic():
        if orphans_first:
            orphans = list(ledger.filter(status=ReplayLedgerEntry.STATUS_CLAIMED).order_by("id")
                           .values_list("pk", flat=True)[:limit])
            if orphans:
                ledger.filter(pk__in=orphans).update(attempts=F("attempts") + 1)
                return _with_letters(orphans, job.destination)
        entries = list(ledger.filter(status=ReplayLedgerEntry.STATUS_PENDING).order_by("id").values_list(
            "pk", "dead_letter_id", "attempts", "payload_override", "properties_override")[:limit])
        if not entries:
            return []
        # Locked in id order (no deadlock between two jobs), read whole in the same query.
        letters = {
            row[0]: row
            for row in DeadLetter.objects.select_for_update().filter(
                pk__in=[entry[1] for entry in entries]).order_by("pk").values_list(
                "pk", "state", "state_reason", "cluster_id", "subscription", "source", "payload",
                "properties", "origin_message_id", "broker_message_id")
        }
        state_names = dict(DeadLetter.STATE_CHOICES)
        claim: list[_Claimed] = []
        skip: dict[int, str] = {}
        for entry_id, letter_id, attempts, payload_override, properties_override in entries:
            letter = letters.get(letter_id)
            state, state_reason = (letter[1], letter[2]) if letter else (None, "")
            if state in ELIGIBLE_STATES:
                claim.append(_claimed(entry_id, letter_id, attempts + 1, payload_override,
                                      properties_override, *letter[3:], destination=job.destination))
            elif state is None:
                skip[entry_id] = "the dead letter was purged from the archive"
            elif state == DeadLetter.STATE_REPLAYING:
                skip[entry_id] = f"another replay is sending it ({state_reason})"
            elif state == DeadLetter.STATE_REPLAYED:
                skip[entry_id] = f"already replayed ({state_reason or 'earlier'})"
            else:
                skip[entry_id] = f"the dead letter is {state_names.get(state, state)}"
        now = timezone.now()
        if claim:
            DeadLetter.objects.filter(pk__in=[c.dead_letter_id for c in claim]).update(
                state=DeadLetter.STATE_REPLAYING, state_changed_at=now,
                state_reason=f"replay job #{job.pk}")
            ledger.filter(pk__in=[c.pk for c in claim]).update(
                status=ReplayLedgerEntry.STATUS_CLAIMED, attempts=F("attempts") + 1)
        for entry_id, reason in skip.items():
            ledger.filter(pk=entry_id).update(status=ReplayLedgerEntry.STATUS_SKIPPED, reason=reason)
        if skip:
            ReplayJob.objects.filter(pk=job.pk).update(skipped=F("skipped") + len(skip))
        if not claim and skip:
            return _claim_batch(job, limit, orphans_first=False)
        return claim


def _claimed(entry_id, letter_id, attempts, payload_override, properties_override, cluster_id, subscription,
             source, payload, properties, origin_id, broker_id, *, destination: str) -> _Claimed:
    """What publishing an entry needs: the edited copy if an operator made one."""
    payload = payload_override if payload_override is not None else payload
    properties = properties_override if properties_override is not None else properties
    message = ReplayMessage(
        key=str(entry_id), subscription=subscription, source=source, payload=bytes(payload),
        properties={str(k): str(v) for k, v in (properties or {}).items()},
        origin_message_id=origin_id or broker_id, destination=destination or None)
    return _Claimed(pk=entry_id, dead_letter_id=letter_id, cluster_id=cluster_id, attempts=attempts,
                    message=message)


def _with_letters(entry_ids: list[int], destination: str) -> list[_Claimed]:
    rows = (ReplayLedgerEntry.objects.filter(pk__in=entry_ids).order_by("id").values_list(
        "pk", "dead_letter_id", "attempts", "payload_override", "properties_override",
        "dead_letter__cluster_id", "dead_letter__subscription", "dead_letter__source", "dead_letter__payload",
        "dead_letter__properties", "dead_letter__origin_message_id", "dead_letter__broker_message_id"))
    return [_claimed(*row, destination=destination) for row in rows]


def _publish(run: _Run, job: ReplayJob, entries: list[_Claimed]) -> dict[int, ReplayOutcome]:
    """Publish a claimed batch; retry what failed for a transient reason with back-off
    and jitter. Returns a final outcome per entry id (confirmed or failed)."""
    results: dict[int, ReplayOutcome] = {}
    attempts = {e.pk: e.attempts for e in entries}
    waiting: dict[int, list[_Claimed]] = {}
    for entry in entries:
        waiting.setdefault(entry.cluster_id, []).append(entry)
    for cluster_id, batch in waiting.items():
        backoff = _Backoff()
        unreachable_since: float | None = None
        todo = {e.pk: e for e in batch}
        while todo:
            messages = [e.message for e in todo.values()]
            try:
                outcomes = run.adapter(cluster_id).republish(messages)
            except BrokerError as exc:
                run.drop_adapter(cluster_id)
                if exc.permanent:
                    raise _JobFailed(f"the broker refused the replay: {exc.message}") from exc
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > unreachable_give_up_seconds():
                    raise _JobFailed(f"the broker stayed unreachable: {exc.message}") from exc
                wait = backoff.next()
                logger.warning("replay job %s: broker unreachable (%s); retrying in %.1fs",
                               job.pk, exc.message, wait)
                _sleep(run, wait, reason=f"broker unreachable, retrying: {exc.message}")
                continue
            unreachable_since = None
            retry_later = False
            # An adapter owes one outcome per message; one it left out counts as not
            # confirmed (and may be tried again), never as sent.
            answered = {o.key for o in outcomes}
            outcomes = list(outcomes) + [
                ReplayOutcome(key=str(entry_id), confirmed=False, error="the broker gave no answer for it")
                for entry_id in todo if str(entry_id) not in answered]
            for outcome in outcomes:
                try:
                    entry_id = int(outcome.key)
                except ValueError:
                    continue
                if entry_id not in todo:
                    continue
                if outcome.confirmed:
                    results[entry_id] = outcome
                    del todo[entry_id]
                elif outcome.permanent or attempts[entry_id] >= MAX_ATTEMPTS:
                    error = outcome.error or "the broker did not confirm the copy"
                    if not outcome.permanent:
                        error = f"still failing after {attempts[entry_id]} attempts: {error}"
                    results[entry_id] = ReplayOutcome(key=outcome.key, confirmed=False, error=error,
                                                      permanent=True)
                    del todo[entry_id]
                else:
                    attempts[entry_id] += 1
                    retry_later = True
            if retry_later and todo:
                ReplayLedgerEntry.objects.filter(pk__in=list(todo)).update(attempts=F("attempts") + 1)
                _sleep(run, backoff.next(), reason="retrying messages the broker did not confirm")
    return results


def _sleep(run: _Run, seconds: float, *, reason: str) -> None:
    """Wait, reporting alive; a pause or cancel during the wait stops the run (the
    batch stays claimed and is sent again on resume)."""
    end = time.monotonic() + seconds
    run.check_running(reason=reason)
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 2.0))
        run.check_running(reason=reason)


def _record(job: ReplayJob, entries: list[_Claimed], results: dict[int, ReplayOutcome]) -> None:
    """Write what the broker said, all in one transaction."""
    now = timezone.now()
    by_id = {e.pk: e for e in entries}
    confirmed, failed = [], []
    for entry_id, outcome in results.items():
        entry = by_id[entry_id]
        if outcome.confirmed:
            entry.status = ReplayLedgerEntry.STATUS_CONFIRMED
            entry.broker_message_id = outcome.broker_message_id[:500]
            entry.reason = ""
            confirmed.append(entry)
        else:
            entry.status = ReplayLedgerEntry.STATUS_FAILED
            entry.reason = outcome.error[:5000]
            failed.append(entry)
    with transaction.atomic():
        _ledger_write_outcomes(confirmed + failed)
        if confirmed:
            DeadLetter.objects.filter(pk__in=[e.dead_letter_id for e in confirmed]).update(
                state=DeadLetter.STATE_REPLAYED, state_changed_at=now,
                state_reason=f"replayed by job #{job.pk}")
        for entry in failed:
            DeadLetter.objects.filter(pk=entry.dead_letter_id).update(
                state=DeadLetter.STATE_FAILED, state_changed_at=now,
                state_reason=f"replay job #{job.pk}: {entry.reason}"[:5000])
        ReplayJob.objects.filter(pk=job.pk).update(done=F("done") + len(confirmed),
                                                   failed=F("failed") + len(failed))


def _ledger_write_outcomes(entries: list[_Claimed]) -> None:
    """One UPDATE for a whole batch of outcomes. Django's bulk_update builds a CASE
    per row and field, which cost more than the broker round trip at 500 rows; on
    PostgreSQL the rows go in as arrays instead."""
    if not entries:
        return
    if connection.vendor != "postgresql":
        for entry in entries:
            ReplayLedgerEntry.objects.filter(pk=entry.pk).update(
                status=entry.status, broker_message_id=entry.broker_message_id, reason=entry.reason)
        return
    table = ReplayLedgerEntry._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            # The table name comes from the model, every value is a parameter.
            f"UPDATE {table} AS entry SET status = v.status, broker_message_id = v.broker_id, "  # noqa: S608
            "reason = v.reason, updated_at = now() "
            "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[]) "
            "AS v(id, status, broker_id, reason) WHERE entry.id = v.id",
            [[e.pk for e in entries], [e.status for e in entries],
             [e.broker_message_id for e in entries], [e.reason for e in entries]])


def _finish(run: _Run, job: ReplayJob) -> None:
    with transaction.atomic():
        job = _job_locked(job.pk)
        if job.lease_id != run.lease or job.state != ReplayJob.STATE_RUNNING:
            return
        job.state = ReplayJob.STATE_DONE
        job.finished_at = timezone.now()
        job.state_reason = ""
        job.save(update_fields=["state", "finished_at", "state_reason"])
        audit_record(actor=None, action="replay.finish", count=job.done,
                     detail=f"job #{job.pk}: {job.done} replayed, {job.failed} failed, "
                            f"{job.skipped} skipped")


def _fail(run: _Run, job_id: int, reason: str) -> None:
    with transaction.atomic():
        job = _job_locked(job_id)
        if job.lease_id != run.lease or job.state != ReplayJob.STATE_RUNNING:
            return
        job.state = ReplayJob.STATE_FAILED
        job.state_reason = reason[:2000]
        job.save(update_fields=["state", "state_reason"])
        audit_record(actor=None, action="replay.finish", result="error", count=job.done,
                     detail=f"job #{job.pk} failed (resumable): {reason}")


def replay_job_run(*, job_id: int, budget_seconds: float | None = None) -> str:
    """Work on a job for up to `budget_seconds` (default: the slice length) as its
    only run; queue a continuation if work remains. Returns what happened, for logs:
    "done", "paused", "continued", "failed" or "not mine"."""
    lease = _lease_acquire(job_id)
    if lease is None:
        return "not mine"
    run = _Run(job_id, lease)
    deadline = time.monotonic() + (slice_seconds() if budget_seconds is None else budget_seconds)
    outcome = "continued"
    try:
        job = ReplayJob.objects.get(pk=job_id)
        pacer = _Pacer(job.rate_limit)
        size = _effective_batch(job)
        first = True
        while True:
            run.check_running()
            if time.monotonic() > deadline:
                break
            entries = _claim_batch(job, size, orphans_first=first)
            first = False
            if not entries:
                _finish(run, job)
                outcome = "done"
                break
            pacer.wait_for(len(entries), run.heartbeat)
            results = _publish(run, job, entries)
            _record(job, entries, results)
            run.processed += len(entries)
    except _StopRun:
        outcome = "paused"
    except _JobFailed as exc:
        _fail(run, job_id, str(exc))
        outcome = "failed"
    finally:
        run.close()
        ReplayJob.objects.filter(pk=job_id, lease_id=lease).update(lease_id="")
    if outcome == "continued":
        # The lease is released first: the continuation can take it at once. A crash
        # right here leaves a running job without a run, which recovery re-queues.
        _enqueue_on_commit(job_id)
    return outcome


def replay_job_enqueue(*, job_id: int) -> None:
    """Queue a run (after the current transaction, if any, commits)."""
    _enqueue_on_commit(job_id)


# --- replay policies ------------------------------------------------------------------

POLICY_TASK = "console.replay.tasks.replay_policy_run"


def cron_clean(expression: str) -> tuple[str, str, str, str, str]:
    """'minute hour day-of-month month day-of-week', checked by Celery's own parser."""
    from celery.schedules import crontab

    parts = (expression or "").split()
    if len(parts) != 5:
        raise ValidationError({"cron": "Write the schedule as five fields: minute hour day-of-month "
                                       "month day-of-week (e.g. '0 2 * * *')."})
    minute, hour, day_of_month, month_of_year, day_of_week = parts
    try:
        crontab(minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year,
                day_of_week=day_of_week)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValidationError({"cron": f"Not a valid cron expression: {exc}"}) from exc
    return minute, hour, day_of_month, month_of_year, day_of_week


POLICY_FIELDS = ("name", "cluster", "subscription", "filters", "rate_limit", "max_per_run", "cron", "enabled")


def replay_policy_save(*, actor, policy: ReplayPolicy | None = None, **fields) -> ReplayPolicy:
    """Create or update a policy and its beat entry together; audited."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    creating = policy is None
    policy = policy or ReplayPolicy()
    before = {k: getattr(policy, k, None) for k in POLICY_FIELDS} if not creating else {}
    for key, value in fields.items():
        if key in POLICY_FIELDS:
            setattr(policy, key, value)
    rate = rate_limit_clean(policy.rate_limit)
    if rate is None:
        raise ValidationError({"rate_limit": "A schedule needs a rate limit."})
    policy.rate_limit = rate
    if not policy.max_per_run or policy.max_per_run > 1_000_000:
        raise ValidationError({"max_per_run": "Max per run must be between 1 and 1,000,000."})
    minute, hour, day_of_month, month_of_year, day_of_week = cron_clean(policy.cron)
    policy.cron = " ".join((minute, hour, day_of_month, month_of_year, day_of_week))
    stored = {k: v for k, v in (policy.filters or {}).items() if k in ("text", "property") and v}
    replay_filters_parse(stored)
    policy.filters = stored
    with transaction.atomic():
        policy.full_clean(exclude=["periodic_task"])
        policy.save()
        schedule, _ = CrontabSchedule.objects.get_or_create(
            minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year,
            day_of_week=day_of_week, timezone=settings.TIME_ZONE)
        task = policy.periodic_task or PeriodicTask(name=f"replay-policy-{policy.pk}", task=POLICY_TASK)
        task.crontab = schedule
        task.interval = None
        task.args = json.dumps([policy.pk])
        task.enabled = policy.enabled
        task.description = f"Replay policy {policy.name}"
        task.save()
        if policy.periodic_task_id != task.pk:
            policy.periodic_task = task
            policy.save(update_fields=["periodic_task"])
        changes = [f"{k}={getattr(policy, k)!s}" for k in POLICY_FIELDS
                   if creating or before.get(k) != getattr(policy, k)]
        audit_record(actor=actor, action="schedule.create" if creating else "schedule.update",
                     cluster=policy.cluster, subscription=policy.subscription,
                     detail=f"policy {policy.name}: " + "; ".join(changes))
    return policy


def replay_policy_delete(*, policy: ReplayPolicy, actor) -> None:
    with transaction.atomic():
        audit_record(actor=actor, action="schedule.delete", cluster=policy.cluster,
                     subscription=policy.subscription, detail=f"policy {policy.name}")
        if policy.periodic_task_id:
            policy.periodic_task.delete()
        policy.delete()


def replay_policy_run(*, policy_id: int) -> ReplayJob | None:
    """One scheduled run: an ordinary job over the policy's parked letters, oldest
    first, at most `max_per_run`."""
    try:
        policy = ReplayPolicy.objects.select_related("cluster").get(pk=policy_id)
    except ReplayPolicy.DoesNotExist:
        logger.warning("replay policy %s does not exist; beat entry is stale", policy_id)
        return None
    if not policy.enabled:
        return None
    filters = replay_filters_parse(policy.filters or {})
    filters.update(cluster=policy.cluster_id, subscription=policy.subscription,
                   state=DeadLetter.STATE_PARKED)
    try:
        return replay_job_create(actor=None, filters=filters, rate_limit=policy.rate_limit,
                                 batch_size=DEFAULT_BATCH, policy=policy, limit=policy.max_per_run,
                                 description=f"scheduled by policy {policy.name}")
    except ValidationError as exc:
        # Everything is already being replayed by an earlier run: nothing to do now.
        logger.info("policy %s: %s", policy.name, "; ".join(exc.messages))
        return None


# --- auto-collect ---------------------------------------------------------------------

COLLECT_TASK = "console.replay.tasks.archive_collect_cluster"


def auto_collect_sync(*, cluster: Cluster) -> None:
    """Keep the cluster's beat entry in step with its collect interval (0: off)."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    name = f"archive-collect-cluster-{cluster.pk}"
    interval = cluster.collect_interval_seconds or 0
    with transaction.atomic():
        if interval <= 0:
            PeriodicTask.objects.filter(name=name).delete()
            return
        schedule, _ = IntervalSchedule.objects.get_or_create(every=interval, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.update_or_create(
            name=name,
            defaults={"task": COLLECT_TASK, "interval": schedule, "crontab": None,
                      "args": json.dumps([cluster.pk]), "enabled": True,
                      "description": f"Collect the DLQs of {cluster.name} into the archive"})


def auto_collect_forget(*, cluster_id: int) -> None:
    from django_celery_beat.models import PeriodicTask

    PeriodicTask.objects.filter(name=f"archive-collect-cluster-{cluster_id}").delete()


def archive_collect_cluster(*, cluster_id: int) -> int:
    """Collect every DLQ of the cluster that holds messages (or whose depth the broker
    cannot tell). One subscription failing does not stop the others."""
    from console.archive.services import dead_letters_collect

    try:
        cluster = Cluster.objects.get(pk=cluster_id)
    except Cluster.DoesNotExist:
        auto_collect_forget(cluster_id=cluster_id)
        return 0
    try:
        with cluster_adapter(cluster) as adapter:
            subscriptions = adapter.list_subscriptions()
    except BrokerError as exc:
        logger.warning("auto-collect of %s: cannot list subscriptions: %s", cluster.name, exc.message)
        return 0
    moved = 0
    for info in subscriptions:
        if info.dead_letter_depth == 0:
            continue
        try:
            moved += dead_letters_collect(cluster=cluster, subscription=info.name, actor=None)
        except BrokerError as exc:
            logger.warning("auto-collect of %s/%s failed: %s", cluster.name, info.name, exc.message)
    return moved


# --- retention ------------------------------------------------------------------------

def retention_setting() -> RetentionSetting:
    setting, _ = RetentionSetting.objects.get_or_create(pk=1)
    return setting


def retention_update(*, actor, days) -> RetentionSetting:
    try:
        value = int(days)
    except (TypeError, ValueError) as exc:
        raise ValidationError({"discarded_retention_days": "Give a whole number of days."}) from exc
    if not 1 <= value <= 3650:
        raise ValidationError({"discarded_retention_days": "Keep discarded letters between 1 and 3650 days."})
    with transaction.atomic():
        setting = retention_setting()
        before = setting.discarded_retention_days
        setting.discarded_retention_days = value
        setting.save()
        audit_record(actor=actor, action="retention.update",
                     detail=f"discarded letters kept {before} -> {value} days")
    return setting


def retention_purge(*, actor=None) -> int:
    """Delete discarded letters older than the retention period; audited per cluster.
    Letters still listed in an active job's ledger are kept until it ends."""
    days = retention_setting().discarded_retention_days
    cutoff = timezone.now() - timedelta(days=days)
    held = ReplayLedgerEntry.objects.filter(job__state__in=HOLDING_STATES).values("dead_letter_id")
    old = DeadLetter.objects.filter(state=DeadLetter.STATE_DISCARDED).filter(
        Q(state_changed_at__lt=cutoff) | Q(state_changed_at__isnull=True, collected_at__lt=cutoff)
    ).exclude(pk__in=held)
    total = 0
    with transaction.atomic():
        cluster_ids = set(old.values_list("cluster_id", flat=True).distinct().order_by())
        clusters = Cluster.objects.in_bulk(list(cluster_ids))
        for cluster_id in sorted(cluster_ids):
            deleted = old.filter(cluster_id=cluster_id).delete()[1].get("archive.DeadLetter", 0)
            total += deleted
            audit_record(actor=actor, action="archive.purge", cluster=clusters[cluster_id], count=deleted,
                         detail=f"discarded letters older than {days} days")
        if not cluster_ids:
            audit_record(actor=actor, action="archive.purge", count=0,
                         detail=f"discarded letters older than {days} days: none")
    return total


def payload_text_or_none(payload: bytes) -> str | None:
    """The payload as text if it is UTF-8 (then it can be edited in a form)."""
    try:
        return bytes(payload).decode("utf-8")
    except UnicodeDecodeError:
        return None

