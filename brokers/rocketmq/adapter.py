"""The console's view of a RocketMQ-style installation (see brokers/base.py for the contract).

Inventory: every consumer group the broker knows (registered by its consumers, found
as a Redis group on a topic stream, or told to the console), with its source topics,
`%RETRY%{group}` and `%DLQ%{group}` streams, backlog, delayed and in-flight counts and
what is missing. Rebuild creates missing retry/DLQ streams and their groups. Collect
reads `%DLQ%{group}` and deletes a batch only after the archive committed it. Peek
shows the retry copies waiting in the delay set (with the time each is due) and in
the retry stream. Republish sends archived letters back to their original topic (or
to the group's retry topic alone) as new messages with the retry count reset and a
`REPLAY_OF` marker.

Cluster options: `key_prefix` (default "rocketmq:"), `delay_levels`,
`max_reconsume_times` (for groups that did not register their own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from brokers.base import (
    BrokerAdapter,
    BrokerError,
    ClusterConfig,
    DeadLetter,
    DeadLetterSink,
    PeekedMessage,
    RebuildPlan,
    RebuildStep,
    ReplayMessage,
    ReplayOutcome,
    SubscriptionInfo,
)
from brokers.rocketmq.connection import Connection
from brokers.rocketmq.message import (
    DLQ_PREFIX,
    KEYS,
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    RETRY_PREFIX,
    TAGS,
    Message,
    MessageError,
    decode,
    encode,
    keys_from_property,
    prepared,
    user_properties,
    validate_group,
    validate_message,
    validate_user_topic,
)
from brokers.rocketmq.naming import DLQ_GROUP, dlq_topic, retry_topic
from brokers.rocketmq.topology import group_create, registrations

CREATE_STREAM = "create stream"
CREATE_GROUP = "create consumer group"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _when(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms else None


@dataclass
class _Group:
    group: str
    topics: set[str] = field(default_factory=set)
    mode: str = "clustering"
    max_reconsume_times: int | None = None
    registered: bool = False


class RocketMQAdapter(BrokerAdapter):
    kind = "rocketmq"

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config)
        self._connection: Connection | None = None

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            self._connection = Connection.from_config(self.config)
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # -- reading streams -------------------------------------------------------------

    def _stream_groups(self, topic: str) -> dict[str, dict] | None:
        """Redis groups on a topic's stream by name; None if the stream does not exist."""
        client = self.connection.client
        key = self.connection.keys.stream(topic)
        with self.connection.errors():
            if not client.exists(key):
                return None
            return {_text(g["name"]): g for g in client.xinfo_groups(key)}

    def _groups(self) -> dict[str, _Group]:
        connection = self.connection
        found: dict[str, _Group] = {}
        for name, registration in registrations(connection).items():
            found[name] = _Group(name, set(registration.topics), registration.mode,
                                 registration.max_reconsume_times, registered=True)
        with connection.errors():
            topics = sorted(_text(t) for t in connection.client.smembers(connection.keys.topics))
        for topic in topics:
            if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                continue
            for group in self._stream_groups(topic) or {}:
                found.setdefault(group, _Group(group)).topics.add(topic)
        for known in self.config.known_subscriptions:
            entry = found.setdefault(known.name, _Group(known.name))
            if known.source:
                entry.topics.update(t.strip() for t in known.source.split(",") if t.strip())
            if known.mode and not entry.registered:
                entry.mode = known.mode
        return found

    def _group(self, subscription: str) -> _Group:
        validate_group(subscription)
        group = self._groups().get(subscription)
        if group is None:
            raise BrokerError(f"no consumer group {subscription!r} on this cluster", permanent=True)
        return group

    # -- contract --------------------------------------------------------------------

    def check_connection(self) -> str:
        connection = self.connection
        with connection.errors():
            connection.client.ping()
            version = connection.client.info("server").get("redis_version", "?")
            topics = connection.client.scard(connection.keys.topics)
        return (f"Redis {version} at {connection.where}, RocketMQ-style with key prefix "
                f"{connection.keys.prefix!r}, {topics} topics")

    def list_subscriptions(self) -> list[SubscriptionInfo]:
        return [self._info(group) for _, group in sorted(self._groups().items())]

    def _info(self, group: _Group) -> SubscriptionInfo:
        connection = self.connection
        client = connection.client
        name = group.group
        problems: list[str] = []
        # Broadcasting instances keep their offsets to themselves: no backlog to read.
        backlog = 0 if group.topics and group.mode != "broadcasting" else None
        in_flight = 0
        consumers = 0
        for topic in sorted(group.topics):
            groups = self._stream_groups(topic)
            info = (groups or {}).get(name)
            if group.mode == "broadcasting":
                continue
            if info is None:
                problems.append(f"topic {topic} has no consumer group {name}")
                continue
            lag = info.get("lag")
            backlog = None if lag is None or backlog is None else backlog + int(lag)
            in_flight += int(info.get("pending") or 0)
            consumers = max(consumers, int(info.get("consumers") or 0))
        retry, dlq = retry_topic(name), dlq_topic(name)
        with connection.errors():
            delayed = int(client.zcard(connection.keys.delay_index(retry)))
        retry_groups = self._stream_groups(retry)
        dlq_groups = self._stream_groups(dlq)
        retry_waiting = delayed
        dead_letters: int | None = None
        if group.mode == "broadcasting":
            retry_name = dlq_name = ""
        else:
            retry_name, dlq_name = retry, dlq
            if retry_groups is None:
                problems.append(f"retry stream {retry} is missing")
            elif name not in retry_groups:
                problems.append(f"consumer group {name} does not read its retry stream {retry}")
            else:
                retry_info = retry_groups[name]
                retry_waiting += int(retry_info.get("lag") or 0)
                in_flight += int(retry_info.get("pending") or 0)
            if dlq_groups is None:
                problems.append(f"dead-letter stream {dlq} is missing")
            elif DLQ_GROUP not in dlq_groups:
                problems.append(f"dead-letter stream {dlq} has no {DLQ_GROUP} group")
            with connection.errors():
                dead_letters = int(client.xlen(connection.keys.stream(dlq)))
        max_times = group.max_reconsume_times
        if max_times is None and group.mode != "orderly":
            max_times = connection.max_reconsume_times
        return SubscriptionInfo(
            name=name, source=", ".join(sorted(group.topics)), mode=group.mode,
            retry_queue=retry_name, dead_letter_queue=dlq_name, backlog=backlog,
            retry_depth=retry_waiting if retry_name else None, dead_letter_depth=dead_letters,
            consumers=consumers, problems=tuple(problems),
            details={"in_flight": in_flight, "delayed": delayed, "registered": group.registered,
                     "max_reconsume_times": max_times if max_times is not None else "unlimited",
                     "topics": ", ".join(sorted(group.topics))},
        )

    def plan_rebuild(self, subscription: str) -> RebuildPlan:
        group = self._group(subscription)
        steps: list[RebuildStep] = []
        if group.mode != "broadcasting":
            readers = ((retry_topic(subscription), subscription), (dlq_topic(subscription), DLQ_GROUP))
            for topic, reader in readers:
                groups = self._stream_groups(topic)
                if groups is None:
                    steps.append(RebuildStep(CREATE_STREAM, topic, f"with consumer group {reader}"))
                elif reader not in groups:
                    steps.append(RebuildStep(CREATE_GROUP, topic, f"consumer group {reader}"))
        return RebuildPlan(subscription=subscription, steps=tuple(steps))

    def apply_rebuild(self, plan: RebuildPlan) -> RebuildPlan:
        validate_group(plan.subscription)
        done = []
        for step in plan.steps:
            if step.action not in (CREATE_STREAM, CREATE_GROUP):
                raise BrokerError(f"unknown rebuild step {step.action!r}", permanent=True)
            if step.target == retry_topic(plan.subscription):
                reader = plan.subscription
            elif step.target == dlq_topic(plan.subscription):
                reader = DLQ_GROUP
            else:
                raise BrokerError(f"rebuild of {plan.subscription} cannot touch {step.target!r}",
                                  permanent=True)
            with self.connection.errors():
                # group_create never deletes: an existing group is left as it is.
                created = group_create(self.connection, step.target, reader)
                self.connection.client.sadd(self.connection.keys.topics, step.target)
            if created:
                done.append(step)
        return RebuildPlan(subscription=plan.subscription, steps=tuple(done))

    def collect_dead_letters(self, subscription: str, sink: DeadLetterSink, *, limit: int | None = None,
                             batch_size: int = 500) -> int:
        validate_group(subscription)
        connection = self.connection
        key = connection.keys.stream(dlq_topic(subscription))
        with connection.errors():
            newest = connection.client.xrevrange(key, count=1)
        if not newest:
            return 0
        end = _text(newest[0][0])  # "what is there now": later arrivals wait for the next collect
        handed = 0
        start = "-"
        while limit is None or handed < limit:
            count = batch_size if limit is None else min(batch_size, limit - handed)
            with connection.errors():
                entries = connection.client.xrange(key, min=start, max=end, count=count)
            if not entries:
                break
            letters = [self._dead_letter(subscription, _text(entry_id), fields)
                       for entry_id, fields in entries]
            ids = [_text(entry_id) for entry_id, _ in entries]
            # The sink commits the batch to the archive and returns only then. If it
            # raises, nothing is deleted and the error propagates; if we crash after it
            # returned, the batch is collected again and the archive skips known ids.
            sink(letters)
            with connection.errors():
                connection.client.xdel(key, *ids)
            handed += len(letters)
            start = "(" + ids[-1]
        return handed

    def _dead_letter(self, subscription: str, entry_id: str, fields: dict) -> DeadLetter:
        message = decode(fields, entry_id=entry_id)
        return DeadLetter(
            broker_message_id=message.message_id or entry_id,
            subscription=subscription,
            source=message.source_topic,
            payload=message.body,
            properties=message.all_properties(),
            # The DLQ copy counts the failures (reconsumeTimes + 1); the retries are one fewer.
            retry_count=max(0, message.reconsume_times - 1),
            origin_message_id=message.origin_message_id or message.message_id,
            first_failure_at=_when(message.first_failure_at_ms),
            last_failure_at=_when(message.last_failure_at_ms),
        )

    def peek_retry_queue(self, subscription: str, *, limit: int = 50) -> list[PeekedMessage]:
        validate_group(subscription)
        connection = self.connection
        client = connection.client
        retry = retry_topic(subscription)
        peeked: list[PeekedMessage] = []
        groups = self._stream_groups(retry)
        if groups is not None:
            last = _text((groups.get(subscription) or {}).get("last-delivered-id") or "0-0")
            with connection.errors():
                entries = client.xrange(connection.keys.stream(retry), min=f"({last}", count=limit)
            for entry_id, fields in entries:
                message = decode(fields, entry_id=_text(entry_id))
                peeked.append(self._peeked(message, _when(int(_text(entry_id).split("-")[0]))))
        room = limit - len(peeked)
        if room > 0:
            with connection.errors():
                waiting = client.zrange(connection.keys.delay_index(retry), 0, room - 1, withscores=True)
                pipe = client.pipeline(transaction=False)
                for member, _score in waiting:
                    pipe.hgetall(connection.keys.delayed_message(_text(member)))
                hashes = pipe.execute() if waiting else []
            for (_member, score), fields in zip(waiting, hashes, strict=True):
                if fields:  # moved to the stream between the two reads: seen next time
                    peeked.append(self._peeked(decode(fields), _when(int(score))))
        return peeked

    @staticmethod
    def _peeked(message: Message, due_at: datetime | None) -> PeekedMessage:
        return PeekedMessage(message_id=message.message_id, payload=message.body,
                             properties=message.all_properties(), retry_count=message.reconsume_times,
                             due_at=due_at)

    def republish(self, messages: Sequence[ReplayMessage]) -> list[ReplayOutcome]:
        connection = self.connection
        outcomes: dict[int, ReplayOutcome] = {}
        ready: list[tuple[int, Message]] = []
        for index, replay in enumerate(messages):
            try:
                ready.append((index, self._replay_copy(replay)))
            except BrokerError as exc:
                outcomes[index] = ReplayOutcome(replay.key, False, error=exc.message, permanent=exc.permanent)
        if ready:
            with connection.errors():
                pipe = connection.client.pipeline(transaction=False)
                pipe.sadd(connection.keys.topics, *{m.topic for _, m in ready})
                for _, message in ready:
                    pipe.xadd(connection.keys.stream(message.topic), encode(message))
                answers = pipe.execute(raise_on_error=False)[1:]
            # A copy counts as confirmed only once Redis answered with its entry id; the
            # archive keeps the letter until then, so a crash here loses nothing (at
            # worst the letter is replayed twice, with the same REPLAY_OF marker).
            for (index, message), answer in zip(ready, answers, strict=True):
                key = messages[index].key
                if isinstance(answer, redis.ConnectionError | redis.TimeoutError):
                    raise BrokerError(f"Redis at {connection.where} is unreachable: {answer}")
                if isinstance(answer, Exception):
                    outcomes[index] = ReplayOutcome(key, False, error=f"Redis refused: {answer}",
                                                    permanent=True)
                else:
                    outcomes[index] = ReplayOutcome(key, True, broker_message_id=message.message_id)
        return [outcomes[i] for i in range(len(messages))]

    def _replay_copy(self, replay: ReplayMessage) -> Message:
        validate_group(replay.subscription)
        properties = dict(replay.properties)
        original = properties.get(REAL_TOPIC) or replay.source.split(",")[0].strip()
        validate_user_topic(original)
        if replay.destination in (None, ""):
            topic = original
        elif replay.destination == retry_topic(replay.subscription):
            topic = replay.destination
        else:
            raise MessageError(f"{replay.destination!r} is not a replay destination of {replay.subscription}")
        origin = replay.origin_message_id or properties.get(ORIGIN_MESSAGE_ID, "")
        message = prepared(Message(
            topic=topic, body=bytes(replay.payload), tags=properties.get(TAGS, ""),
            keys=keys_from_property(properties[KEYS]) if properties.get(KEYS) else (),
            properties=user_properties(properties), reconsume_times=0,
            origin_message_id=origin, real_topic=original if topic != original else "",
            replay_of=origin or replay.key,
        ))
        validate_message(message)
        return message

    def discard_dead_letters(self, subscription: str) -> int:
        validate_group(subscription)
        connection = self.connection
        with connection.errors():
            # Trim, not delete: the stream and its console group (the topology) stay.
            return int(connection.client.xtrim(connection.keys.stream(dlq_topic(subscription)), maxlen=0))

    def replay_destinations(self, subscription: str) -> list[tuple[str, str]]:
        return [("", "the original topic (every group subscribed to it receives the message)"),
                (retry_topic(subscription), f"only consumer group {subscription}, at once (its retry topic)")]

