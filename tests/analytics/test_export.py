from __future__ import annotations

from collections import Counter

import pytest
from django.utils import timezone

from console.analytics import services
from console.analytics.models import ExportBatch, ExportLease
from console.archive.models import DeadLetter
from tests.analytics.conftest import read_dataset


def _ids_per_partition(export_path) -> Counter:
    return Counter((row["partition"], row["id"]) for row in read_dataset(export_path))


def test_export_writes_every_letter_once_partitioned_by_day_and_cluster(
    export_path, make_cluster, letters_on
):
    prod, eu = make_cluster(name="prod"), make_cluster(name="eu")
    a = letters_on(prod, "2026-11-19 10:00", 3, properties={"error": "TimeoutException", "attempt": 3})
    b = letters_on(prod, "2026-11-20 23:59", 2)
    c = letters_on(eu, "2026-11-20 00:00", 1)

    result = services.analytics_export()

    rows = read_dataset(export_path)
    assert (result.rows, result.partitions) == (6, 3)
    assert {row["id"]: row["partition"] for row in rows} == {
        **{r.pk: ("2026-11-19", prod.pk) for r in a},
        **{r.pk: ("2026-11-20", prod.pk) for r in b},
        **{r.pk: ("2026-11-20", eu.pk) for r in c},
    }
    first = next(row for row in rows if row["id"] == a[0].pk)
    # Properties travel as text; non-string JSON values are serialised.
    assert dict(first["properties"]) == {"error": "TimeoutException", "attempt": "3"}
    assert (first["cluster_name"], first["state"], first["retry_count"]) == ("prod", "parked", 3)


def test_export_twice_adds_only_what_changed_and_never_duplicates(export_path, make_cluster, letters_on):
    cluster = make_cluster()
    old = letters_on(cluster, "2026-11-19 10:00", 2)
    services.analytics_export()
    files_before = {p.relative_to(export_path) for p in (export_path / "dead_letters").rglob("*.parquet")}

    assert services.analytics_export().rows == 0  # nothing changed: nothing rewritten
    new = letters_on(cluster, "2026-11-20 10:00", 2)
    DeadLetter.objects.filter(pk=old[0].pk).update(state="replayed", state_changed_at=timezone.now())
    result = services.analytics_export()

    per_partition = _ids_per_partition(export_path)
    assert set(per_partition.values()) == {1}
    assert len(per_partition) == 4
    # Both partitions were rewritten (one for the new rows, one for the state change),
    # each now holding a single file named after the new batch.
    assert result.partitions == 2
    files_after = {p.relative_to(export_path) for p in (export_path / "dead_letters").rglob("*.parquet")}
    assert len(files_after) == 2 and not files_after & files_before
    states = {row["id"]: row["state"] for row in read_dataset(export_path)}
    assert states[old[0].pk] == "replayed" and states[new[0].pk] == "parked"


def test_letters_purged_from_the_archive_leave_the_export(export_path, make_cluster, letters_on):
    cluster = make_cluster()
    kept = letters_on(cluster, "2026-11-19 10:00", 2)
    gone = letters_on(cluster, "2026-11-18 10:00", 2)
    services.analytics_export()

    DeadLetter.objects.filter(pk__in=[gone[0].pk, gone[1].pk, kept[0].pk]).delete()
    services.analytics_export()

    assert [row["id"] for row in read_dataset(export_path)] == [kept[1].pk]
    assert not (export_path / "dead_letters" / "date=2026-11-18").exists() or not any(
        (export_path / "dead_letters" / "date=2026-11-18").rglob("*.parquet")
    )


class Crash(Exception):
    pass


def test_a_crash_mid_export_leaves_a_state_the_next_export_finishes(export_path, make_cluster, letters_on):
    cluster = make_cluster()
    letters_on(cluster, "2026-11-18 10:00", 2)
    letters_on(cluster, "2026-11-19 10:00", 2)
    letters_on(cluster, "2026-11-20 10:00", 2)
    services.analytics_export()
    for day in ("2026-11-18", "2026-11-19", "2026-11-20"):
        DeadLetter.objects.filter(collected_at__date=day).update(
            state="discarded", state_changed_at=timezone.now()
        )
    staged = []

    def crash_after_first(partition):
        staged.append(partition)
        raise Crash("worker died")

    with pytest.raises(Crash):
        services.analytics_export(on_partition_staged=crash_after_first)

    # The crashed batch is recorded as unfinished; the dataset still holds the previous,
    # complete export (nothing published yet), each row once.
    assert ExportBatch.objects.filter(status=ExportBatch.WRITING).count() == 1
    assert set(_ids_per_partition(export_path).values()) == {1}
    assert {row["state"] for row in read_dataset(export_path)} == {"parked"}

    crashed = ExportBatch.objects.get(status=ExportBatch.WRITING)
    services.analytics_export()

    crashed.refresh_from_db()
    assert crashed.status == ExportBatch.PUBLISHED and crashed.rows == 6
    assert not ExportBatch.objects.exclude(status=ExportBatch.PUBLISHED).exists()
    per_partition = _ids_per_partition(export_path)
    assert len(per_partition) == 6 and set(per_partition.values()) == {1}
    assert {row["state"] for row in read_dataset(export_path)} == {"discarded"}
    assert not any((export_path / "_staging").rglob("*.parquet"))


def test_a_crash_while_publishing_is_finished_without_duplicates(export_path, make_cluster, letters_on):
    cluster = make_cluster()
    letters_on(cluster, "2026-11-19 10:00", 3)
    services.analytics_export()
    letters_on(cluster, "2026-11-19 11:00", 1)
    # Stage a batch completely, then stop before publishing: what a crash right
    # after staging leaves.
    filesystem, root = services.storage.resolve(str(export_path))
    holder = "crashed-worker"
    services._lease_take(holder)
    batch = ExportBatch.objects.create(
        watermark=timezone.now(), partitions=[{"cluster_id": cluster.pk, "day": "2026-11-19", "rows": None}]
    )
    services._write_batch(batch, filesystem, root, holder, None)
    services._lease_release(holder)

    services.analytics_export()

    per_partition = _ids_per_partition(export_path)
    assert len(per_partition) == 4 and set(per_partition.values()) == {1}


def test_a_second_export_while_one_holds_the_lease_is_refused(export_path, make_cluster, letters_on):
    letters_on(make_cluster(), "2026-11-19 10:00", 1)
    ExportLease.objects.create(
        pk=1, holder="someone", lease_until=timezone.now() + timezone.timedelta(minutes=5)
    )

    with pytest.raises(services.ExportBusy):
        services.analytics_export()

    assert not (export_path / "dead_letters").exists()
    # A lease that ran out (its exporter died) is taken over.
    ExportLease.objects.filter(pk=1).update(lease_until=timezone.now() - timezone.timedelta(seconds=1))
    assert services.analytics_export().rows == 1
