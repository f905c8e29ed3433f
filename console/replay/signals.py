"""Keep each cluster's auto-collect beat entry in step with the cluster itself.

Signals, because clusters are created and edited by their own app, which should not
need to know that the replay engine schedules collection.
"""

from __future__ import annotations

from django.db import transaction


def cluster_saved(sender, instance, raw: bool = False, **kwargs) -> None:
    if raw:
        return
    from console.replay.services import auto_collect_sync

    transaction.on_commit(lambda: auto_collect_sync(cluster=instance))


def cluster_deleted(sender, instance, **kwargs) -> None:
    from console.replay.services import auto_collect_forget

    auto_collect_forget(cluster_id=instance.pk)
