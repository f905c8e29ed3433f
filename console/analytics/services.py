"""Writes of the analytics app: export the archive to Parquet, run the pipeline, load results.

Nothing here moves a dead letter: the export only reads the archive, and a crash at
any point leaves the archive as it was. What a crash can leave behind is a half-done
export batch; the next export finishes it first (see `analytics_export`).
"""

from __future__ import annotations

import json
import logging
import posixpath
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from django.db import transaction
from django.db.models import Count, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from console.analytics import conf, storage
from console.analytics.models import (
    DuplicateGroup,
    ExportBatch,
    ExportedPartition,
    ExportLease,
    FailureOverview,
    FailureReason,
    PipelineRun,
    ReplayCandidates,
    RetryHistogram,
    TimeToDlq,
)
from console.archive.models import DeadLetter
from console.audit.services import audit_record
from console.clusters.models import Cluster
from pipeline.schema import DATASET, EXPORT_SCHEMA, PARTITION_CLUSTER, PARTITION_DATE

logger = logging.getLogger(__name__)

# Rows whose change committed a little after the previous export read the archive
# (a long transaction) still carry a timestamp before its watermark: looking back
# this far catches them. Rewriting a partition twice is harmless; missing one is not.
WATERMARK_OVERLAP = timedelta(minutes=10)
LEASE_TIME = timedelta(minutes=10)
CHUNK_ROWS = 10_000
STAGING = "_staging"
RESULTS = "results"


class ExportBusy(Exception):
    """Another export holds the lease."""


class PipelineBusy(Exception):
    """A pipeline run is already queued or running."""


@dataclass(frozen=True)
class ExportResult:
    batches: int
    partitions: int
    rows: int


# --- Export ---------------------------------------------------------------------


def _lease_take(holder: str) -> None:
    now = timezone.now()
    ExportLease.objects.get_or_create(pk=1)
    taken = ExportLease.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(holder=holder), pk=1
    ).update(holder=holder, lease_until=now + LEASE_TIME)
    if not taken:
        raise ExportBusy("Another export is running; try again when it has finished.")


def _lease_renew(holder: str) -> None:
    if not ExportLease.objects.filter(pk=1, holder=holder).update(lease_until=timezone.now() + LEASE_TIME):
        raise ExportBusy("The export lease was taken over; this export stops.")


def _lease_release(holder: str) -> None:
    ExportLease.objects.filter(pk=1, holder=holder).update(holder="", lease_until=None)


def _partition_dir(*parts: str, cluster_id: int, day: str) -> str:
    return storage.join(*parts, f"{PARTITION_DATE}={day}", f"{PARTITION_CLUSTER}={cluster_id}")


def _file_name(batch: ExportBatch) -> str:
    # Deterministic per batch: writing a batch again replaces its files, never adds.
    return f"part-b{batch.pk:08d}.parquet"


def _archive_partition_counts() -> dict[tuple[int, str], int]:
    rows = (
        DeadLetter.objects.annotate(day=TruncDate("collected_at", tzinfo=UTC))
        .values("cluster_id", "day")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {(row["cluster_id"], row["day"].isoformat()): row["n"] for row in rows}


def _partitions_to_write(since: datetime | None) -> list[tuple[int, str]]:
    """Partitions whose rows differ from what the dataset holds.

    Changed since the watermark (new or state-changed letters), or a row count that
    differs from the exported one (letters purged from the archive, or never exported).
    """
    counts = _archive_partition_counts()
    exported = {(p.cluster_id, p.day.isoformat()): p.rows for p in ExportedPartition.objects.all()}
    wanted = {key for key, n in counts.items() if exported.get(key) != n}
    wanted |= {key for key in exported if key not in counts}
    if since is not None:
        changed = (
            DeadLetter.objects.filter(Q(collected_at__gte=since) | Q(state_changed_at__gte=since))
            .annotate(day=TruncDate("collected_at", tzinfo=UTC))
            .values_list("cluster_id", "day")
            .distinct()
            .order_by()
        )
        wanted |= {(cluster_id, day.isoformat()) for cluster_id, day in changed}
    return sorted(wanted, key=lambda key: (key[1], key[0]))


_ROW_FIELDS = (
    "id",
    "cluster_id",
    "subscription",
    "source",
    "payload_preview",
    "payload_size",
    "properties",
    "retry_count",
    "origin_message_id",
    "broker_message_id",
    "first_failure_at",
    "last_failure_at",
    "collected_at",
    "state",
    "state_changed_at",
    "state_reason",
)


def _property_items(properties) -> list[tuple[str, str]]:
    if not isinstance(properties, dict):
        return []
    return [
        (str(key), value if isinstance(value, str) else json.dumps(value))
        for key, value in properties.items()
    ]


def _chunk_table(rows: list[tuple], cluster_names: dict[int, str]) -> pa.Table:
    columns = {name: [row[i] for row in rows] for i, name in enumerate(_ROW_FIELDS)}
    columns["properties"] = [_property_items(value) for value in columns["properties"]]
    columns["cluster_name"] = [cluster_names.get(cid, "") for cid in columns["cluster_id"]]
    return pa.Table.from_pydict({name: columns[name] for name in EXPORT_SCHEMA.names}, schema=EXPORT_SCHEMA)


def _stage_partition(
    filesystem, path: str, *, cluster_id: int, day: str, cluster_names: dict[int, str]
) -> int:
    """Write every archived row of one partition to `path`; return the row count (0: no file)."""
    start = datetime.combine(date.fromisoformat(day), time.min, tzinfo=UTC)
    rows = (
        DeadLetter.objects.filter(
            cluster_id=cluster_id, collected_at__gte=start, collected_at__lt=start + timedelta(days=1)
        )
        .order_by("id")
        .values_list(*_ROW_FIELDS)
        .iterator(chunk_size=CHUNK_ROWS)
    )
    written = 0
    writer = None
    chunk: list[tuple] = []
    try:
        for row in rows:
            chunk.append(row)
            if len(chunk) == CHUNK_ROWS:
                writer = writer or _open_writer(filesystem, path)
                writer.write_table(_chunk_table(chunk, cluster_names))
                written += len(chunk)
                chunk = []
        if chunk:
            writer = writer or _open_writer(filesystem, path)
            writer.write_table(_chunk_table(chunk, cluster_names))
            written += len(chunk)
    finally:
        if writer is not None:
            writer.close()
    return written


def _open_writer(filesystem, path: str) -> pq.ParquetWriter:
    filesystem.create_dir(posixpath.dirname(path), recursive=True)
    return pq.ParquetWriter(path, EXPORT_SCHEMA, filesystem=filesystem, compression="zstd")


def _write_batch(
    batch: ExportBatch, filesystem, root: str, holder: str, on_partition_staged: Callable[[dict], None] | None
) -> None:
    """Stage every partition of the batch; files go to the staging folder only."""
    cluster_names = dict(Cluster.objects.values_list("id", "name"))
    staging = storage.join(root, STAGING, f"batch-{batch.pk:08d}")
    for partition in batch.partitions:
        path = storage.join(
            _partition_dir(staging, cluster_id=partition["cluster_id"], day=partition["day"]),
            _file_name(batch),
        )
        if storage.exists(filesystem, path):
            filesystem.delete_file(path)
        partition["rows"] = _stage_partition(
            filesystem,
            path,
            cluster_id=partition["cluster_id"],
            day=partition["day"],
            cluster_names=cluster_names,
        )
        batch.save(update_fields=["partitions"])
        _lease_renew(holder)
        if on_partition_staged is not None:
            on_partition_staged(partition)
    batch.rows = sum(p["rows"] for p in batch.partitions)
    batch.status = ExportBatch.WRITTEN
    batch.save(update_fields=["rows", "status", "partitions"])


def _publish_batch(batch: ExportBatch, filesystem, root: str, holder: str) -> None:
    """Move staged files into the dataset, one partition at a time.

    Per partition the older file is deleted before the new one moves in: a crash in
    between leaves the partition short (until the restart finishes the batch), never
    holding a row twice. Every step is safe to repeat.
    """
    staging = storage.join(root, STAGING, f"batch-{batch.pk:08d}")
    dataset = storage.join(root, DATASET)
    name = _file_name(batch)
    for partition in batch.partitions:
        cluster_id, day = partition["cluster_id"], partition["day"]
        target_dir = _partition_dir(dataset, cluster_id=cluster_id, day=day)
        for existing in storage.list_files(filesystem, target_dir):
            if posixpath.basename(existing) != name:
                filesystem.delete_file(existing)
        staged = storage.join(_partition_dir(staging, cluster_id=cluster_id, day=day), name)
        target = storage.join(target_dir, name)
        if storage.exists(filesystem, staged):
            filesystem.create_dir(target_dir, recursive=True)
            filesystem.move(staged, target)
        if partition["rows"]:
            ExportedPartition.objects.update_or_create(
                cluster_id=cluster_id,
                day=date.fromisoformat(day),
                defaults={"rows": partition["rows"], "batch": batch, "file": target},
            )
        else:
            storage.delete_folder(filesystem, target_dir)
            ExportedPartition.objects.filter(cluster_id=cluster_id, day=date.fromisoformat(day)).delete()
        _lease_renew(holder)
    storage.delete_folder(filesystem, staging)
    batch.status = ExportBatch.PUBLISHED
    batch.finished_at = timezone.now()
    batch.save(update_fields=["status", "finished_at"])


def analytics_export(
    *, export_path: str | None = None, on_partition_staged: Callable[[dict], None] | None = None
) -> ExportResult:
    """Bring the Parquet dataset up to date with the archive; return what was written.

    Incremental: only partitions (day, cluster) with changes since the last batch's
    watermark, or whose row count differs, are rewritten, each from the archive as
    it is now. Restartable: a batch left unfinished by a crash is finished first
    (written again from the start if it had not been fully staged). A partition's
    file is named after the batch that wrote it, and publishing leaves exactly one
    file per partition, so no row is ever in a partition twice.
    `on_partition_staged` is called after each staged partition (tests use it to
    stop an export half-way).
    """
    filesystem, root = storage.resolve(export_path or conf.export_path())
    holder = uuid.uuid4().hex
    _lease_take(holder)
    batches = partitions = rows = 0
    try:
        for batch in ExportBatch.objects.exclude(status=ExportBatch.PUBLISHED).order_by("id"):
            logger.info("finishing export batch %s left %s", batch.pk, batch.status)
            if batch.status == ExportBatch.WRITING:
                _write_batch(batch, filesystem, root, holder, on_partition_staged)
            _publish_batch(batch, filesystem, root, holder)
            batches, partitions, rows = batches + 1, partitions + len(batch.partitions), rows + batch.rows
        last = ExportBatch.objects.filter(status=ExportBatch.PUBLISHED).order_by("-id").first()
        watermark = timezone.now()
        wanted = _partitions_to_write(last.watermark - WATERMARK_OVERLAP if last else None)
        if wanted:
            batch = ExportBatch.objects.create(
                watermark=watermark,
                partitions=[{"cluster_id": cid, "day": day, "rows": None} for cid, day in wanted],
            )
            _write_batch(batch, filesystem, root, holder, on_partition_staged)
            _publish_batch(batch, filesystem, root, holder)
            batches, partitions, rows = batches + 1, partitions + len(wanted), rows + batch.rows
        elif last is not None:
            # Nothing changed: the watermark still moves on, so the next look-back
            # stays short.
            ExportBatch.objects.create(
                status=ExportBatch.PUBLISHED, watermark=watermark, finished_at=timezone.now()
            )
    finally:
        _lease_release(holder)
    return ExportResult(batches=batches, partitions=partitions, rows=rows)


# --- Pipeline runs --------------------------------------------------------------


def _fail_stale_runs() -> None:
    """A worker killed mid-run leaves its run `running`; past the time limit it is over."""
    cutoff = timezone.now() - timedelta(seconds=conf.run_timeout_seconds() + 600)
    PipelineRun.objects.filter(
        Q(started_at__lt=cutoff) | Q(started_at__isnull=True, created_at__lt=cutoff),
        status__in=PipelineRun.ACTIVE,
    ).update(
        status=PipelineRun.FAILED,
        finished_at=timezone.now(),
        error="The run was interrupted (worker stopped) and timed out.",
    )


def pipeline_run_request(
    *, actor, trigger: str, master: str | None = None, enqueue: bool = True
) -> PipelineRun:
    """Record a run; with `enqueue`, hand it to the worker once the row is committed.

    One run at a time: a second request while one is queued or running is refused.
    On-demand runs are audited with who asked.
    """
    with transaction.atomic():
        ExportLease.objects.get_or_create(pk=1)
        # Serialises concurrent requests: both lock the same row before checking.
        ExportLease.objects.select_for_update().get(pk=1)
        _fail_stale_runs()
        if PipelineRun.objects.filter(status__in=PipelineRun.ACTIVE).exists():
            raise PipelineBusy("A pipeline run is already queued or running.")
        user = actor if getattr(actor, "is_authenticated", False) else None
        run = PipelineRun.objects.create(
            trigger=trigger,
            requested_by=user,
            requested_by_name=user.get_username() if user else "system",
            master=master or conf.spark_master(),
        )
        if trigger == PipelineRun.ON_DEMAND:
            audit_record(actor=actor, action="analytics.run", detail=f"run {run.pk} on {run.master}")
        if enqueue:
            transaction.on_commit(lambda: _enqueue(run.pk))
    return run


def _enqueue(run_id: int) -> None:
    from console.analytics.tasks import analytics_run_execute

    try:
        analytics_run_execute.delay(run_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure means the same to the user
        logger.warning("could not queue pipeline run %s: %s", run_id, exc)
        PipelineRun.objects.filter(pk=run_id, status=PipelineRun.QUEUED).update(
            status=PipelineRun.FAILED,
            finished_at=timezone.now(),
            error="The job runner (Celery broker) could not be reached; nothing ran.",
        )


def pipeline_run_execute(*, run_id: int) -> PipelineRun:
    """Export, run the Spark jobs through spark-submit, load the results; record the outcome.

    A run that is not queued any more (run already, or a redelivered task) is left alone.
    """
    from pipeline.submit import PipelineFailed, SubmitOptions, submit

    started = timezone.now()
    if not PipelineRun.objects.filter(pk=run_id, status=PipelineRun.QUEUED).update(
        status=PipelineRun.RUNNING, started_at=started
    ):
        return PipelineRun.objects.get(pk=run_id)
    run = PipelineRun.objects.get(pk=run_id)
    root_uri = conf.export_path()
    filesystem, root = storage.resolve(root_uri)
    output_uri = storage.join(storage.spark_uri(root_uri), RESULTS, f"run-{run.pk:08d}")
    try:
        exported = analytics_export(export_path=root_uri)
        run.exported_rows = exported.rows
        options = SubmitOptions(
            master=run.master,
            driver_memory=conf.driver_memory(),
            executor_memory=conf.executor_memory(),
            business_key=conf.business_key(),
            replay_policy=conf.replay_policy(),
        )
        with tempfile.TemporaryDirectory(prefix="redrive-pipeline-") as work_dir:
            summary = submit(
                input_path=storage.spark_uri(root_uri),
                output_path=output_uri,
                options=options,
                work_dir=Path(work_dir),
                timeout=conf.run_timeout_seconds(),
            )
        results_dir = storage.join(root, RESULTS, f"run-{run.pk:08d}")
        with transaction.atomic():
            summary_load(
                run=run, filesystem=filesystem, results_dir=results_dir, policy=options.replay_policy
            )
            run.input_rows = summary["input_rows"]
            run.jobs = {
                name: {"rows": job["rows"], "seconds": job["seconds"]}
                for name, job in summary["jobs"].items()
            }
            run.status = PipelineRun.SUCCEEDED
            run.finished_at = timezone.now()
            run.save()
        _results_prune(filesystem, root, keep=run.pk)
    except Exception as exc:  # noqa: BLE001 - whatever failed, the run must say so, not stay "running"
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, PipelineFailed) and exc.output:
            detail += "\n" + exc.output
        logger.warning("pipeline run %s failed: %s", run.pk, detail.splitlines()[0])
        run.status = PipelineRun.FAILED
        run.error = detail[-10_000:]
        run.finished_at = timezone.now()
        run.save()
    return run


def _results_prune(filesystem, root: str, *, keep: int) -> None:
    """Results of older runs are in the database already: drop their files."""
    folder = storage.join(root, RESULTS)
    if not storage.exists(filesystem, folder):
        return
    from pyarrow import fs as pafs

    for info in filesystem.get_file_info(pafs.FileSelector(folder)):
        if info.type == pafs.FileType.Directory and info.base_name != f"run-{keep:08d}":
            filesystem.delete_dir(info.path)


# --- Load -----------------------------------------------------------------------


def _read_result(filesystem, folder: str) -> list[dict]:
    files = [
        f
        for f in storage.list_files(filesystem, folder)
        if f.endswith(".parquet") and not posixpath.basename(f).startswith(("_", "."))
    ]
    if not files:
        return []
    return pq.read_table(files, filesystem=filesystem).to_pylist()


def _fit(model, row: dict) -> dict:
    """Clip text to the column's length: a 2 KB exception class must not fail the load."""
    fitted = dict(row)
    for field in model._meta.concrete_fields:
        limit = getattr(field, "max_length", None)
        value = fitted.get(field.name)
        if limit and isinstance(value, str) and len(value) > limit:
            fitted[field.name] = value[: limit - 1] + "…"
    return fitted


def summary_load(*, run: PipelineRun, filesystem, results_dir: str, policy: dict) -> None:
    """Replace the summary tables with this run's results (the dashboard shows one run)."""

    def read(name: str) -> list[dict]:
        return _read_result(filesystem, storage.join(results_dir, name))

    results = {
        FailureOverview: "overview",
        RetryHistogram: "retry_histogram",
        TimeToDlq: "time_to_dlq",
        FailureReason: "reasons",
        DuplicateGroup: "duplicates",
    }
    for model in (*results, ReplayCandidates):
        model.objects.all().delete()
    for model, name in results.items():
        model.objects.bulk_create([model(run=run, **_fit(model, row)) for row in read(name)], batch_size=1000)
    ids = sorted(row["id"] for row in read("replay_candidates"))
    ReplayCandidates.objects.create(run=run, policy=policy, letter_ids=ids, count=len(ids))
