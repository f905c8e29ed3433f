"""Reads of the replay engine: jobs and their progress, the ledger, policies."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from console.replay.models import ReplayJob, ReplayLedgerEntry, ReplayPolicy


def replay_job_list(*, state: str = "") -> QuerySet[ReplayJob]:
    jobs = ReplayJob.objects.select_related("policy")
    if state:
        jobs = jobs.filter(state=state)
    return jobs


def replay_job_get(*, job_id: int) -> ReplayJob:
    return ReplayJob.objects.select_related("policy").get(pk=job_id)


def replay_job_progress(*, job: ReplayJob) -> dict:
    """The numbers the progress bar, the API and the command show."""
    return {
        "id": job.pk,
        "state": job.state,
        "state_reason": job.state_reason,
        "dry_run": job.dry_run,
        "total": job.total,
        "done": job.done,
        "failed": job.failed,
        "skipped": job.skipped,
        "remaining": job.remaining,
        "percent": job.percent,
        "rate": round(job.achieved_rate, 1),
        "rate_limit": job.rate_limit,
        "eta_seconds": job.eta_seconds,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def replay_ledger_counts(*, job: ReplayJob) -> dict[str, int]:
    rows = job.ledger.values("status").annotate(n=Count("id")).order_by()
    return {row["status"]: row["n"] for row in rows}


def replay_ledger_problems(*, job: ReplayJob, limit: int = 100) -> QuerySet[ReplayLedgerEntry]:
    """Entries that failed or were skipped, with their reasons, for the job page."""
    return (job.ledger.filter(status__in=[ReplayLedgerEntry.STATUS_FAILED, ReplayLedgerEntry.STATUS_SKIPPED])
            .select_related("dead_letter").defer("dead_letter__payload", "payload_override")[:limit])


def replay_policy_list() -> QuerySet[ReplayPolicy]:
    return ReplayPolicy.objects.select_related("cluster", "periodic_task")
