"""Reads of the analytics app: runs, export state and the loaded summaries."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta

from django.db.models import Count, Max, Sum

from console.analytics.models import (
    DuplicateGroup,
    ExportBatch,
    ExportedPartition,
    FailureOverview,
    FailureReason,
    PipelineRun,
    ReplayCandidates,
    RetryHistogram,
    TimeToDlq,
)


def pipeline_run_latest() -> PipelineRun | None:
    return PipelineRun.objects.order_by("-created_at", "-id").first()


def pipeline_run_loaded() -> PipelineRun | None:
    """The run whose results the summary tables hold."""
    loaded = (
        FailureOverview.objects.aggregate(run=Max("run_id"))["run"]
        or (ReplayCandidates.objects.aggregate(run=Max("run_id"))["run"])
    )
    return PipelineRun.objects.filter(pk=loaded).first() if loaded else None


def pipeline_run_list(*, limit: int = 10) -> list[PipelineRun]:
    return list(PipelineRun.objects.order_by("-created_at", "-id")[:limit])


def export_status() -> dict:
    last = ExportBatch.objects.filter(status=ExportBatch.PUBLISHED).order_by("-id").first()
    totals = ExportedPartition.objects.aggregate(rows=Sum("rows"), partitions=Count("id"))
    return {
        "last_batch": last,
        "rows": totals["rows"] or 0,
        "partitions": totals["partitions"],
        "unfinished": ExportBatch.objects.exclude(status=ExportBatch.PUBLISHED).count(),
    }


def subscription_label(cluster_name: str, subscription: str) -> str:
    return f"{cluster_name} / {subscription}"


def dead_letters_by_day(*, top: int = 6) -> dict:
    """{"days": [date...], "series": [(label, [count per day])]} for the busiest subscriptions.

    Days without letters count 0, so every series has one value per day; the rest of
    the subscriptions are summed into "other".
    """
    rows = list(
        FailureOverview.objects.values("cluster_name", "subscription", "day")
        .annotate(n=Sum("dead_letters"))
        .order_by()
    )
    if not rows:
        return {"days": [], "series": []}
    first, last = min(r["day"] for r in rows), max(r["day"] for r in rows)
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    totals: dict[str, int] = defaultdict(int)
    per_day: dict[str, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        label = subscription_label(row["cluster_name"], row["subscription"])
        totals[label] += row["n"]
        per_day[label][row["day"]] += row["n"]
    busiest = sorted(totals, key=lambda label: (-totals[label], label))
    series = [(label, [per_day[label][day] for day in days]) for label in busiest[:top]]
    if len(busiest) > top:
        other = [sum(per_day[label][day] for label in busiest[top:]) for day in days]
        series.append((f"other ({len(busiest) - top})", other))
    return {"days": days, "series": series}


def retry_subscriptions() -> list[dict]:
    return list(
        RetryHistogram.objects.values("cluster_id", "cluster_name", "subscription")
        .annotate(letters=Sum("letters"))
        .order_by("cluster_name", "subscription")
    )


def retry_histogram(*, cluster_id: int | None = None, subscription: str = "") -> list[tuple[int, int]]:
    """[(retry_count, letters)] for one subscription, or summed over all of them."""
    rows = RetryHistogram.objects.all()
    if cluster_id is not None and subscription:
        rows = rows.filter(cluster_id=cluster_id, subscription=subscription)
    counted = rows.values("retry_count").annotate(n=Sum("letters")).order_by("retry_count")
    return [(row["retry_count"], row["n"]) for row in counted]


def time_to_dlq_list() -> list[TimeToDlq]:
    return list(TimeToDlq.objects.all())


def failure_reason_top(*, limit: int = 20) -> list[FailureReason]:
    return list(FailureReason.objects.all()[:limit])


def duplicate_group_top(*, limit: int = 50) -> list[DuplicateGroup]:
    return list(DuplicateGroup.objects.all()[:limit])


def overview_totals() -> dict:
    totals = FailureOverview.objects.aggregate(
        dead_letters=Sum("dead_letters"),
        replayed=Sum("replayed"),
        discarded=Sum("discarded"),
        parked=Sum("parked"),
        replay_failed=Sum("replay_failed"),
    )
    totals = {key: value or 0 for key, value in totals.items()}
    attempts = totals["replayed"] + totals["replay_failed"]
    totals["replay_success_rate"] = totals["replayed"] / attempts if attempts else None
    return totals


def overview_by_subscription() -> list[dict]:
    rows = (
        FailureOverview.objects.values("cluster_name", "subscription", "source")
        .annotate(
            dead_letters=Sum("dead_letters"),
            replayed=Sum("replayed"),
            discarded=Sum("discarded"),
            parked=Sum("parked"),
            replay_failed=Sum("replay_failed"),
        )
        .order_by("-dead_letters", "cluster_name", "subscription")
    )
    result = []
    for row in rows:
        attempts = row["replayed"] + row["replay_failed"]
        result.append({**row, "replay_success_rate": row["replayed"] / attempts if attempts else None})
    return result


def replay_candidates_latest() -> ReplayCandidates | None:
    return ReplayCandidates.objects.order_by("-id").first()
