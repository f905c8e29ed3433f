from __future__ import annotations

from dataclasses import dataclass

from brokers.base import BrokerError, PeekedMessage, SubscriptionInfo
from console.clusters.models import Cluster
from console.clusters.services import cluster_adapter


@dataclass(frozen=True)
class Inventory:
    """Subscriptions of a cluster, or why they could not be listed."""

    subscriptions: tuple[SubscriptionInfo, ...] = ()
    error: str = ""

    @property
    def reachable(self) -> bool:
        return not self.error


def cluster_list():
    return Cluster.objects.all()


def cluster_inventory(*, cluster: Cluster) -> Inventory:
    try:
        with cluster_adapter(cluster) as adapter:
            return Inventory(subscriptions=tuple(adapter.list_subscriptions()))
    except BrokerError as exc:
        return Inventory(error=exc.message)


@dataclass(frozen=True)
class RetryQueuePeek:
    """Messages seen in a retry queue, and what peeking did on that broker."""

    messages: tuple[PeekedMessage, ...]
    note: str


def retry_queue_peek(*, cluster: Cluster, subscription: str, limit: int = 50) -> RetryQueuePeek:
    with cluster_adapter(cluster) as adapter:
        messages = adapter.peek_retry_queue(subscription, limit=limit)
        return RetryQueuePeek(messages=tuple(messages), note=adapter.peek_note)


def cluster_subscriptions(*, cluster: Cluster) -> list[SubscriptionInfo]:
    """The cluster's subscriptions; raises BrokerError (with its `permanent` flag) when
    the broker cannot list them, for callers that report the failure themselves (the API)."""
    with cluster_adapter(cluster) as adapter:
        return adapter.list_subscriptions()
