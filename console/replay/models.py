"""Replay jobs, their ledger, replay policies (schedules) and the retention setting."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from console.archive.models import DeadLetter
from console.clusters.models import Cluster


class ReplayJob(models.Model):
    """One replay of a set of archived dead letters, run by the Celery worker.

    The selection is fixed when the job is created: one ledger entry per selected
    letter. Counters are kept on the row so progress polling reads one row.
    `lease_id`/`heartbeat_at` say which worker run currently owns the job, so two
    runs never work on the same job at once (see services.replay_job_run).
    """

    STATE_QUEUED, STATE_RUNNING, STATE_PAUSED = "queued", "running", "paused"
    STATE_CANCELLED, STATE_DONE, STATE_FAILED = "cancelled", "done", "failed"
    STATE_CHOICES = [
        (STATE_QUEUED, "queued"),
        (STATE_RUNNING, "running"),
        (STATE_PAUSED, "paused"),
        (STATE_CANCELLED, "cancelled"),
        (STATE_DONE, "done"),
        (STATE_FAILED, "failed"),
    ]
    ACTIVE_STATES = (STATE_QUEUED, STATE_RUNNING, STATE_PAUSED)
    FINAL_STATES = (STATE_CANCELLED, STATE_DONE)

    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created_by_name = models.CharField(max_length=150, default="system")
    policy = models.ForeignKey("ReplayPolicy", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="jobs")
    description = models.CharField(max_length=500, blank=True)
    # The archive filter the selection came from ({} for an explicit selection).
    filters = models.JSONField(default=dict, blank=True)
    # Messages per second; None only when the operator asked for no limit.
    rate_limit = models.FloatField(null=True, blank=True)
    batch_size = models.PositiveIntegerField(default=100)
    destination = models.CharField(max_length=500, blank=True)
    dry_run = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=STATE_QUEUED)
    state_reason = models.TextField(blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    # Messages per second achieved by the current (or last) run.
    achieved_rate = models.FloatField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_id = models.CharField(max_length=64, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("control_replayjob", "Can pause, resume and cancel replay jobs")]

    def __str__(self) -> str:
        return f"replay job {self.pk} ({self.state})"

    @property
    def remaining(self) -> int:
        return max(self.total - self.done - self.failed - self.skipped, 0)

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE_STATES

    @property
    def percent(self) -> int:
        if not self.total:
            return 100 if self.state == self.STATE_DONE else 0
        return int(100 * (self.total - self.remaining) / self.total)

    @property
    def eta_seconds(self) -> int | None:
        if self.state != self.STATE_RUNNING or self.achieved_rate <= 0:
            return None
        return int(self.remaining / self.achieved_rate)


class ReplayLedgerEntry(models.Model):
    """What happened to one dead letter in one job: the idempotency ledger.

    pending: selected, not sent yet. claimed: the letter is marked `replaying` for
    this job and a publish may be in flight. confirmed: the broker confirmed the copy
    (never sent again by this job). failed: a permanent error or retries used up.
    skipped: the letter was no longer this job's to send (replayed or discarded
    meanwhile, or another job held it); `reason` says which.
    A letter has at most one `claimed` entry over all jobs (a database constraint),
    so two jobs can never publish it at the same time.
    """

    STATUS_PENDING, STATUS_CLAIMED, STATUS_CONFIRMED = "pending", "claimed", "confirmed"
    STATUS_FAILED, STATUS_SKIPPED = "failed", "skipped"
    STATUS_CHOICES = [(s, s) for s in (STATUS_PENDING, STATUS_CLAIMED, STATUS_CONFIRMED,
                                      STATUS_FAILED, STATUS_SKIPPED)]

    job = models.ForeignKey(ReplayJob, on_delete=models.CASCADE, related_name="ledger")
    dead_letter = models.ForeignKey(DeadLetter, on_delete=models.CASCADE,
                                    related_name="replay_ledger")
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default=STATUS_PENDING)
    attempts = models.PositiveIntegerField(default=0)
    broker_message_id = models.CharField(max_length=500, blank=True)
    reason = models.TextField(blank=True)
    # An operator's edited copy (resend after editing); the archived letter is unchanged.
    payload_override = models.BinaryField(null=True, blank=True)
    properties_override = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["dead_letter", "job"], name="replay_ledger_once_per_job"),
            models.UniqueConstraint(fields=["dead_letter"], condition=Q(status="claimed"),
                                    name="replay_ledger_one_claim_per_letter"),
        ]
        indexes = [models.Index(fields=["job", "status", "id"], name="replay_ledger_job_status")]

    def __str__(self) -> str:
        return f"letter {self.dead_letter_id} in job {self.job_id}: {self.status}"


class ReplayPolicy(models.Model):
    """A scheduled replay: Celery beat runs it on its cron expression; each run is an
    ordinary job. The beat entry (a django-celery-beat PeriodicTask) is kept in step
    by services.replay_policy_save."""

    name = models.CharField(max_length=100, unique=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="replay_policies")
    subscription = models.CharField(max_length=500)
    # Extra archive filters (text, property); the state is always parked.
    filters = models.JSONField(default=dict, blank=True)
    rate_limit = models.FloatField(default=100)
    max_per_run = models.PositiveIntegerField(default=1000)
    cron = models.CharField(max_length=100, default="0 2 * * *")
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField("django_celery_beat.PeriodicTask", null=True, blank=True,
                                         on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "replay policies"

    def __str__(self) -> str:
        return self.name


class RetentionSetting(models.Model):
    """How long discarded letters are kept before the daily purge deletes them.
    One row (pk=1), edited by admins."""

    discarded_retention_days = models.PositiveIntegerField(default=30)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"keep discarded letters {self.discarded_retention_days} days"
