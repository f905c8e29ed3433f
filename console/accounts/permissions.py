"""API permission: reads need a view permission, writes the permission the view names.

An API view says what it needs with `read_permission` and `write_permission` (dotted
Django permissions). A view that names neither is readable by any role holder and
writable by nobody, so a forgotten attribute fails closed.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from console.accounts.roles import user_role


class RolePermission(BasePermission):
    message = "Your role does not allow this action."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated) or user_role(user) is None:
            return False
        if request.method in SAFE_METHODS:
            needed = getattr(view, "read_permission", None)
        else:
            needed = getattr(view, "write_permission", None)
            if needed is None:
                return False
        return needed is None or user.has_perm(needed)
