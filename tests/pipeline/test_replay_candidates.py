from __future__ import annotations

import pytest

from pipeline.jobs.replay_candidates import ReplayPolicy, transform
from tests.pipeline.conftest import at


@pytest.fixture
def archive(letters):
    return letters(
        [
            {
                "id": 1,
                "state": "parked",
                "properties": {"error": "TimeoutException: 30 s"},
                "retry_count": 16,
            },
            {
                "id": 2,
                "state": "parked",
                "properties": {"error_message": "service unavailable"},
                "retry_count": 2,
            },
            {"id": 3, "state": "replayed", "properties": {"error": "TimeoutException"}},
            {"id": 4, "state": "failed", "properties": {"error": "TimeoutException"}},
            {"id": 5, "state": "parked", "properties": {"error": "ValidationError: bad sku"}},
            {
                "id": 6,
                "state": "parked",
                "subscription": "billing-sub",
                "properties": {"error": "TimeoutException"},
                "collected_at": at("2026-11-21 09:00:00"),
            },
            {"id": 7, "state": "discarded", "properties": {"error": "TimeoutException"}},
        ]
    )


def _ids(df) -> list[int]:
    return [r.id for r in df.collect()]


def test_default_policy_takes_every_parked_letter_lowest_id_first(archive):
    assert _ids(transform(archive, ReplayPolicy())) == [1, 2, 5, 6]


def test_policy_filters_by_reason_subscription_retries_age_and_limit(archive):
    transient = ReplayPolicy(states=("parked", "failed"), reason_matches="timeout|unavailable")
    assert _ids(transform(archive, transient)) == [1, 2, 4, 6]
    assert _ids(transform(archive, ReplayPolicy(subscriptions=("billing-sub",)))) == [6]
    assert _ids(transform(archive, ReplayPolicy(error_classes=("ValidationError",)))) == [5]
    assert _ids(transform(archive, ReplayPolicy(max_retry_count=2))) == [2, 5, 6]
    assert _ids(transform(archive, ReplayPolicy(collected_before=at("2026-11-21 00:00:00")))) == [1, 2, 5]
    assert _ids(transform(archive, ReplayPolicy(limit=2))) == [1, 2]


def test_policy_from_json_rejects_unknown_keys_and_bad_values():
    policy = ReplayPolicy.from_dict(
        {
            "states": ["parked"],
            "subscriptions": ["a"],
            "limit": "5",
            "collected_before": "2026-11-21T00:00:00+00:00",
        }
    )
    assert (policy.subscriptions, policy.limit, policy.collected_before) == (
        ("a",),
        5,
        at("2026-11-21 00:00:00"),
    )
    assert ReplayPolicy.from_dict(policy.to_dict()) == policy
    with pytest.raises(ValueError, match="unknown replay policy keys: color"):
        ReplayPolicy.from_dict({"color": "red"})
    with pytest.raises(ValueError, match="must be a list"):
        ReplayPolicy.from_dict({"subscriptions": "orders"})
    with pytest.raises(ValueError, match="must not be negative"):
        ReplayPolicy.from_dict({"limit": -1})
