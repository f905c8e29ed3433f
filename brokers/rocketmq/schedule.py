"""Delay levels and the retry schedule a failed message follows. Pure functions.

RocketMQ delays by *level*, not by duration: level n waits the n-th entry of
`DEFAULT_DELAY_LEVELS` (an operator may configure another list). A message that fails
for the (r+1)-th time (its `reconsume_times` is r) goes to `%RETRY%{group}` at level
`3 + r`, capped at the last level, or to `%DLQ%{group}` once r >= the group's maximum
(default 16). So with the default table retry 1 waits 10 s, retry 2 30 s, ... retry 16
waits 2 h, and a group with a higher maximum keeps 2 h for every later retry.

The console's dead-letter page shows `retry_schedule(...)`: each step's level, wait
and due time, so an operator sees when a message was (or will be) tried again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DEFAULT_MAX_RECONSUME_TIMES = 16
# The level of the first retry: RocketMQ's broker adds 3 to reconsumeTimes.
FIRST_RETRY_LEVEL = 3

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_LEVEL = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")


def parse_delay_levels(levels: str | Sequence[float] = DEFAULT_DELAY_LEVELS) -> tuple[float, ...]:
    """Seconds of each level (level 1 first) from "1s 5s 10s ..." or a list of seconds.

    Raises ValueError with the offending entry, so a bad configuration is a clear error.
    """
    if isinstance(levels, str):
        seconds = []
        for entry in levels.split():
            match = _LEVEL.match(entry.strip().lower())
            if not match:
                raise ValueError(f"delay level {entry!r} is not a duration like 500ms, 5s, 2m or 1h")
            seconds.append(float(match.group(1)) * _UNITS[match.group(2)])
    else:
        seconds = [float(value) for value in levels]
    if not seconds:
        raise ValueError("the delay level table is empty")
    if any(value < 0 for value in seconds):
        raise ValueError("a delay level cannot be negative")
    return tuple(seconds)


def level_delay(level: int, levels: Sequence[float]) -> float:
    """Seconds a message at `level` waits; levels past the table keep the last one."""
    if level < 1:
        return 0.0
    return float(levels[min(level, len(levels)) - 1])


def retry_level(reconsume_times: int, levels: Sequence[float], *, requested_level: int = 0) -> int:
    """The level of the copy sent back after a delivery with `reconsume_times` failed.

    `requested_level` > 0 is the level the consumer asked for; 0 means the default
    `3 + reconsume_times`. Capped at the last level of the table.
    """
    level = requested_level if requested_level > 0 else FIRST_RETRY_LEVEL + reconsume_times
    return min(level, len(levels))


@dataclass(frozen=True)
class RetryStep:
    """What happens after the delivery with `reconsume_times` fails.

    `destination` is "retry" or "dlq". For "retry": `level` and `wait_seconds` of the
    delayed copy and `due_at` (failure time + wait). For "dlq" level is 0 and the
    wait 0: the message waits for an operator.
    """

    reconsume_times: int
    destination: str
    level: int
    wait_seconds: float
    failed_at: datetime
    due_at: datetime | None


def retry_step(reconsume_times: int, *, failed_at: datetime,
               max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
               delay_levels: str | Sequence[float] = DEFAULT_DELAY_LEVELS,
               requested_level: int = 0) -> RetryStep:
    """The step one failure leads to (a negative requested level means straight to the DLQ)."""
    levels = parse_delay_levels(delay_levels)
    if reconsume_times >= max_reconsume_times or requested_level < 0:
        return RetryStep(reconsume_times, "dlq", 0, 0.0, failed_at, None)
    level = retry_level(reconsume_times, levels, requested_level=requested_level)
    wait = level_delay(level, levels)
    return RetryStep(reconsume_times, "retry", level, wait, failed_at,
                     failed_at + timedelta(seconds=wait))


def retry_schedule(*, first_failed_at: datetime,
                   max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
                   delay_levels: str | Sequence[float] = DEFAULT_DELAY_LEVELS,
                   processing_seconds: float = 0.0) -> list[RetryStep]:
    """Every step a message follows if each delivery fails, from its first failure.

    One step per failure: `max_reconsume_times` retries, then the DLQ. Each retry is
    assumed to fail `processing_seconds` after it was delivered, so the due times add
    up the way they would for a consumer that always fails (0: at once). A message
    that is already partway (its RECONSUME_TIMES > 0) follows the tail of this list.
    """
    levels = parse_delay_levels(delay_levels)
    steps = []
    failed_at = first_failed_at
    for reconsume_times in range(max_reconsume_times + 1):
        step = retry_step(reconsume_times, failed_at=failed_at, max_reconsume_times=max_reconsume_times,
                          delay_levels=levels)
        steps.append(step)
        if step.due_at is not None:
            failed_at = step.due_at + timedelta(seconds=processing_seconds)
    return steps


def dead_letter_retry_schedule(properties: Mapping[str, str], *,
                               delay_levels: str | Sequence[float] = DEFAULT_DELAY_LEVELS) -> list[RetryStep]:
    """The schedule a dead letter followed, from the properties it carries.

    Reads FIRST_FAILURE_AT (ms since the epoch) and RECONSUME_TIMES (on a DLQ copy:
    the number of failed deliveries, so the retries made are one fewer). Returns one
    step per failure, the last one "dlq"; due times assume each retry failed at once,
    so they are the earliest times the retries could have run. Empty when the
    properties do not say (a message that was not dead-lettered by a consumer).
    """
    try:
        first_ms = int(properties.get("FIRST_FAILURE_AT", "0"))
        failures = int(properties.get("RECONSUME_TIMES", "0"))
    except ValueError:
        return []
    if first_ms <= 0 or failures <= 0:
        return []
    first = datetime.fromtimestamp(first_ms / 1000, tz=UTC)
    return retry_schedule(first_failed_at=first, max_reconsume_times=failures - 1, delay_levels=delay_levels)
