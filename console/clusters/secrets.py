"""Broker credentials at rest: Fernet with CREDENTIALS_KEY from the environment."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


def encrypt_secret(plain: str) -> str:
    if not plain:
        return ""
    return Fernet(settings.CREDENTIALS_KEY).encrypt(plain.encode()).decode()


def decrypt_secret(cipher: str) -> str:
    """The plain secret; a value written under another key reads as empty (the
    cluster then fails its connection test and the admin re-enters it)."""
    if not cipher:
        return ""
    try:
        return Fernet(settings.CREDENTIALS_KEY).decrypt(cipher.encode()).decode()
    except InvalidToken:
        return ""
