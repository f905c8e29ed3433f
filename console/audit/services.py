"""Writing the audit log. Every service that changes a broker or the archive calls this."""

from __future__ import annotations

from console.audit.models import AuditEntry


def audit_record(
    *, actor, action: str, cluster=None, subscription: str = "", count: int = 0,
    result: str = AuditEntry.RESULT_OK, detail: str = "",
) -> AuditEntry:
    """Write one entry. `actor` is a user or None for the system (beat, workers)."""
    user = actor if getattr(actor, "is_authenticated", False) else None
    return AuditEntry.objects.create(
        actor=user,
        actor_name=user.get_username() if user else "system",
        action=action,
        cluster_name=getattr(cluster, "name", "") or "",
        subscription=subscription,
        count=count,
        result=result,
        detail=detail[:10_000],
    )
