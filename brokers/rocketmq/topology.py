"""A consumer group's topology: its registration, its groups on each stream, and its
`%RETRY%` / `%DLQ%` streams.

A consumer calls `subscription_ensure` when it starts (as a RocketMQ client creates
its retry topic), the console's rebuild calls it for what is missing. Creating is
idempotent and never deletes anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import redis

from brokers.rocketmq.connection import Connection
from brokers.rocketmq.message import validate_group, validate_topic
from brokers.rocketmq.naming import DLQ_GROUP, dlq_topic, retry_topic

MODES = ("clustering", "broadcasting", "orderly", "simple")


@dataclass(frozen=True)
class Registration:
    """What a group told the broker about itself when it started."""

    group: str
    topics: tuple[str, ...]
    mode: str = "clustering"
    max_reconsume_times: int | None = None

    def to_json(self) -> str:
        return json.dumps({"topics": list(self.topics), "mode": self.mode,
                           "max_reconsume_times": self.max_reconsume_times})

    @classmethod
    def from_json(cls, group: str, text: str | bytes) -> Registration:
        try:
            data = json.loads(text)
        except ValueError:
            data = {}
        return cls(group=group, topics=tuple(data.get("topics") or ()), mode=data.get("mode") or "clustering",
                   max_reconsume_times=data.get("max_reconsume_times"))


def group_create(connection: Connection, topic: str, group: str, *, start: str = "0") -> bool:
    """Create `group` on the topic's stream (and the stream); False if it existed."""
    try:
        connection.client.xgroup_create(connection.keys.stream(topic), group, id=start, mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" in str(exc):
            return False
        raise
    return True


def group_exists(connection: Connection, topic: str, group: str) -> bool:
    try:
        groups = connection.client.xinfo_groups(connection.keys.stream(topic))
    except redis.ResponseError:
        return False  # no such stream
    return any(_text(g["name"]) == group for g in groups)


def subscription_ensure(connection: Connection, *, group: str, topics: Iterable[str],
                        mode: str = "clustering", max_reconsume_times: int | None = None,
                        start: str = "0") -> Registration:
    """Register the group and create its groups and retry/DLQ streams where missing.

    Broadcasting consumers read without a Redis group (each instance keeps its own
    offset, as in RocketMQ) and get no retry or DLQ stream: they never retry.
    """
    validate_group(group)
    topics = tuple(sorted(set(topics)))
    for topic in topics:
        validate_topic(topic)
    registration = Registration(group, topics, mode, max_reconsume_times)
    with connection.errors():
        client = connection.client
        client.hset(connection.keys.groups, group, registration.to_json())
        if topics:
            client.sadd(connection.keys.topics, *topics)
        if mode == "broadcasting":
            return registration
        for topic in topics:
            group_create(connection, topic, group, start=start)
        retry_dlq_ensure(connection, group)
    return registration


def retry_dlq_ensure(connection: Connection, group: str) -> list[str]:
    """Create the retry stream with the group on it and the DLQ stream with its console
    group; return what was created."""
    made = []
    with connection.errors():
        connection.client.sadd(connection.keys.topics, retry_topic(group), dlq_topic(group))
        if group_create(connection, retry_topic(group), group):
            made.append(retry_topic(group))
        if group_create(connection, dlq_topic(group), DLQ_GROUP):
            made.append(dlq_topic(group))
    return made


def registrations(connection: Connection) -> dict[str, Registration]:
    with connection.errors():
        raw = connection.client.hgetall(connection.keys.groups)
    return {_text(name): Registration.from_json(_text(name), value) for name, value in raw.items()}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
