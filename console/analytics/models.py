"""Analytics state: export watermarks, pipeline runs and the summary tables they load."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ExportLease(models.Model):
    """One row: who is exporting now. Two exports at once would race on the same
    partition files, so an export holds this lease and renews it as it goes; a
    crashed exporter's lease runs out and the next export takes over."""

    holder = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"export lease ({self.holder or 'free'})"


class ExportBatch(models.Model):
    """One incremental export: the watermark table.

    The batch lists the partitions it rewrites. Its files are first written under a
    staging folder (WRITING), then published into the dataset (WRITTEN -> PUBLISHED).
    `watermark` is the time the batch started reading the archive: the next export
    looks for changes from there (minus a safety overlap).
    """

    WRITING, WRITTEN, PUBLISHED = "writing", "written", "published"
    STATUS_CHOICES = [(WRITING, "writing"), (WRITTEN, "written"), (PUBLISHED, "published")]

    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default=WRITING)
    watermark = models.DateTimeField()
    # [[cluster_id, "YYYY-MM-DD"], ...]
    partitions = models.JSONField(default=list)
    rows = models.BigIntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"export batch {self.pk} ({self.status})"


class ExportedPartition(models.Model):
    """What the dataset holds per (cluster, day): the file and how many rows.

    The row count lets an export notice letters deleted from the archive (retention
    purges), which no timestamp would show.
    """

    cluster_id = models.BigIntegerField()
    day = models.DateField()
    rows = models.BigIntegerField(default=0)
    batch = models.ForeignKey(ExportBatch, on_delete=models.PROTECT, related_name="+")
    file = models.CharField(max_length=1000, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster_id", "day"], name="one_export_per_partition")]

    def __str__(self) -> str:
        return f"cluster={self.cluster_id} date={self.day}: {self.rows} rows"


class PipelineRun(models.Model):
    """One run of export + Spark jobs + load, nightly or on demand."""

    QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
    STATUS_CHOICES = [(QUEUED, "queued"), (RUNNING, "running"), (SUCCEEDED, "succeeded"), (FAILED, "failed")]
    ACTIVE = (QUEUED, RUNNING)
    NIGHTLY, ON_DEMAND, COMMAND = "nightly", "on_demand", "command"
    TRIGGER_CHOICES = [(NIGHTLY, "nightly"), (ON_DEMAND, "on demand"), (COMMAND, "command line")]

    trigger = models.CharField(max_length=16, choices=TRIGGER_CHOICES)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_name = models.CharField(max_length=150, default="system")
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default=QUEUED)
    master = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exported_rows = models.BigIntegerField(default=0)
    input_rows = models.BigIntegerField(default=0)
    # {job: {"rows": n, "seconds": s}} as the runner reported it.
    jobs = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("run_pipeline", "Can run the analytics pipeline on demand")]

    def __str__(self) -> str:
        return f"pipeline run {self.pk} ({self.status})"

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class _Summary(models.Model):
    run = models.ForeignKey(PipelineRun, on_delete=models.CASCADE, related_name="+")

    class Meta:
        abstract = True


class FailureOverview(_Summary):
    cluster_id = models.BigIntegerField()
    cluster_name = models.CharField(max_length=200)
    subscription = models.CharField(max_length=500)
    source = models.CharField(max_length=500)
    day = models.DateField()
    dead_letters = models.BigIntegerField()
    replayed = models.BigIntegerField()
    discarded = models.BigIntegerField()
    parked = models.BigIntegerField()
    replay_failed = models.BigIntegerField()
    replaying = models.BigIntegerField()
    replay_success_rate = models.FloatField(null=True)

    class Meta:
        ordering = ["day", "cluster_name", "subscription", "source"]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.subscription} {self.day}: {self.dead_letters}"


class RetryHistogram(_Summary):
    cluster_id = models.BigIntegerField()
    cluster_name = models.CharField(max_length=200)
    subscription = models.CharField(max_length=500)
    retry_count = models.IntegerField()
    letters = models.BigIntegerField()

    class Meta:
        ordering = ["cluster_name", "subscription", "retry_count"]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.subscription} retries={self.retry_count}: {self.letters}"


class TimeToDlq(_Summary):
    cluster_id = models.BigIntegerField()
    cluster_name = models.CharField(max_length=200)
    subscription = models.CharField(max_length=500)
    letters = models.BigIntegerField()
    min_seconds = models.BigIntegerField()
    p50 = models.BigIntegerField()
    p90 = models.BigIntegerField()
    p99 = models.BigIntegerField()
    max_seconds = models.BigIntegerField()

    class Meta:
        ordering = ["cluster_name", "subscription"]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.subscription} p50={self.p50}s"


class FailureReason(_Summary):
    error_class = models.CharField(max_length=500)
    error_pattern = models.TextField()
    letters = models.BigIntegerField()
    subscriptions = models.IntegerField()
    first_seen = models.DateTimeField(null=True)
    last_seen = models.DateTimeField(null=True)
    example_letter_id = models.BigIntegerField()
    example_text = models.TextField()
    example_subscription = models.CharField(max_length=500)

    class Meta:
        ordering = ["-letters", "error_class", "error_pattern"]

    def __str__(self) -> str:
        return f"{self.error_class}: {self.error_pattern[:60]} ({self.letters})"


class DuplicateGroup(_Summary):
    kind = models.CharField(max_length=32)
    key_property = models.CharField(max_length=200)
    cluster_id = models.BigIntegerField()
    cluster_name = models.CharField(max_length=200)
    subscription = models.CharField(max_length=500)
    key = models.TextField()
    copies = models.BigIntegerField()
    letter_ids = models.JSONField(default=list)
    first_seen = models.DateTimeField(null=True)
    last_seen = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-copies", "cluster_name", "subscription", "key"]

    def __str__(self) -> str:
        return f"{self.kind} {self.key[:60]} x{self.copies}"


class ReplayCandidates(_Summary):
    """The ids a replay policy selected, as one list the replay engine takes as a job."""

    policy = models.JSONField(default=dict)
    letter_ids = models.JSONField(default=list)
    count = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.count} replay candidates (run {self.run_id})"
