"""Archive pages: browse and filter dead letters, open one, collect, discard."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from brokers.base import BrokerError
from console.archive import selectors, services
from console.archive.forms import ArchiveFilterForm
from console.archive.models import DeadLetter
from console.archive.payloads import payload_view
from console.clusters.models import Cluster


@require_GET
def dead_letter_list(request):
    form = ArchiveFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        letters = DeadLetter.objects.none()
    else:
        letters = selectors.dead_letter_list(**(form.filters() if form.is_bound else {}))
    page = Paginator(letters, settings.ARCHIVE_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode(),
               "clusters": Cluster.objects.only("id", "name")}
    template = "archive/list.html#results" if request.htmx else "archive/list.html"
    return render(request, template, context)


@require_GET
def dead_letter_detail(request, letter_id: int):
    letter = get_object_or_404(DeadLetter.objects.select_related("cluster"), pk=letter_id)
    context = {"letter": letter, "payload": payload_view(bytes(letter.payload)),
               "properties": sorted(letter.properties.items()),
               "retry_schedule": selectors.dead_letter_retry_schedule(letter=letter)}
    return render(request, "archive/detail.html", context)


@require_POST
@permission_required("archive.collect_deadletter", raise_exception=True)
def dead_letters_collect(request, cluster_id: int):
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    subscription = request.POST.get("subscription", "")
    try:
        moved = services.dead_letters_collect(cluster=cluster, subscription=subscription,
                                              actor=request.user)
    except BrokerError as exc:
        messages.error(request, f"Collect from {subscription} failed: {exc.message}")
    else:
        messages.success(request, f"Collected {moved} dead letter(s) from {subscription}.")
    return redirect("clusters:detail", cluster_id=cluster.pk)


@require_POST
@permission_required("archive.discard_deadletter", raise_exception=True)
def dead_letters_discard(request):
    ids = [int(value) for value in request.POST.getlist("ids") if value.isdigit()]
    if not ids:
        messages.error(request, "Select at least one dead letter to discard.")
    else:
        changed = services.dead_letters_discard(letter_ids=ids, actor=request.user,
                                                reason=request.POST.get("reason", "")[:500])
        messages.success(request, f"Discarded {changed} dead letter(s).")
    next_url = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        return redirect(next_url)
    return redirect("archive:list")
