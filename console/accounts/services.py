"""Writes on users: creating one with a role, issuing API tokens."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from rest_framework.authtoken.models import Token

from console.accounts.roles import ROLES, sync_role_groups


def user_create_with_role(*, username: str, password: str, role: str, email: str = ""):
    """Create (or update the password and role of) a user holding exactly one role."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    user_model = get_user_model()
    with transaction.atomic():
        if not Group.objects.filter(name=role).exists():
            sync_role_groups()
        user, _ = user_model.objects.get_or_create(username=username, defaults={"email": email})
        user.set_password(password)
        user.is_staff = role == "admin"
        user.save()
        user.groups.set(Group.objects.filter(name=role))
    return user


def user_token_issue(*, user) -> str:
    """A fresh API token for the user (any earlier one stops working)."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user).key
