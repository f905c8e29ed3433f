"""Fixtures of the analytics tests: an export folder per test, archive rows on chosen days."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest


@pytest.fixture
def export_path(tmp_path, settings):
    """ANALYTICS_EXPORT_PATH pointed at a fresh folder for this test."""
    path = tmp_path / "analytics"
    settings.ANALYTICS_EXPORT_PATH = str(path)
    return path


@pytest.fixture
def letters_on(make_dead_letters):
    """letters_on(cluster, "2026-11-19 10:00", n, **overrides) -> rows collected at that time."""
    from console.archive.models import DeadLetter

    def make(cluster, when: str, n: int = 1, **overrides):
        rows = make_dead_letters(cluster, n, **overrides)
        collected = datetime.fromisoformat(when).replace(tzinfo=UTC)
        DeadLetter.objects.filter(pk__in=[r.pk for r in rows]).update(collected_at=collected)
        return list(DeadLetter.objects.filter(pk__in=[r.pk for r in rows]).order_by("id"))

    return make


def read_dataset(export_path) -> list[dict]:
    """Every exported row, with the partition it was found in."""
    import pyarrow.parquet as pq

    rows = []
    for file in sorted((export_path / "dead_letters").rglob("*.parquet")):
        day = file.parent.parent.name.split("=", 1)[1]
        cluster = int(file.parent.name.split("=", 1)[1])
        for row in pq.read_table(file).to_pylist():
            rows.append({**row, "partition": (day, cluster), "file": file.name})
    return rows
