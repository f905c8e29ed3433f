from django.apps import AppConfig

# What each role may do with the replay engine (console.accounts.roles merges these).
REPLAY_ROLE_PERMISSIONS = {
    "viewer": ["replay.view_replayjob", "replay.view_replaypolicy", "replay.view_retentionsetting"],
    "operator": ["replay.add_replayjob", "replay.control_replayjob"],
    "admin": ["replay.add_replaypolicy", "replay.change_replaypolicy", "replay.delete_replaypolicy",
              "replay.change_retentionsetting"],
}


class ReplayConfig(AppConfig):
    """Replay engine: jobs that resend dead letters, their ledger, schedules."""

    name = "console.replay"
    label = "replay"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from console.accounts.roles import EXTRA_ROLE_PERMISSIONS
        from console.clusters.models import Cluster
        from console.replay import signals

        for role, permissions in REPLAY_ROLE_PERMISSIONS.items():
            for permission in permissions:
                if permission not in EXTRA_ROLE_PERMISSIONS[role]:
                    EXTRA_ROLE_PERMISSIONS[role].append(permission)
        post_save.connect(signals.cluster_saved, sender=Cluster, dispatch_uid="replay-auto-collect-save")
        post_delete.connect(signals.cluster_deleted, sender=Cluster,
                            dispatch_uid="replay-auto-collect-delete")
