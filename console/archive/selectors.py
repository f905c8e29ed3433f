"""Reads on the archive."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform

from console.archive.models import DeadLetter


def dead_letter_list(
    *, cluster: int | None = None, subscription: str = "", state: str = "", text: str = "",
    property: tuple[str, str] | None = None, since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[DeadLetter]:
    """Dead letters matching every given filter, newest first, payload left unread."""
    letters = DeadLetter.objects.select_related("cluster").defer("payload")
    if cluster:
        letters = letters.filter(cluster_id=cluster)
    if subscription:
        letters = letters.filter(subscription=subscription)
    if state:
        letters = letters.filter(state=state)
    if since:
        letters = letters.filter(collected_at__gte=since)
    if until:
        letters = letters.filter(collected_at__lte=until)
    if text:
        letters = letters.filter(
            Q(payload_preview__icontains=text)
            | Q(broker_message_id=text)
            | Q(origin_message_id=text)
        )
    if property:
        key, value = property
        # KeyTextTransform takes the key as data, not SQL: any string is safe here.
        letters = letters.alias(_property=KeyTextTransform(key, "properties")).filter(
            _property=value
        )
    return letters


def dead_letter_get(*, letter_id: int) -> DeadLetter:
    return DeadLetter.objects.select_related("cluster").get(pk=letter_id)


def subscriptions_seen_in_archive(*, cluster) -> list[tuple[str, str]]:
    return list(
        DeadLetter.objects.filter(cluster=cluster)
        .values_list("subscription", "source")
        .distinct()
        .order_by()
    )


def archive_counts_by_subscription(*, cluster) -> dict[str, dict[str, int]]:
    """{subscription: {state: count}} for the subscriptions page."""
    counts: dict[str, dict[str, int]] = {}
    rows = (
        DeadLetter.objects.filter(cluster=cluster)
        .values("subscription", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        counts.setdefault(row["subscription"], {})[row["state"]] = row["n"]
    return counts


def dead_letter_retry_schedule(*, letter: DeadLetter) -> list:
    """The retries a RocketMQ-style dead letter went through before its DLQ (level,
    wait, due time), from the properties it carries; empty for other brokers or when
    the properties do not say."""
    if letter.cluster.kind != "rocketmq":
        return []
    from brokers.rocketmq.schedule import DEFAULT_DELAY_LEVELS
    from brokers.rocketmq.schedule import dead_letter_retry_schedule as schedule_of

    levels = (letter.cluster.options or {}).get("delay_levels") or DEFAULT_DELAY_LEVELS
    try:
        return schedule_of(letter.properties, delay_levels=levels)
    except (TypeError, ValueError):
        # A cluster option an admin mistyped must not hide the letter itself.
        return []
