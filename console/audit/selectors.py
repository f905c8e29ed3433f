from __future__ import annotations

import csv
from collections.abc import Iterator

from console.audit.models import AuditEntry

CSV_COLUMNS = ("created_at", "actor", "action", "cluster", "subscription", "count", "result", "detail")


def audit_entry_list(*, action: str = "", actor: str = ""):
    entries = AuditEntry.objects.all()
    if action:
        entries = entries.filter(action=action)
    if actor:
        entries = entries.filter(actor_name=actor)
    return entries


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_safe(value: object) -> str:
    # A spreadsheet would run a cell starting with = + - @ as a formula.
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def audit_csv_rows(entries) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for entry in entries.iterator(chunk_size=2000):
        yield writer.writerow(
            [
                entry.created_at.isoformat(), _csv_safe(entry.actor_name), entry.action,
                _csv_safe(entry.cluster_name), _csv_safe(entry.subscription), entry.count,
                entry.result, _csv_safe(entry.detail),
            ]
        )
