"""The delay level table and the retry schedule (pure functions, the real numbers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from brokers.rocketmq.schedule import (
    DEFAULT_DELAY_LEVELS,
    dead_letter_retry_schedule,
    parse_delay_levels,
    retry_level,
    retry_schedule,
    retry_step,
)

FAILED = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_the_real_level_table_has_eighteen_levels_from_one_second_to_two_hours():
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert levels == (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


def test_retry_one_waits_ten_seconds_retry_two_thirty_and_retry_sixteen_two_hours():
    waits = [step.wait_seconds for step in retry_schedule(first_failed_at=FAILED)]
    assert waits[0] == 10
    assert waits[1] == 30
    assert waits[15] == 7200
    assert [step.level for step in retry_schedule(first_failed_at=FAILED)][:16] == list(range(3, 19))


def test_after_the_sixteenth_retry_fails_the_message_goes_to_the_dlq():
    steps = retry_schedule(first_failed_at=FAILED)
    assert len(steps) == 17
    assert all(step.destination == "retry" for step in steps[:16])
    assert steps[16].destination == "dlq"
    assert steps[16].due_at is None


def test_max_three_means_three_retries_then_the_dlq_so_four_deliveries():
    steps = retry_schedule(first_failed_at=FAILED, max_reconsume_times=3)
    assert [s.destination for s in steps] == ["retry", "retry", "retry", "dlq"]


def test_a_higher_max_keeps_two_hours_for_every_retry_past_the_sixteenth():
    steps = retry_schedule(first_failed_at=FAILED, max_reconsume_times=20)
    assert [s.wait_seconds for s in steps[15:20]] == [7200] * 5
    assert steps[20].destination == "dlq"


def test_due_times_add_up_from_the_first_failure():
    steps = retry_schedule(first_failed_at=FAILED, max_reconsume_times=3)
    assert steps[0].due_at == FAILED + timedelta(seconds=10)
    assert steps[1].due_at == FAILED + timedelta(seconds=40)
    assert steps[2].due_at == FAILED + timedelta(seconds=100)


def test_a_requested_level_wins_and_a_negative_level_goes_straight_to_the_dlq():
    assert retry_step(0, failed_at=FAILED, requested_level=1).wait_seconds == 1
    assert retry_step(0, failed_at=FAILED, requested_level=-1).destination == "dlq"
    assert retry_level(0, parse_delay_levels(), requested_level=40) == 18


def test_a_configured_table_is_used_and_a_bad_one_is_a_clear_error():
    levels = parse_delay_levels("100ms 1s 2s")
    assert levels == (0.1, 1.0, 2.0)
    assert retry_step(0, failed_at=FAILED, delay_levels="100ms 1s 2s").wait_seconds == 2.0
    with pytest.raises(ValueError, match="not a duration"):
        parse_delay_levels("1s 5 minutes")
    with pytest.raises(ValueError, match="empty"):
        parse_delay_levels("")


def test_a_dead_letters_schedule_is_read_from_its_properties():
    first_ms = int(FAILED.timestamp() * 1000)
    steps = dead_letter_retry_schedule({"FIRST_FAILURE_AT": str(first_ms), "RECONSUME_TIMES": "4"})
    assert [(s.destination, s.level, s.wait_seconds) for s in steps] == [
        ("retry", 3, 10), ("retry", 4, 30), ("retry", 5, 60), ("dlq", 0, 0)]
    assert steps[0].failed_at == FAILED
    assert dead_letter_retry_schedule({"tenant": "acme"}) == []
    assert dead_letter_retry_schedule({"FIRST_FAILURE_AT": "x", "RECONSUME_TIMES": "2"}) == []
