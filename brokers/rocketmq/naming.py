"""Where everything lives in Redis, under one key prefix per installation.

| key | type | holds |
| --- | --- | --- |
| `{prefix}topic:{topic}` | stream | the messages of a topic (also `%RETRY%g`, `%DLQ%g`) |
| `{prefix}topics` | set | every topic a producer or consumer has used |
| `{prefix}groups` | hash | group -> JSON of its subscription (topics, mode, max) |
| `{prefix}delay` | sorted set | delayed message ids, scored by due time (ms) |
| `{prefix}delay:{topic}` | sorted set | the same ids for one topic, for peeking and depth |
| `{prefix}delayed:{id}` | hash | a delayed message: its entry fields and target topic |
| `{prefix}invisible:{group}` | sorted set | simple consumer: "stream entry" -> visible again at (ms) |
| `{prefix}receipt:{group}` | hash | simple consumer: "stream entry" -> current receipt token |
| `{prefix}lock:{group}:{topic}` | string | ordered consumer: who holds the queue |

The DLQ stream carries one consumer group, `DLQ_GROUP`, that nothing reads: it keeps
the stream in existence while empty and marks it as the console's.
"""

from __future__ import annotations

from dataclasses import dataclass

from brokers.rocketmq.message import DLQ_PREFIX, RETRY_PREFIX

DEFAULT_PREFIX = "rocketmq:"
DLQ_GROUP = "console"


def retry_topic(group: str) -> str:
    return f"{RETRY_PREFIX}{group}"


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


@dataclass(frozen=True)
class Keys:
    prefix: str = DEFAULT_PREFIX

    def stream(self, topic: str) -> str:
        return f"{self.prefix}topic:{topic}"

    def topic_of(self, stream_key: str | bytes) -> str:
        if isinstance(stream_key, bytes):
            stream_key = stream_key.decode()
        return stream_key[len(self.prefix) + len("topic:"):]

    @property
    def topics(self) -> str:
        return f"{self.prefix}topics"

    @property
    def groups(self) -> str:
        return f"{self.prefix}groups"

    @property
    def delay(self) -> str:
        return f"{self.prefix}delay"

    def delay_index(self, topic: str) -> str:
        return f"{self.prefix}delay:{topic}"

    @property
    def delayed_message_prefix(self) -> str:
        return f"{self.prefix}delayed:"

    def delayed_message(self, message_id: str) -> str:
        return f"{self.delayed_message_prefix}{message_id}"

    def invisible(self, group: str) -> str:
        return f"{self.prefix}invisible:{group}"

    def receipts(self, group: str) -> str:
        return f"{self.prefix}receipt:{group}"

    def order_lock(self, group: str, topic: str) -> str:
        return f"{self.prefix}lock:{group}:{topic}"
