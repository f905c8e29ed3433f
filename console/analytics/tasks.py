"""Celery tasks of the analytics pipeline: thin callers of services."""

from __future__ import annotations

import logging

from celery import shared_task

from console.analytics import services
from console.analytics.models import PipelineRun

logger = logging.getLogger(__name__)


@shared_task(name="analytics.export")
def analytics_export() -> dict:
    """Bring the Parquet export up to date (also part of every pipeline run)."""
    try:
        result = services.analytics_export()
    except services.ExportBusy as exc:
        logger.info("analytics export skipped: %s", exc)
        return {"skipped": str(exc)}
    return {"batches": result.batches, "partitions": result.partitions, "rows": result.rows}


@shared_task(name="analytics.run_execute")
def analytics_run_execute(run_id: int) -> str:
    """Carry out a run the dashboard, the API or the nightly task recorded."""
    return services.pipeline_run_execute(run_id=run_id).status


@shared_task(name="analytics.nightly")
def analytics_nightly() -> str:
    """The nightly run (Celery beat): export, jobs, load, in this worker."""
    try:
        run = services.pipeline_run_request(actor=None, trigger=PipelineRun.NIGHTLY, enqueue=False)
    except services.PipelineBusy as exc:
        logger.info("nightly analytics skipped: %s", exc)
        return "skipped"
    return services.pipeline_run_execute(run_id=run.pk).status
