"""A RocketMQ-style broker built on Redis Streams, and the console adapter for it.

RocketMQ's retry model, kept faithfully, on a store we run:

- a topic is a Redis stream; a consumer group is a Redis consumer group on it;
- the pending-entries list (PEL) is the in-flight state: a message leaves it only when
  the consumer acknowledges it or its retry/dead-letter copy is stored;
- a failed message is sent back as a *new* message to `%RETRY%{group}` as a delayed
  message (delay level `3 + reconsumeTimes`) or to `%DLQ%{group}` past the maximum;
- delayed messages wait in a sorted set until the delay scheduler moves them to their
  stream;
- the simple consumer's invisible duration is a deadline per received message.

Modules: `message` (the message and its wire form), `naming` (Redis keys), `topology`
(groups and their retry/DLQ streams), `schedule` (delay levels and the retry schedule,
pure functions), `connection`, `delay` (delay set and scheduler), `retry` (sending a
failed message back), `producer` and `outbox`, `consumer` (push consumer), `simple`
(simple consumer), `adapter` (the console side).
This package is the only place that imports redis-py. See docs/rocketmq.md.
"""

from __future__ import annotations

from brokers.rocketmq.schedule import (
    DEFAULT_DELAY_LEVELS,
    RetryStep,
    dead_letter_retry_schedule,
    retry_schedule,
    retry_step,
)

__all__ = ["DEFAULT_DELAY_LEVELS", "RetryStep", "dead_letter_retry_schedule", "retry_schedule", "retry_step"]
