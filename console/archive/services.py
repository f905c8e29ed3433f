"""Writes on the archive: collecting dead letters from a DLQ, discarding them."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from brokers.base import BrokerError
from brokers.base import DeadLetter as BrokerDeadLetter
from console.archive.models import DeadLetter
from console.archive.payloads import payload_preview
from console.audit.services import audit_record
from console.clusters.models import Cluster
from console.clusters.services import cluster_adapter


def _database_text(value: str) -> str:
    # PostgreSQL text and jsonb cannot hold NUL; the payload itself is bytes and keeps it.
    return value.replace("\x00", "\ufffd")


def archive_store(*, cluster: Cluster, letters: Sequence[BrokerDeadLetter]) -> int:
    """Commit a batch of dead letters; return how many rows are new.

    Returns only after the transaction committed: this is the sink an adapter calls
    before it acknowledges the batch on the broker. Rows already archived (same
    broker message id on this cluster) are left as they are.
    """
    if not letters:
        return 0
    now = timezone.now()
    rows = [
        DeadLetter(
            cluster=cluster,
            subscription=_database_text(letter.subscription),
            source=_database_text(letter.source),
            payload=bytes(letter.payload),
            payload_preview=_database_text(payload_preview(letter.payload, DeadLetter.PREVIEW_CHARS)),
            payload_size=len(letter.payload),
            properties={_database_text(str(k)): _database_text(str(v))
                        for k, v in letter.properties.items()},
            retry_count=letter.retry_count,
            origin_message_id=letter.origin_message_id,
            broker_message_id=letter.broker_message_id,
            first_failure_at=letter.first_failure_at,
            last_failure_at=letter.last_failure_at,
            collected_at=now,
        )
        for letter in letters
    ]
    with transaction.atomic():
        if connection.vendor == "postgresql":
            return _copy_new_rows(rows)
        before = DeadLetter.objects.filter(
            cluster=cluster, broker_message_id__in=[r.broker_message_id for r in rows]
        ).count()
        DeadLetter.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
        return len({r.broker_message_id for r in rows}) - before


_COPIED_COLUMNS = (
    "cluster_id", "subscription", "source", "payload", "payload_preview", "payload_size",
    "properties", "retry_count", "origin_message_id", "broker_message_id", "first_failure_at",
    "last_failure_at", "collected_at", "state", "state_reason",
)


def _copy_new_rows(rows: list[DeadLetter]) -> int:
    """PostgreSQL: COPY the batch into a scratch table, then insert what is new.

    An INSERT per row costs a round trip and a parse each; COPY streams the batch in
    one go, and INSERT ... ON CONFLICT DO NOTHING keeps the archive unique per broker
    message id (within the batch too). The scratch table lives only in this call; a
    failure rolls its creation back with the rest.
    """
    columns = ", ".join(_COPIED_COLUMNS)
    table = DeadLetter._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE archive_incoming ON COMMIT DROP AS "  # noqa: S608 - fixed names
            f"SELECT {columns} FROM {table} WITH NO DATA"
        )
        with cursor.copy(f"COPY archive_incoming ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((
                    row.cluster_id, row.subscription, row.source, row.payload, row.payload_preview,
                    row.payload_size, Jsonb(row.properties), row.retry_count, row.origin_message_id,
                    row.broker_message_id, row.first_failure_at, row.last_failure_at,
                    row.collected_at, DeadLetter.STATE_PARKED, "",
                ))
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM archive_incoming "  # noqa: S608
            "ON CONFLICT (cluster_id, broker_message_id) DO NOTHING"
        )
        inserted = cursor.rowcount
        # Dropped now, not only at commit: the caller may hold an outer transaction.
        cursor.execute("DROP TABLE archive_incoming")
        return inserted


def dead_letters_collect(*, cluster: Cluster, subscription: str, actor,
                         limit: int | None = None) -> int:
    """Move what waits in the subscription's DLQ into the archive; audited.

    Nothing is lost: the adapter acknowledges each batch only after `archive_store`
    committed it. A crash before the ack leaves the batch on the broker, and the next
    collect skips the rows already archived.
    """
    def sink(batch: Sequence[BrokerDeadLetter]) -> None:
        archive_store(cluster=cluster, letters=batch)

    try:
        with cluster_adapter(cluster) as adapter:
            moved = adapter.collect_dead_letters(
                subscription, sink, limit=limit, batch_size=settings.ARCHIVE_COLLECT_BATCH
            )
    except BrokerError as exc:
        audit_record(actor=actor, action="archive.collect", cluster=cluster,
                     subscription=subscription, result="error", detail=exc.message)
        raise
    audit_record(actor=actor, action="archive.collect", cluster=cluster,
                 subscription=subscription, count=moved)
    return moved


def dead_letters_discard(*, letter_ids: Sequence[int], actor, reason: str = "") -> int:
    """Mark parked or failed letters discarded (kept for the audit until purged)."""
    with transaction.atomic():
        letters = DeadLetter.objects.select_for_update().filter(
            pk__in=list(letter_ids),
            state__in=[DeadLetter.STATE_PARKED, DeadLetter.STATE_FAILED],
        )
        by_target: dict[tuple[int, str], int] = {}
        for cluster_id, subscription in letters.values_list("cluster_id", "subscription"):
            by_target[(cluster_id, subscription)] = by_target.get((cluster_id, subscription), 0) + 1
        changed = letters.update(
            state=DeadLetter.STATE_DISCARDED, state_changed_at=timezone.now(), state_reason=reason
        )
        clusters = Cluster.objects.in_bulk([cid for cid, _ in by_target])
        for (cluster_id, subscription), count in by_target.items():
            audit_record(actor=actor, action="archive.discard", cluster=clusters[cluster_id],
                         subscription=subscription, count=count, detail=reason)
    return changed


def dead_letters_discard_on_broker(*, cluster: Cluster, subscription: str, actor) -> int:
    """Drop what still waits in a DLQ without archiving it; audited."""
    try:
        with cluster_adapter(cluster) as adapter:
            dropped = adapter.discard_dead_letters(subscription)
    except BrokerError as exc:
        audit_record(actor=actor, action="dlq.discard", cluster=cluster,
                     subscription=subscription, result="error", detail=exc.message)
        raise
    audit_record(actor=actor, action="dlq.discard", cluster=cluster,
                 subscription=subscription, count=dropped)
    return dropped
