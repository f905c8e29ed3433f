"""Helpers for the API tests: every /api/v1/ URL the project routes, and a clean throttle."""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern

_ROUTE_PARAMETER = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")
_REGEX_GROUP = re.compile(r"\(\?P<\w+>(?:[^()]|\([^()]*\))*\)")
_SAMPLE_BY_CONVERTER = {"int": "1", "str": "x", "slug": "x", "uuid": str(uuid.UUID(int=1)), "path": "x"}


def _concrete(pattern) -> str:
    """A path matching one piece of a URL pattern, with sample values for its parameters."""
    if isinstance(pattern, RoutePattern):
        return _ROUTE_PARAMETER.sub(
            lambda m: _SAMPLE_BY_CONVERTER.get(m.group("converter") or "str", "1"), str(pattern)
        )
    if isinstance(pattern, RegexPattern):
        text = _REGEX_GROUP.sub("1", pattern.regex.pattern)
        return text.lstrip("^").rstrip("$").replace(r"\Z", "").replace("\\", "")
    raise AssertionError(f"unknown URL pattern type {type(pattern)!r}")


def _walk(patterns, prefix: str):
    for entry in patterns:
        here = prefix + _concrete(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, here)
        elif isinstance(entry, URLPattern):
            yield "/" + here, entry


def api_v1_endpoints() -> list[tuple[str, URLPattern]]:
    """(a concrete URL, its pattern) for every pattern routed under /api/v1/, whoever wrote it."""
    found = [(url, entry) for url, entry in _walk(get_resolver().url_patterns, "")
             if url.startswith("/api/v1/")]
    assert found, "no /api/v1/ endpoint found: the walk is broken"
    return found


@pytest.fixture(autouse=True)
def _fresh_throttle():
    # The token endpoint's throttle counts in the cache, which outlives a single test.
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _quick_password_hashing(settings):
    # Every test makes users; the production hasher's slowness guards passwords, not tests.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def unique():
    """unique("name") -> a name no parallel test run uses."""
    return lambda stem: f"{stem}-{uuid.uuid4().hex[:10]}"
