"""Replay pages: jobs and their progress, new job, resend one letter, schedules,
retention. Thin: every change goes through console.replay.services."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.archive.forms import ArchiveFilterForm
from console.archive.models import DeadLetter
from console.archive.selectors import dead_letter_list
from console.replay import selectors, services
from console.replay.forms import PolicyForm, ReplayOptionsForm, ResendForm, RetentionForm, errors_from
from console.replay.models import ReplayJob, ReplayPolicy


def _selected_ids(request) -> list[int]:
    source = request.POST if request.method == "POST" else request.GET
    return sorted({int(value) for value in source.getlist("ids") if value.isdigit()})[:10_000]


@require_GET
@permission_required("replay.view_replayjob", raise_exception=True)
def job_list(request):
    state = request.GET.get("state", "")
    if state not in dict(ReplayJob.STATE_CHOICES):
        state = ""
    page = Paginator(selectors.replay_job_list(state=state), 50).get_page(request.GET.get("page"))
    return render(request, "replay/jobs.html", {"page": page, "state": state,
                                                "states": ReplayJob.STATE_CHOICES})


@require_GET
@permission_required("replay.view_replayjob", raise_exception=True)
def job_detail(request, job_id: int):
    job = get_object_or_404(ReplayJob.objects.select_related("policy"), pk=job_id)
    context = {"job": job, "progress": selectors.replay_job_progress(job=job)}
    if request.htmx:
        return render(request, "replay/job_detail.html#progress", context)
    context["problems"] = selectors.replay_ledger_problems(job=job)
    return render(request, "replay/job_detail.html", context)


def _control(request, job_id: int, action):
    get_object_or_404(ReplayJob, pk=job_id)
    try:
        job = action(job_id=job_id, actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Replay job #{job.pk} is now {job.state}.")
    return redirect("replay:job", job_id=job_id)


@require_POST
@permission_required("replay.control_replayjob", raise_exception=True)
def job_pause(request, job_id: int):
    return _control(request, job_id, services.replay_job_pause)


@require_POST
@permission_required("replay.control_replayjob", raise_exception=True)
def job_resume(request, job_id: int):
    return _control(request, job_id, services.replay_job_resume)


@require_POST
@permission_required("replay.control_replayjob", raise_exception=True)
def job_cancel(request, job_id: int):
    return _control(request, job_id, services.replay_job_cancel)


@require_http_methods(["GET", "POST"])
@permission_required("replay.add_replayjob", raise_exception=True)
def job_new(request):
    """GET with archive filters (replay all matching), or POST with `ids` from the
    archive page (replay selected) shows the options; POST with `confirm` creates."""
    ids = _selected_ids(request)
    source = request.POST if request.method == "POST" else request.GET
    filter_form = ArchiveFilterForm({k: v for k, v in source.items() if k in ArchiveFilterForm.base_fields})
    filters_valid = filter_form.is_valid()
    confirmed = request.method == "POST" and "confirm" in request.POST
    options = ReplayOptionsForm(request.POST if confirmed else None)
    if ids:
        matching = DeadLetter.objects.filter(pk__in=ids)
    elif filters_valid:
        matching = dead_letter_list(**filter_form.filters())
    else:
        matching = DeadLetter.objects.none()
    eligible = matching.filter(state__in=services.ELIGIBLE_STATES).count()
    if confirmed and options.is_valid() and (ids or filters_valid):
        try:
            job = services.replay_job_create(
                actor=request.user, letter_ids=ids if ids else None,
                filters=None if ids else filter_form.filters(), **options.job_options())
        except ValidationError as exc:
            errors_from(exc, options)
        else:
            if job.dry_run:
                messages.info(request, f"Dry run: {job.total} dead letter(s) would be replayed.")
            else:
                messages.success(request, f"Replay job #{job.pk} started for {job.total} dead letter(s).")
            return redirect("replay:job", job_id=job.pk)
    context = {"options": options, "filter_form": filter_form, "ids": ids, "eligible": eligible,
               "matching": matching.count(),
               "filters": {k: v for k, v in filter_form.data.items() if v} if not ids else {}}
    return render(request, "replay/new.html", context, status=200)


@require_http_methods(["GET", "POST"])
@permission_required("replay.add_replayjob", raise_exception=True)
def letter_resend(request, letter_id: int):
    letter = get_object_or_404(DeadLetter.objects.select_related("cluster"), pk=letter_id)
    original_text = services.payload_text_or_none(bytes(letter.payload))
    initial = {"payload": original_text or "", "properties": json.dumps(letter.properties, indent=2,
                                                                          ensure_ascii=False)}
    form = ResendForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        payload = None
        if original_text is not None and "payload" in request.POST:
            payload = form.cleaned_data["payload"].replace("\r\n", "\n").encode("utf-8")
            if payload == original_text.replace("\r\n", "\n").encode("utf-8"):
                payload = None
        try:
            job = services.dead_letter_resend(letter=letter, actor=request.user, payload=payload,
                                              properties=form.cleaned_data["properties"]
                                              if "properties" in request.POST else None)
        except ValidationError as exc:
            errors_from(exc, form)
        else:
            messages.success(request, f"Dead letter {letter.pk} is being resent (job #{job.pk}).")
            return redirect("replay:job", job_id=job.pk)
    return render(request, "replay/resend.html", {"letter": letter, "form": form,
                                                  "editable_payload": original_text is not None})


@require_GET
@permission_required("replay.view_replaypolicy", raise_exception=True)
def schedule_list(request):
    return render(request, "replay/schedules.html", {"policies": selectors.replay_policy_list()})


def _policy_initial(policy: ReplayPolicy) -> dict:
    return {"name": policy.name, "cluster": policy.cluster_id, "subscription": policy.subscription,
            "text": policy.filters.get("text", ""), "property": policy.filters.get("property", ""),
            "rate_limit": policy.rate_limit, "max_per_run": policy.max_per_run, "cron": policy.cron,
            "enabled": policy.enabled}


@require_http_methods(["GET", "POST"])
@permission_required("replay.change_replaypolicy", raise_exception=True)
def schedule_edit(request, policy_id: int | None = None):
    policy = get_object_or_404(ReplayPolicy, pk=policy_id) if policy_id else None
    form = PolicyForm(request.POST or None, initial=_policy_initial(policy) if policy else None)
    if request.method == "POST" and form.is_valid():
        try:
            saved = services.replay_policy_save(actor=request.user, policy=policy, **form.policy_fields())
        except ValidationError as exc:
            errors_from(exc, form)
        else:
            messages.success(request, f"Schedule {saved.name} saved.")
            return redirect("replay:schedules")
    return render(request, "replay/schedule_form.html", {"form": form, "policy": policy})


@require_POST
@permission_required("replay.delete_replaypolicy", raise_exception=True)
def schedule_delete(request, policy_id: int):
    policy = get_object_or_404(ReplayPolicy, pk=policy_id)
    services.replay_policy_delete(policy=policy, actor=request.user)
    messages.success(request, f"Schedule {policy.name} deleted.")
    return redirect("replay:schedules")


@require_http_methods(["GET", "POST"])
@permission_required("replay.view_retentionsetting", raise_exception=True)
def retention(request):
    setting = services.retention_setting()
    form = RetentionForm(request.POST or None,
                         initial={"discarded_retention_days": setting.discarded_retention_days})
    if request.method == "POST":
        if not request.user.has_perm("replay.change_retentionsetting"):
            raise PermissionDenied
        if form.is_valid():
            services.retention_update(actor=request.user, days=form.cleaned_data["discarded_retention_days"])
            messages.success(request, "Retention period saved.")
            return redirect("replay:retention")
    discarded = DeadLetter.objects.filter(state=DeadLetter.STATE_DISCARDED).count()
    return render(request, "replay/retention.html", {"form": form, "setting": setting,
                                                     "discarded": discarded})


@require_POST
@permission_required("replay.change_retentionsetting", raise_exception=True)
def retention_purge(request):
    purged = services.retention_purge(actor=request.user)
    messages.success(request, f"Purged {purged} discarded dead letter(s) past the retention period.")
    return redirect("replay:retention")
