"""Celery tasks of the replay engine: each takes an id and calls a service.

Every task is queued only after the transaction that created its work committed
(`transaction.on_commit` in the services). Time limits are per task: a replay run
works for one slice (REPLAY_SLICE_SECONDS) and hands over to a fresh task, so its
limits sit just above that slice.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from console.replay import services

logger = logging.getLogger(__name__)

RUN_SOFT_LIMIT = int(services.slice_seconds()) + 60
RUN_HARD_LIMIT = RUN_SOFT_LIMIT + 60


@shared_task(name="console.replay.tasks.replay_job_run", soft_time_limit=RUN_SOFT_LIMIT,
             time_limit=RUN_HARD_LIMIT, acks_late=True, reject_on_worker_lost=True)
def replay_job_run(job_id: int) -> str:
    try:
        return services.replay_job_run(job_id=job_id)
    except SoftTimeLimitExceeded:
        # The run released its lease on the way out; letters in flight stay claimed
        # and the next run sends them again.
        logger.warning("replay job %s hit its soft time limit; queued again", job_id)
        services.replay_job_enqueue(job_id=job_id)
        return "continued"


@shared_task(name="console.replay.tasks.replay_jobs_recover", soft_time_limit=120, time_limit=180)
def replay_jobs_recover() -> list[int]:
    return services.replay_jobs_recover()


@shared_task(name="console.replay.tasks.replay_policy_run", soft_time_limit=120, time_limit=180)
def replay_policy_run(policy_id: int) -> int | None:
    job = services.replay_policy_run(policy_id=policy_id)
    return job.pk if job else None


@shared_task(name="console.replay.tasks.archive_collect_cluster", soft_time_limit=600, time_limit=660)
def archive_collect_cluster(cluster_id: int) -> int:
    return services.archive_collect_cluster(cluster_id=cluster_id)


@shared_task(name="console.replay.tasks.retention_purge", soft_time_limit=600, time_limit=660)
def retention_purge() -> int:
    return services.retention_purge()
