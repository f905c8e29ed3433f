"""Cluster pages: list, add/edit, connection test, subscriptions, rebuild, peek."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from brokers.base import BrokerError
from console.archive.payloads import payload_preview
from console.archive.selectors import archive_counts_by_subscription
from console.clusters import selectors, services
from console.clusters.forms import ClusterForm, RegisterSubscriptionForm
from console.clusters.models import Cluster


@require_GET
def cluster_list(request):
    return render(request, "clusters/list.html", {"clusters": selectors.cluster_list()})


@require_http_methods(["GET", "POST"])
@permission_required("clusters.add_cluster", raise_exception=True)
def cluster_add(request):
    form = ClusterForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        cluster = services.cluster_create(
            actor=request.user, password=data.pop("password"), token=data.pop("token"), **data
        )
        messages.success(request, f"Cluster {cluster.name} added.")
        return redirect("clusters:detail", cluster_id=cluster.pk)
    return render(request, "clusters/form.html", {"form": form, "cluster": None})


@require_http_methods(["GET", "POST"])
@permission_required("clusters.change_cluster", raise_exception=True)
def cluster_edit(request, cluster_id: int):
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    form = ClusterForm(request.POST or None, instance=cluster)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        services.cluster_update(cluster=cluster, actor=request.user,
                                password=data.pop("password"), token=data.pop("token"), **data)
        messages.success(request, f"Cluster {cluster.name} saved.")
        return redirect("clusters:detail", cluster_id=cluster.pk)
    return render(request, "clusters/form.html", {"form": form, "cluster": cluster})


@require_POST
@permission_required("clusters.delete_cluster", raise_exception=True)
def cluster_delete(request, cluster_id: int):
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    if cluster.dead_letters.exists():
        messages.error(request, f"Cluster {cluster.name} still has archived dead letters; "
                                "discard and purge them first.")
        return redirect("clusters:detail", cluster_id=cluster.pk)
    services.cluster_delete(cluster=cluster, actor=request.user)
    messages.success(request, f"Cluster {cluster.name} deleted.")
    return redirect("clusters:list")


@require_POST
def cluster_test(request, cluster_id: int):
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    ok, message = services.cluster_test_connection(cluster=cluster)
    if request.htmx:
        return render(request, "clusters/detail.html#connection", {"cluster": cluster})
    (messages.success if ok else messages.error)(
        request, f"{'Reachable' if ok else 'Unreachable'}: {message}"
    )
    return redirect("clusters:detail", cluster_id=cluster.pk)


@require_GET
def cluster_detail(request, cluster_id: int):
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    inventory = selectors.cluster_inventory(cluster=cluster)
    archived = archive_counts_by_subscription(cluster=cluster)
    rows = [(sub, sum(archived.get(sub.name, {}).values())) for sub in inventory.subscriptions]
    context = {
        "cluster": cluster,
        "inventory": inventory,
        "rows": rows,
        "register_form": RegisterSubscriptionForm(),
    }
    return render(request, "clusters/detail.html", context)


@require_POST
@permission_required("clusters.add_registeredsubscription", raise_exception=True)
def subscription_register(request, cluster_id: int):
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    form = RegisterSubscriptionForm(request.POST)
    if form.is_valid():
        services.registered_subscription_add(cluster=cluster, actor=request.user, **form.cleaned_data)
        messages.success(request, f"Subscription {form.cleaned_data['name']} registered.")
    else:
        messages.error(request, "Name and source are both required.")
    return redirect("clusters:detail", cluster_id=cluster.pk)


@require_http_methods(["GET", "POST"])
@permission_required("clusters.rebuild_cluster", raise_exception=True)
def subscription_rebuild(request, cluster_id: int):
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    subscription = request.GET.get("subscription") or request.POST.get("subscription", "")
    if not subscription:
        messages.error(request, "Choose a subscription to rebuild.")
        return redirect("clusters:detail", cluster_id=cluster.pk)
    if request.method == "POST":
        try:
            done = services.rebuild_apply(cluster=cluster, subscription=subscription,
                                          actor=request.user)
        except BrokerError as exc:
            messages.error(request, f"Rebuild failed: {exc.message}")
        else:
            messages.success(request, f"Rebuild of {subscription}: {len(done.steps)} change(s) made.")
        return redirect("clusters:detail", cluster_id=cluster.pk)
    plan = services.rebuild_plan(cluster=cluster, subscription=subscription)
    return render(request, "clusters/rebuild.html", {"cluster": cluster, "plan": plan})


@require_GET
def retry_queue_peek(request, cluster_id: int):
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    subscription = request.GET.get("subscription", "")
    try:
        peek = selectors.retry_queue_peek(cluster=cluster, subscription=subscription)
    except BrokerError as exc:
        peeked, note, error = [], "", exc.message
    else:
        peeked = [(message, payload_preview(message.payload, 200)) for message in peek.messages]
        note, error = peek.note, ""
    return render(request, "clusters/peek.html", {
        "cluster": cluster, "subscription": subscription, "messages_peeked": peeked,
        "note": note, "error": error, "back": reverse("clusters:detail", args=[cluster.pk]),
    })
