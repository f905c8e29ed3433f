"""Replay candidates: the letters a replay policy would put back, as a list of ids.

The replay engine takes the ids as an explicit selection. The policy is data (a
dict, from JSON), so the console, a command line and spark-submit pass the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.jobs.reasons import with_reason
from pipeline.schema import PARKED


@dataclass(frozen=True)
class ReplayPolicy:
    """Which archived letters to put back.

    Every field narrows the selection; an empty tuple or None means "any".
    `reason_matches` is a case-insensitive regular expression tried on the error
    class and on the raw error text (e.g. "timeout|unavailable" for transient errors).
    """

    states: tuple[str, ...] = (PARKED,)
    cluster_ids: tuple[int, ...] = ()
    subscriptions: tuple[str, ...] = ()
    error_classes: tuple[str, ...] = ()
    reason_matches: str = ""
    max_retry_count: int | None = None
    collected_before: datetime | None = None
    limit: int | None = 10_000

    @classmethod
    def from_dict(cls, data: dict) -> ReplayPolicy:
        """Build a policy from JSON-ish data; unknown keys are an error, not ignored."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown replay policy keys: {', '.join(sorted(unknown))}")
        values = dict(data)
        for name in ("states", "cluster_ids", "subscriptions", "error_classes"):
            if name in values:
                if isinstance(values[name], str | int):
                    raise ValueError(f"replay policy {name} must be a list")
                values[name] = tuple(values[name])
        if values.get("collected_before"):
            values["collected_before"] = datetime.fromisoformat(str(values["collected_before"]))
        for name in ("max_retry_count", "limit"):
            if values.get(name) is not None:
                values[name] = int(values[name])
                if values[name] < 0:
                    raise ValueError(f"replay policy {name} must not be negative")
        return cls(**values)

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("states", "cluster_ids", "subscriptions", "error_classes"):
            data[name] = list(data[name])
        if self.collected_before:
            data["collected_before"] = self.collected_before.isoformat()
        return data


def transform(letters: DataFrame, policy: ReplayPolicy) -> DataFrame:
    """(id, cluster_id, subscription), lowest id first, at most `policy.limit` rows."""
    selected = letters
    if policy.states:
        selected = selected.where(F.col("state").isin(list(policy.states)))
    if policy.cluster_ids:
        selected = selected.where(F.col("cluster_id").isin(list(policy.cluster_ids)))
    if policy.subscriptions:
        selected = selected.where(F.col("subscription").isin(list(policy.subscriptions)))
    if policy.max_retry_count is not None:
        selected = selected.where(F.col("retry_count") <= policy.max_retry_count)
    if policy.collected_before is not None:
        selected = selected.where(F.col("collected_at") < F.lit(policy.collected_before))
    if policy.error_classes or policy.reason_matches:
        selected = with_reason(selected)
        if policy.error_classes:
            selected = selected.where(F.col("error_class").isin(list(policy.error_classes)))
        if policy.reason_matches:
            pattern = "(?i)" + policy.reason_matches
            selected = selected.where(
                F.col("error_class").rlike(pattern) | F.col("error_text").rlike(pattern)
            )
    selected = selected.select("id", "cluster_id", "subscription").orderBy("id")
    if policy.limit is not None:
        selected = selected.limit(policy.limit)
    return selected
