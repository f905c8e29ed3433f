"""The analytics settings (console/settings.py, from environment variables listed in
docs/pipeline.md), checked and turned into what the pipeline needs.

Read on use rather than at import, so a test or a long-lived worker sees the value
in force now.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Transient errors are what a nightly replay usually puts back.
DEFAULT_REPLAY_POLICY = {
    "states": ["parked"],
    "reason_matches": "timeout|unavailable|connection|temporar",
    "limit": 10_000,
}


def _env(name: str, default: str) -> str:
    return str(getattr(settings, name, "") or "").strip() or default


def export_path() -> str:
    """Where the Parquet export and the job results live: a local folder or any
    Hadoop-compatible URI (s3a://bucket/redrive, hdfs://namenode/redrive)."""
    return _env("ANALYTICS_EXPORT_PATH", str(settings.VAR_DIR / "analytics"))


def spark_master() -> str:
    return _env("ANALYTICS_SPARK_MASTER", "local[*]")


def driver_memory() -> str:
    return _env("ANALYTICS_SPARK_DRIVER_MEMORY", "1g")


def executor_memory() -> str:
    return _env("ANALYTICS_SPARK_EXECUTOR_MEMORY", "1g")


def business_key() -> str:
    """Property holding a business key (order id...) for duplicate detection; empty: none."""
    return _env("ANALYTICS_BUSINESS_KEY", "")


def replay_policy() -> dict:
    raw = _env("ANALYTICS_REPLAY_POLICY", "")
    if not raw:
        return dict(DEFAULT_REPLAY_POLICY)
    try:
        policy = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"ANALYTICS_REPLAY_POLICY is not JSON: {exc}") from exc
    if not isinstance(policy, dict):
        raise ImproperlyConfigured("ANALYTICS_REPLAY_POLICY must be a JSON object")
    return policy


def nightly_crontab() -> tuple[str, str]:
    """(minute, hour) of the nightly run, UTC; ANALYTICS_NIGHTLY_AT is "HH:MM"."""
    value = _env("ANALYTICS_NIGHTLY_AT", "02:30")
    try:
        hour, minute = (int(part) for part in value.split(":"))
    except ValueError as exc:
        raise ImproperlyConfigured(f"ANALYTICS_NIGHTLY_AT must be HH:MM, got {value!r}") from exc
    if not (0 <= hour < 24 and 0 <= minute < 60):
        raise ImproperlyConfigured(f"ANALYTICS_NIGHTLY_AT must be HH:MM, got {value!r}")
    return str(minute), str(hour)


def run_timeout_seconds() -> int:
    """How long spark-submit may take; under Celery's hard limit so the run is marked failed."""
    return int(_env("ANALYTICS_RUN_TIMEOUT_SECONDS", "3000"))
