"""Headers Redrive puts on messages, and the string view of a message's headers.

The retry count is Redrive's own header (`x-retry-count`), not RabbitMQ's `x-death`:
how `x-death` counts changed across RabbitMQ versions (and it is only added when the
broker dead-letters, not when a consumer republishes), so it is shown, never counted.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import pika

HEADER_ORIG_ROUTING_KEY = "x-orig-routing-key"
HEADER_RETRY_COUNT = "x-retry-count"
# Unique per trip to `{queue}@failed`: stays the same while the message sits there
# (redelivery does not touch headers), differs if a replayed copy fails again.
HEADER_DEAD_LETTER_ID = "x-redrive-dead-letter-id"
HEADER_FIRST_FAILURE = "x-redrive-first-failure-at"  # epoch milliseconds
HEADER_LAST_FAILURE = "x-redrive-last-failure-at"  # epoch milliseconds
HEADER_ERROR = "x-redrive-error"
HEADER_REPLAY_OF = "x-redrive-replay-of"  # the origin message id of a replayed copy
HEADER_REPLAY_KEY = "x-redrive-replay-key"  # the archive row a replayed copy came from
HEADER_X_DEATH = "x-death"

# Properties of the AMQP basic class, carried in a DeadLetter's string properties with
# this prefix so a replay can put them back where they were.
AMQP_PREFIX = "amqp."
AMQP_STRING_PROPERTIES = ("content_type", "content_encoding", "correlation_id", "reply_to",
                          "message_id", "type", "user_id", "app_id", "expiration")
AMQP_INT_PROPERTIES = ("priority", "timestamp")

# Broker and Redrive bookkeeping a replayed copy must not carry forward.
DROPPED_ON_REPLAY = ("x-death", "x-first-death-exchange", "x-first-death-queue",
                     "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue",
                     "x-last-death-reason", HEADER_DEAD_LETTER_ID, HEADER_REPLAY_KEY)
ERROR_TEXT_LIMIT = 1000


def now_ms() -> int:
    return int(dt.datetime.now(dt.UTC).timestamp() * 1000)


def header_text(value: Any) -> str:
    """A header value as text: strings as they are, bytes decoded (or base64 when not
    UTF-8), numbers and booleans as written, tables and arrays as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode()
    if isinstance(value, bool | int | float | decimal.Decimal):
        return str(value)
    return json.dumps(_jsonable(value), ensure_ascii=False, sort_keys=True)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=value.tzinfo or dt.UTC).isoformat()
    if isinstance(value, bytes):
        return header_text(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def string_properties(properties: pika.BasicProperties) -> dict[str, str]:
    """Every header as text, plus the AMQP properties under `amqp.`."""
    out = {str(k): header_text(v) for k, v in (properties.headers or {}).items()}
    for name in (*AMQP_STRING_PROPERTIES, *AMQP_INT_PROPERTIES):
        value = getattr(properties, name, None)
        if value is not None:
            out[AMQP_PREFIX + name] = header_text(value)
    if properties.delivery_mode is not None:
        out[AMQP_PREFIX + "delivery_mode"] = str(properties.delivery_mode)
    return out


def retry_count_of(headers: Mapping[str, Any] | None) -> int:
    """Redrive's retry count; 0 when absent or unreadable."""
    value = (headers or {}).get(HEADER_RETRY_COUNT, 0)
    try:
        return max(int(value.decode() if isinstance(value, bytes) else value), 0)
    except (TypeError, ValueError):
        return 0


def x_death_summary(headers: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """RabbitMQ's `x-death` entries (queue, reason, count, time), for display only."""
    entries = (headers or {}).get(HEADER_X_DEATH) or []
    summary = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping):
            summary.append({k: _jsonable(entry.get(k)) for k in ("queue", "reason", "count", "time",
                                                               "exchange", "routing-keys")
                            if k in entry})
    return summary


def millis_to_datetime(value: Any) -> dt.datetime | None:
    try:
        millis = int(value.decode() if isinstance(value, bytes) else value)
    except (TypeError, ValueError):
        return None
    try:
        return dt.datetime.fromtimestamp(millis / 1000, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def content_id(queue: str, properties: pika.BasicProperties, body: bytes) -> str:
    """A fallback dead-letter id for a message no Redrive consumer dead-lettered.

    Built from what does not change when RabbitMQ redelivers the message: the body,
    the headers (including `x-death`, whose timestamps tell apart two deaths of the
    same message) and the AMQP properties; the `redelivered` flag and delivery tag are
    left out because they change. Two byte-identical messages with no message id,
    timestamp or `x-death` get the same id and are archived once: see docs/rabbitmq.md.
    """
    digest = hashlib.sha256()
    digest.update(queue.encode())
    digest.update(b"\x00")
    digest.update(json.dumps(string_properties(properties), sort_keys=True).encode())
    digest.update(b"\x00")
    digest.update(body)
    return "sha256:" + digest.hexdigest()[:40]


def replay_properties(properties: Mapping[str, str], *, replay_of: str, key: str
                      ) -> pika.BasicProperties:
    """AMQP properties for a replayed copy, from a DeadLetter's string properties.

    User headers are kept, `amqp.*` entries go back to the AMQP properties, RabbitMQ's
    death bookkeeping is dropped, the retry count is reset to 0 and the replay marker
    (origin id and archive key) is added. The copy is persistent.
    """
    headers: dict[str, Any] = {}
    basic: dict[str, Any] = {}
    for name, value in properties.items():
        if name.startswith(AMQP_PREFIX):
            field = name[len(AMQP_PREFIX):]
            if field in AMQP_STRING_PROPERTIES and field != "expiration":
                basic[field] = value
            elif field in AMQP_INT_PROPERTIES:
                try:
                    basic[field] = int(value)
                except ValueError:
                    continue
            continue
        if name in DROPPED_ON_REPLAY:
            continue
        headers[name] = value
    headers[HEADER_RETRY_COUNT] = 0
    headers[HEADER_REPLAY_OF] = replay_of
    headers[HEADER_REPLAY_KEY] = key
    # `user_id` must equal the publishing user or RabbitMQ refuses the message.
    basic.pop("user_id", None)
    return pika.BasicProperties(headers=headers, delivery_mode=pika.DeliveryMode.Persistent, **basic)
