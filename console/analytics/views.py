"""The analytics dashboard: charts of the last loaded run, run status, run on demand."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from console.analytics import charts, selectors, services
from console.analytics.models import PipelineRun


def _run_status_context() -> dict:
    latest = selectors.pipeline_run_latest()
    return {
        "latest_run": latest,
        "run_active": bool(latest and latest.status in PipelineRun.ACTIVE),
        "recent_runs": selectors.pipeline_run_list(limit=5),
    }


def _chosen_subscription(request, choices: list[dict]) -> dict | None:
    """The `retries` query value "cluster_id:subscription", if it names a known one."""
    value = request.GET.get("retries", "")
    cluster_id, _, subscription = value.partition(":")
    for choice in choices:
        if str(choice["cluster_id"]) == cluster_id and choice["subscription"] == subscription:
            return choice
    return None


@require_GET
@permission_required("analytics.view_pipelinerun", raise_exception=True)
def dashboard(request):
    over_time = selectors.dead_letters_by_day()
    retry_choices = selectors.retry_subscriptions()
    chosen = _chosen_subscription(request, retry_choices)
    histogram = selectors.retry_histogram(
        cluster_id=chosen["cluster_id"] if chosen else None,
        subscription=chosen["subscription"] if chosen else "",
    )
    reasons = selectors.failure_reason_top(limit=20)
    top_reason = max((reason.letters for reason in reasons), default=0)
    context = {
        **_run_status_context(),
        "loaded_run": selectors.pipeline_run_loaded(),
        "export": selectors.export_status(),
        "totals": selectors.overview_totals(),
        "by_subscription": selectors.overview_by_subscription()[:50],
        "over_time": charts.line_chart(over_time["days"], over_time["series"]),
        "retry_choices": retry_choices,
        "retry_chosen": chosen,
        "retry_chart": charts.bar_chart(histogram),
        "time_to_dlq": selectors.time_to_dlq_list(),
        "reasons": [
            (reason, round(100 * reason.letters / top_reason) if top_reason else 0) for reason in reasons
        ],
        "duplicates": selectors.duplicate_group_top(limit=50),
        "candidates": selectors.replay_candidates_latest(),
    }
    template = (
        "analytics/dashboard.html#retries"
        if request.htmx and request.GET.get("retries") is not None
        else "analytics/dashboard.html"
    )
    return render(request, template, context)


@require_GET
@permission_required("analytics.view_pipelinerun", raise_exception=True)
def run_status(request):
    """The run-status panel alone: htmx polls it while a run is active."""
    return render(request, "analytics/dashboard.html#run-status", _run_status_context())


@require_POST
@permission_required("analytics.run_pipeline", raise_exception=True)
def run_request(request):
    try:
        run = services.pipeline_run_request(actor=request.user, trigger=PipelineRun.ON_DEMAND)
    except services.PipelineBusy as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Pipeline run {run.pk} queued on {run.master}.")
    if request.htmx:
        return render(request, "analytics/dashboard.html#run-status", _run_status_context())
    return redirect("analytics:dashboard")
