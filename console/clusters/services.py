"""Writes on clusters and the broker calls behind them (connection test, rebuild).

Views and API views call these; nothing else builds an adapter.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from brokers import adapter_for
from brokers.base import BrokerAdapter, BrokerError, ClusterConfig, KnownSubscription, RebuildPlan
from console.audit.services import audit_record
from console.clusters.models import Cluster, RegisteredSubscription

logger = logging.getLogger(__name__)

EDITABLE_FIELDS = ("name", "kind", "service_url", "admin_url", "username", "options",
                   "collect_interval_seconds")


def cluster_config(cluster: Cluster) -> ClusterConfig:
    """What an adapter needs to reach the cluster, secrets decrypted only here."""
    from console.archive.selectors import subscriptions_seen_in_archive

    known = {
        (sub.name, sub.source): KnownSubscription(name=sub.name, source=sub.source, mode=sub.mode)
        for sub in cluster.registered.all()
    }
    for name, source in subscriptions_seen_in_archive(cluster=cluster):
        known.setdefault((name, source), KnownSubscription(name=name, source=source))
    return ClusterConfig(
        kind=cluster.kind,
        name=cluster.name,
        service_url=cluster.service_url,
        admin_url=cluster.admin_url,
        username=cluster.username,
        password=cluster.password,
        token=cluster.token,
        options=cluster.options or {},
        known_subscriptions=tuple(sorted(known.values(), key=lambda s: (s.name, s.source))),
        timeout_seconds=settings.BROKER_TIMEOUT_SECONDS,
    )


def cluster_adapter(cluster: Cluster) -> BrokerAdapter:
    return adapter_for(cluster_config(cluster))


def cluster_create(*, actor, password: str = "", token: str = "", **fields) -> Cluster:
    cluster = Cluster(**{k: v for k, v in fields.items() if k in EDITABLE_FIELDS})
    cluster.password = password
    cluster.token = token
    with transaction.atomic():
        cluster.full_clean()
        cluster.save()
        audit_record(actor=actor, action="cluster.create", cluster=cluster,
                     detail=f"kind={cluster.kind} url={cluster.service_url}")
    return cluster


def cluster_update(*, cluster: Cluster, actor, password: str | None = None,
                   token: str | None = None, **fields) -> Cluster:
    """Update fields; a password or token of None (left blank in a form) keeps the old one."""
    for key, value in fields.items():
        if key in EDITABLE_FIELDS:
            setattr(cluster, key, value)
    if password:
        cluster.password = password
    if token:
        cluster.token = token
    with transaction.atomic():
        cluster.full_clean()
        cluster.save()
        changed = sorted(k for k in fields if k in EDITABLE_FIELDS)
        if password:
            changed.append("password")
        if token:
            changed.append("token")
        audit_record(actor=actor, action="cluster.update", cluster=cluster,
                     detail="changed: " + ", ".join(changed))
    return cluster


def cluster_delete(*, cluster: Cluster, actor) -> None:
    with transaction.atomic():
        audit_record(actor=actor, action="cluster.delete", cluster=cluster)
        cluster.delete()


def cluster_test_connection(*, cluster: Cluster) -> tuple[bool, str]:
    """Reach the cluster; remember and return (reachable, message)."""
    try:
        with cluster_adapter(cluster) as adapter:
            ok, message = True, adapter.check_connection()
    except BrokerError as exc:
        ok, message = False, exc.message
    logger.info("connection test of cluster %s: %s", cluster.name, "ok" if ok else "failed")
    Cluster.objects.filter(pk=cluster.pk).update(
        last_check_at=timezone.now(), last_check_ok=ok, last_check_message=message[:1000]
    )
    cluster.last_check_ok, cluster.last_check_message = ok, message[:1000]
    return ok, message


def registered_subscription_add(*, cluster: Cluster, actor, name: str, source: str,
                                mode: str = "") -> RegisteredSubscription:
    with transaction.atomic():
        sub, _ = RegisteredSubscription.objects.get_or_create(
            cluster=cluster, name=name.strip(), source=source.strip(), defaults={"mode": mode}
        )
        audit_record(actor=actor, action="subscription.register", cluster=cluster,
                     subscription=sub.name, detail=f"source={sub.source}")
    return sub


def rebuild_plan(*, cluster: Cluster, subscription: str) -> RebuildPlan:
    with cluster_adapter(cluster) as adapter:
        return adapter.plan_rebuild(subscription)


def rebuild_apply(*, cluster: Cluster, subscription: str, actor) -> RebuildPlan:
    """Plan afresh and apply (a plan shown earlier may be stale); audited either way."""
    try:
        with cluster_adapter(cluster) as adapter:
            done = adapter.apply_rebuild(adapter.plan_rebuild(subscription))
    except BrokerError as exc:
        audit_record(actor=actor, action="topology.rebuild", cluster=cluster,
                     subscription=subscription, result="error", detail=exc.message)
        raise
    audit_record(actor=actor, action="topology.rebuild", cluster=cluster,
                 subscription=subscription, count=len(done.steps),
                 detail="; ".join(f"{s.action} {s.target}" for s in done.steps))
    return done
