from __future__ import annotations

from datetime import date

import pytest

from pipeline.jobs import overview
from tests.pipeline.conftest import at


def test_overview_counts_states_per_subscription_source_and_day(letters):
    day1, day2 = at("2026-11-19 08:00:00"), at("2026-11-20 23:59:59")
    df = letters(
        [
            {"collected_at": day1, "state": "replayed"},
            {"collected_at": day1, "state": "replayed"},
            {"collected_at": day1, "state": "failed"},
            {"collected_at": day1, "state": "discarded"},
            {"collected_at": day1, "state": "parked"},
            {"collected_at": day2, "state": "parked"},
            {"collected_at": day2, "state": "replaying"},
            {"collected_at": day2, "subscription": "billing-sub", "state": "parked"},
            {"collected_at": day2, "cluster_id": 2, "cluster_name": "eu", "state": "replayed"},
        ]
    )

    rows = {(r.cluster_id, r.subscription, r.day): r.asDict() for r in overview.transform(df).collect()}

    assert set(rows) == {
        (1, "orders-sub", date(2026, 11, 19)),
        (1, "orders-sub", date(2026, 11, 20)),
        (1, "billing-sub", date(2026, 11, 20)),
        (2, "orders-sub", date(2026, 11, 20)),
    }
    first = rows[(1, "orders-sub", date(2026, 11, 19))]
    assert (
        first["dead_letters"],
        first["replayed"],
        first["replay_failed"],
        first["discarded"],
        first["parked"],
        first["replaying"],
    ) == (5, 2, 1, 1, 1, 0)
    # 2 replayed out of 3 attempted (one failed); parked and discarded are not attempts.
    assert first["replay_success_rate"] == pytest.approx(2 / 3)
    second = rows[(1, "orders-sub", date(2026, 11, 20))]
    assert (second["dead_letters"], second["parked"], second["replaying"]) == (2, 1, 1)
    assert second["replay_success_rate"] is None
    assert rows[(2, "orders-sub", date(2026, 11, 20))]["cluster_name"] == "eu"
    assert rows[(2, "orders-sub", date(2026, 11, 20))]["replay_success_rate"] == 1.0


def test_overview_day_is_the_utc_collection_day(letters):
    df = letters([{"collected_at": at("2026-11-20 23:59:59")}, {"collected_at": at("2026-11-21 00:00:00")}])

    days = sorted(r.day for r in overview.transform(df).collect())

    assert days == [date(2026, 11, 20), date(2026, 11, 21)]
