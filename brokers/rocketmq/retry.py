"""Sending a failed message back: the consumer-side retry every consumer mode uses.

On failure RocketMQ stores a *new* message (new id, origin id kept, reconsumeTimes + 1)
in `%RETRY%{group}` as a delayed message at level `3 + reconsumeTimes`, or in
`%DLQ%{group}` once reconsumeTimes >= the maximum (or when the consumer asks for a
negative level). Here the copy is stored and the original acknowledged by one Lua
script, copy first: a crash or error before the script ran leaves the original in the
group's pending list (delivered again), and after it ran the copy exists. So a failed
message is always in at least one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from brokers.base import BrokerError
from brokers.rocketmq.connection import Connection, translate
from brokers.rocketmq.delay import delayed_args
from brokers.rocketmq.message import Message, encode, new_message_id, now_ms
from brokers.rocketmq.naming import dlq_topic, retry_topic
from brokers.rocketmq.schedule import level_delay, retry_level


@dataclass(frozen=True)
class SentBack:
    """Where the copy of a failed message went: "retry" (with level and due time) or "dlq"."""

    destination: str
    topic: str
    message_id: str
    level: int = 0
    due_at_ms: int = 0


def failure_copy(message: Message, *, group: str, topic: str, level: int = 0, reason: str = "",
                 now: int | None = None) -> Message:
    """The new message stored for a failed delivery: new id, origin kept, count + 1."""
    now = now if now is not None else now_ms()
    return replace(
        message,
        topic=topic,
        message_id=new_message_id(),
        origin_message_id=message.origin_message_id or message.message_id,
        real_topic=message.source_topic,
        reconsume_times=message.reconsume_times + 1,
        delay_level=level,
        first_failure_at_ms=message.first_failure_at_ms or now,
        last_failure_at_ms=now,
        failure_reason=reason[:500],
        consumer_group=group,
        entry_id="",
        stream="",
        delivery_count=0,
    )


def _plan(connection: Connection, message: Message, *, group: str, max_reconsume_times: int,
          requested_level: int, reason: str, acknowledge: bool, now: int):
    """(outcome, script, keys, args) that store the copy and acknowledge the original."""
    ack_stream = message.stream if acknowledge and message.entry_id else ""
    entry_id = message.entry_id if ack_stream else ""
    if message.reconsume_times >= max_reconsume_times or requested_level < 0:
        copy = failure_copy(message, group=group, topic=dlq_topic(group), reason=reason, now=now)
        fields: list = []
        for name, value in encode(copy).items():
            fields.extend((name, value))
        return (SentBack("dlq", copy.topic, copy.message_id), connection.store_now,
                [connection.keys.stream(copy.topic), ack_stream], [group, entry_id, *fields])
    level = retry_level(message.reconsume_times, connection.delay_levels, requested_level=requested_level)
    copy = failure_copy(message, group=group, topic=retry_topic(group), level=level, reason=reason, now=now)
    due = now + int(level_delay(level, connection.delay_levels) * 1000)
    script_keys, args = delayed_args(connection, copy, due, ack_stream=ack_stream, group=group,
                                     entry_id=entry_id)
    outcome = SentBack("retry", copy.topic, copy.message_id, level, due)
    return outcome, connection.store_delayed, script_keys, args


def send_back(connection: Connection, message: Message, *, group: str, max_reconsume_times: int,
              requested_level: int = 0, reason: str = "", acknowledge: bool = True) -> SentBack:
    """Store the retry or dead-letter copy of `message` and acknowledge the original.

    `message` is a delivery of `group` (its `stream` and `entry_id` say which entry to
    acknowledge; `acknowledge=False` or no entry id: nothing to acknowledge). Raises
    BrokerError if Redis refused or could not be reached; then nothing was acknowledged.
    """
    outcome, script, script_keys, args = _plan(
        connection, message, group=group, max_reconsume_times=max_reconsume_times,
        requested_level=requested_level, reason=reason, acknowledge=acknowledge, now=now_ms())
    with connection.errors():
        script(keys=script_keys, args=args)
    return outcome


def send_back_many(connection: Connection, failures: Sequence[tuple[Message, int, str]], *, group: str,
                   max_reconsume_times: int) -> list[SentBack | BrokerError]:
    """`send_back` for many (message, requested level, reason) in one round trip.

    Each message still has its own script, so each is atomic on its own: one that
    fails (its result is the BrokerError) leaves its original pending, as `send_back`.
    """
    now = now_ms()
    plans = [_plan(connection, message, group=group, max_reconsume_times=max_reconsume_times,
                   requested_level=level, reason=reason, acknowledge=True, now=now)
             for message, level, reason in failures]
    try:
        with connection.errors():
            pipe = connection.client.pipeline(transaction=False)
            for _outcome, script, script_keys, args in plans:
                script(keys=script_keys, args=args, client=pipe)
            answers = pipe.execute(raise_on_error=False)
    except BrokerError as exc:
        return [exc] * len(plans)
    return [translate(answer, connection.where) if isinstance(answer, Exception) else plan[0]
            for plan, answer in zip(plans, answers, strict=True)]
