"""Writes on users: creating one with a role, issuing API tokens."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.authtoken.models import Token

from console.accounts.roles import ROLES, sync_role_groups
from console.audit.services import audit_record


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


def user_create(*, actor, username: str, password: str, role: str, email: str = ""):
    """A new user with a role, created by an admin (the API); audited.

    Unlike `user_create_with_role` (the set-up command, which also resets an existing
    user), an existing username is refused: creating must never change someone else.
    """
    with transaction.atomic():
        if get_user_model().objects.filter(username=username).exists():
            raise ValidationError({"username": "A user with that username already exists."})
        user = user_create_with_role(username=username, password=password, role=role, email=email)
        audit_record(actor=actor, action="user.create", detail=f"user={username} role={role}")
    return user
