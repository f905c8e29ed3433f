"""The message, its validation and its wire form (the fields of a stream entry).

A message has an id (ours, not the Redis entry id: a retry copy gets a new one and
keeps the first in `origin_message_id`), a topic, one tag, any number of keys, user
properties, a binary body, its born time and how many times it was re-consumed.
`real_topic` is the topic the user first sent it to; a retry or dead-letter copy
lives in `%RETRY%{group}` / `%DLQ%{group}` but remembers it.

System properties are shown to operators under RocketMQ's names (`REAL_TOPIC`,
`ORIGIN_MESSAGE_ID`, `RECONSUME_TIMES` ...); a user property may not take one of
those names, so what an operator reads is never ambiguous.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from brokers.base import BrokerError

MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # RocketMQ's default maxMessageSize; exactly 4 MiB is allowed
TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9_|%-]{1,127}$")
MESSAGE_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
GROUP_PATTERN = re.compile(r"^[A-Za-z0-9_|-]{1,120}$")
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
TAG_SEPARATOR = "||"  # separates tags in a subscription expression

# System property names, as an operator sees them on a dead letter.
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RETRY_TOPIC = "RETRY_TOPIC"
RECONSUME_TIMES = "RECONSUME_TIMES"
DELAY_LEVEL = "DELAY_LEVEL"
DELAY_TIME = "DELAY_TIME"
TAGS = "TAGS"
KEYS = "KEYS"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
FIRST_FAILURE_AT = "FIRST_FAILURE_AT"
LAST_FAILURE_AT = "LAST_FAILURE_AT"
FAILURE_REASON = "FAILURE_REASON"
CONSUMER_GROUP = "CONSUMER_GROUP"
REPLAY_OF = "REPLAY_OF"
MESSAGE_ID = "MESSAGE_ID"
SYSTEM_PROPERTIES = frozenset({
    REAL_TOPIC, ORIGIN_MESSAGE_ID, RETRY_TOPIC, RECONSUME_TIMES, DELAY_LEVEL, DELAY_TIME, TAGS,
    KEYS, BORN_TIMESTAMP, FIRST_FAILURE_AT, LAST_FAILURE_AT, FAILURE_REASON, CONSUMER_GROUP,
    REPLAY_OF, MESSAGE_ID,
})


class MessageError(BrokerError):
    """A message or name that can never be sent as it is (always permanent)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


def _new_id_prefix() -> None:
    global _ID_PREFIX, _ID_COUNTER
    _ID_PREFIX = os.urandom(8).hex().upper()
    _ID_COUNTER = itertools.count(int.from_bytes(os.urandom(4), "big"))


_ID_PREFIX = ""
_ID_COUNTER = itertools.count()
_new_id_prefix()
# A forked child must not repeat its parent's ids.
os.register_at_fork(after_in_child=_new_id_prefix)


def new_message_id() -> str:
    """32 hex digits: a random per-process prefix and a counter, like RocketMQ's client
    ids (unique without a system call per message)."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016X}"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Message:
    """One message. Build it with `topic` and `body`; the producer fills in the rest.

    `entry_id` and `delivery_count` are set on a received message only: the Redis
    entry id in its stream, and how often the group delivered this entry.
    """

    topic: str
    body: bytes
    tags: str = ""
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    message_id: str = ""
    born_at_ms: int = 0
    reconsume_times: int = 0
    origin_message_id: str = ""
    real_topic: str = ""
    delay_level: int = 0
    first_failure_at_ms: int = 0
    last_failure_at_ms: int = 0
    failure_reason: str = ""
    consumer_group: str = ""
    replay_of: str = ""
    entry_id: str = ""
    stream: str = ""
    delivery_count: int = 0

    def __post_init__(self) -> None:
        # A message gets its id and born time when it is built (a copy made with
        # dataclasses.replace keeps them unless it sets new ones).
        if not self.message_id:
            object.__setattr__(self, "message_id", new_message_id())
        if not self.born_at_ms:
            object.__setattr__(self, "born_at_ms", now_ms())
        if self.keys.__class__ is not tuple:
            object.__setattr__(self, "keys", tuple(self.keys))
        if self.properties.__class__ is not MappingProxyType:
            object.__setattr__(self, "properties", MappingProxyType(dict(self.properties or {})))

    @property
    def source_topic(self) -> str:
        """The topic the user sent the message to, for copies as for originals."""
        return self.real_topic or self.topic

    def system_properties(self) -> dict[str, str]:
        """The system properties an operator sees, under RocketMQ's names."""
        shown = {
            MESSAGE_ID: self.message_id,
            REAL_TOPIC: self.source_topic,
            ORIGIN_MESSAGE_ID: self.origin_message_id or self.message_id,
            RECONSUME_TIMES: str(self.reconsume_times),
            BORN_TIMESTAMP: str(self.born_at_ms),
        }
        if self.tags:
            shown[TAGS] = self.tags
        if self.keys:
            shown[KEYS] = json.dumps(list(self.keys), ensure_ascii=False)
        if self.topic.startswith(RETRY_PREFIX):
            shown[RETRY_TOPIC] = self.topic
        optional = {
            DELAY_LEVEL: self.delay_level, FIRST_FAILURE_AT: self.first_failure_at_ms,
            LAST_FAILURE_AT: self.last_failure_at_ms, FAILURE_REASON: self.failure_reason,
            CONSUMER_GROUP: self.consumer_group, REPLAY_OF: self.replay_of,
        }
        shown.update({name: str(value) for name, value in optional.items() if value})
        return shown

    def all_properties(self) -> dict[str, str]:
        """User properties plus system properties (system names never clash: see validate)."""
        return {**self.properties, **self.system_properties()}


# Field defaults of a Message, for decode().
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Message) if f.default is not MISSING}
_DEFAULTS.update(topic="", body=b"", properties=MappingProxyType({}))


def validate_topic(topic: str) -> None:
    if not isinstance(topic, str) or not TOPIC_PATTERN.match(topic):
        raise MessageError(
            f"topic {topic!r} is not valid: use 1 to 127 letters, digits, '_', '-', '|' or '%'")


def validate_user_topic(topic: str) -> None:
    """A topic a producer may send to or a consumer subscribe to: not a system topic."""
    validate_topic(topic)
    if topic.startswith(DLQ_PREFIX):
        raise MessageError(f"{topic!r} is a dead-letter topic: only the console reads or writes it")
    if topic.startswith(RETRY_PREFIX):
        raise MessageError(f"{topic!r} is a retry topic: consumers subscribe to it automatically")


def validate_group(group: str) -> None:
    """Consumer group names: '%' is reserved, it marks the %RETRY%/%DLQ% system topics."""
    if not isinstance(group, str) or not GROUP_PATTERN.match(group):
        raise MessageError(
            f"consumer group {group!r} is not valid: use 1 to 120 letters, digits, '_', '-' or '|'"
            + (" ('%' is reserved for the %RETRY% and %DLQ% topics)" if "%" in str(group) else ""))


def validate_message(message: Message, *, max_bytes: int = MAX_MESSAGE_BYTES,
                     topic_checked: bool = False) -> None:
    """Raise MessageError (permanent) for anything that could never be sent as it is."""
    if not topic_checked:
        validate_topic(message.topic)
    if not MESSAGE_ID_PATTERN.match(message.message_id):
        raise MessageError(f"message id {message.message_id!r} is not valid: use 1 to 64 letters, digits, "
                           "'_' or '-'")
    if not isinstance(message.body, bytes | bytearray | memoryview):
        raise MessageError("the message body must be bytes")
    size = len(message.body)
    if size == 0:
        raise MessageError("the message body is empty")
    if size > max_bytes:
        raise MessageError(f"the message body is {size} bytes, more than the {max_bytes} allowed")
    if message.tags:
        _validate_tag(message.tags)
    for key in message.keys:
        if not isinstance(key, str) or not key:
            raise MessageError(f"message key {key!r} is not a non-empty string")
    for name, value in message.properties.items():
        if not isinstance(name, str) or not isinstance(value, str) or not name:
            raise MessageError(f"property {name!r} must be a non-empty string name with a string value")
        if name in SYSTEM_PROPERTIES:
            raise MessageError(f"property {name!r} is a system property name; pick another name")


def _validate_tag(tag: str) -> None:
    if not isinstance(tag, str) or TAG_SEPARATOR in tag or tag.strip() == "*":
        raise MessageError(
            f"tag {tag!r} is not valid: a message has one tag, without '||' and not '*' "
            "(those belong to subscription expressions)")
    try:
        tag.encode()
    except UnicodeEncodeError as exc:
        raise MessageError(f"tag {tag!r} is not valid text: {exc.reason}") from exc
    if tag != tag.strip():
        raise MessageError(f"tag {tag!r} has leading or trailing spaces; it could never match")


def tag_matches(expression: str, tag: str) -> bool:
    """RocketMQ's tag filter: '*' (or empty) matches all, else 'TagA || TagB'."""
    expression = expression.strip()
    if expression in ("", "*"):
        return True
    return tag in {part.strip() for part in expression.split(TAG_SEPARATOR)}


# The wire form, kept small because every delivered field costs parsing time:
#   h  = "<message id> <born ms> <topic>" (none of the three contains a space)
#   b  = the body
# and only where they are set: tag, k (keys, JSON), p (properties, JSON), rc, o, rt,
# dl, ff, lf, fr, cg, rp (the fields named below).
_TEXT_FIELDS = {
    "tags": b"tag", "origin_message_id": b"o",
    "real_topic": b"rt", "failure_reason": b"fr", "consumer_group": b"cg", "replay_of": b"rp",
}
_INT_FIELDS = {
    "reconsume_times": b"rc", "delay_level": b"dl",
    "first_failure_at_ms": b"ff", "last_failure_at_ms": b"lf",
}


def encode(message: Message) -> dict[bytes, bytes]:
    """The stream entry fields of a message."""
    values = message.__dict__  # read once per field without the attribute machinery
    body = values["body"]
    fields: dict[bytes, bytes] = {
        b"h": f"{values['message_id']} {values['born_at_ms']} {values['topic']}".encode(),
        b"b": body if body.__class__ is bytes else bytes(body),
    }
    for attribute, name in _TEXT_FIELDS.items():
        value = values[attribute]
        if value:
            fields[name] = value.encode()
    for attribute, name in _INT_FIELDS.items():
        value = values[attribute]
        if value:
            fields[name] = str(value).encode()
    if values["keys"]:
        fields[b"k"] = json.dumps(list(values["keys"])).encode()
    if values["properties"]:
        fields[b"p"] = json.dumps(dict(values["properties"])).encode()
    return fields


_FIELD_TO_TEXT = {name: attribute for attribute, name in _TEXT_FIELDS.items()}
_FIELD_TO_INT = {name: attribute for attribute, name in _INT_FIELDS.items()}


def decode(fields: Mapping[bytes, bytes], *, entry_id: str = "", stream: str = "",
           delivery_count: int = 0) -> Message:
    """A message from its stream entry fields. Unknown fields are ignored.

    This runs once per delivered message, so it fills the instance directly instead
    of going through the frozen dataclass's __init__ (which sets each of the
    nineteen fields with object.__setattr__); the values are the same.
    """
    values: dict[str, Any] = dict(_DEFAULTS)
    values["entry_id"] = entry_id
    values["stream"] = stream
    values["delivery_count"] = delivery_count
    for name, value in fields.items():
        if name == b"b":
            values["body"] = bytes(value)
        elif name == b"h":
            message_id, born, topic = value.decode().split(" ", 2)
            values["message_id"] = message_id
            values["born_at_ms"] = int(born)
            values["topic"] = topic
        elif name in _FIELD_TO_TEXT:
            values[_FIELD_TO_TEXT[name]] = value.decode()
        elif name in _FIELD_TO_INT:
            values[_FIELD_TO_INT[name]] = int(value)
        elif name == b"k":
            values["keys"] = tuple(json.loads(value))
        elif name == b"p":
            values["properties"] = MappingProxyType(json.loads(value))
    message = object.__new__(Message)
    message.__dict__.update(values)
    return message


def prepared(message: Message) -> Message:
    """The message as it is stored: its body as bytes."""
    if isinstance(message.body, bytearray | memoryview):
        return replace(message, body=bytes(message.body))
    return message


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Drop system properties (what a replay must not carry over)."""
    return {name: value for name, value in properties.items() if name not in SYSTEM_PROPERTIES}


def keys_from_property(value: str) -> tuple[str, ...]:
    try:
        keys = json.loads(value)
    except ValueError:
        return tuple(value.split())
    return tuple(str(key) for key in keys) if isinstance(keys, list) else ()
