"""The three roles, as Django groups holding permissions.

viewer reads everything but the audit log; operator also replays, discards, collects
and rebuilds; admin also manages clusters, users, schedules and reads the audit log.
Each role holds every permission of the roles below it.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)

VIEWER_PERMISSIONS = (
    "clusters.view_cluster",
    "clusters.view_registeredsubscription",
    "archive.view_deadletter",
)
OPERATOR_PERMISSIONS = VIEWER_PERMISSIONS + (
    "archive.replay_deadletter",
    "archive.discard_deadletter",
    "archive.collect_deadletter",
    "clusters.rebuild_cluster",
)
ADMIN_PERMISSIONS = OPERATOR_PERMISSIONS + (
    "clusters.add_cluster",
    "clusters.change_cluster",
    "clusters.delete_cluster",
    "clusters.add_registeredsubscription",
    "clusters.delete_registeredsubscription",
    "audit.view_auditentry",
    "auth.add_user",
    "auth.change_user",
    "django_celery_beat.add_periodictask",
    "django_celery_beat.change_periodictask",
    "django_celery_beat.delete_periodictask",
)
ROLE_PERMISSIONS = {VIEWER: VIEWER_PERMISSIONS, OPERATOR: OPERATOR_PERMISSIONS, ADMIN: ADMIN_PERMISSIONS}

# Permissions other apps add to a role (the replay engine, the analytics dashboard)
# are appended here by those apps' AppConfig.ready, before migrate syncs the groups.
EXTRA_ROLE_PERMISSIONS: dict[str, list[str]] = {VIEWER: [], OPERATOR: [], ADMIN: []}


def role_permissions(role: str) -> tuple[str, ...]:
    below = ROLES[: ROLES.index(role) + 1]
    extra = tuple(perm for r in below for perm in EXTRA_ROLE_PERMISSIONS[r])
    return ROLE_PERMISSIONS[role] + extra


def sync_role_groups(**_kwargs: object) -> None:
    """Make each role group hold exactly its permissions (run after every migrate)."""
    for role in ROLES:
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for dotted in role_permissions(role):
            app_label, codename = dotted.split(".", 1)
            permission = Permission.objects.filter(
                content_type__app_label=app_label, codename=codename
            ).first()
            if permission is not None:
                wanted.append(permission)
        group.permissions.set(wanted)


def user_role(user) -> str | None:
    """The highest role a user holds; superusers are admins."""
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return ADMIN
    names = set(user.groups.values_list("name", flat=True))
    for role in reversed(ROLES):
        if role in names:
            return role
    return None
