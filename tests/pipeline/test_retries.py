from __future__ import annotations

from datetime import timedelta

from pipeline.jobs import retries
from tests.pipeline.conftest import at


def test_retry_histogram_counts_letters_per_retry_count_and_subscription(letters):
    df = letters(
        [{"retry_count": n} for n in (0, 3, 3, 16, 16, 16)]
        + [{"retry_count": 3, "subscription": "billing-sub"}]
    )

    rows = {(r.subscription, r.retry_count): r.letters for r in retries.histogram(df).collect()}

    assert rows == {("orders-sub", 0): 1, ("orders-sub", 3): 2, ("orders-sub", 16): 3, ("billing-sub", 3): 1}


def test_time_to_dlq_percentiles_use_nearest_rank_over_whole_seconds(letters):
    start = at("2026-11-20 10:00:00")
    # Ten letters taking 1..10 s from first failure to dead-lettering, plus one whose
    # times are unknown (not measured).
    rows = [
        {"first_failure_at": start, "last_failure_at": start + timedelta(seconds=s)} for s in range(1, 11)
    ]
    rows.append({"first_failure_at": None, "last_failure_at": start})
    # Another subscription: 100 letters, durations 0..99 s.
    rows += [
        {
            "subscription": "billing-sub",
            "first_failure_at": start,
            "last_failure_at": start + timedelta(seconds=s, milliseconds=400),
        }
        for s in range(100)
    ]

    result = {r.subscription: r.asDict() for r in retries.time_to_dlq(letters(rows)).collect()}

    orders = result["orders-sub"]
    # n=10: p50 = 5th smallest (5 s), p90 = 9th (9 s), p99 = ceil(9.9) = 10th (10 s).
    assert (
        orders["letters"],
        orders["min_seconds"],
        orders["p50"],
        orders["p90"],
        orders["p99"],
        orders["max_seconds"],
    ) == (10, 1, 5, 9, 10, 10)
    billing = result["billing-sub"]
    # n=100, values 0..99 (the 400 ms are cut): pN = the N-th smallest = N - 1.
    assert (billing["letters"], billing["p50"], billing["p90"], billing["p99"]) == (100, 49, 89, 98)


def test_time_to_dlq_ignores_letters_whose_clock_went_backwards(letters):
    start = at("2026-11-20 10:00:00")
    df = letters(
        [
            {"first_failure_at": start, "last_failure_at": start + timedelta(seconds=30)},
            {"first_failure_at": start, "last_failure_at": start - timedelta(seconds=30)},
        ]
    )

    (row,) = retries.time_to_dlq(df).collect()

    assert (row.letters, row.p50, row.p99) == (1, 30, 30)
