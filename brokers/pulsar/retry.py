"""Retry letter topics for Python consumers: `RetryConsumer.reconsume_later`.

The official Python client has neither a retry letter topic nor `reconsume_later`;
this module gives Python consumers the behaviour the Java client has (semantics
section 1):

* the consumer subscribes to its source topic *and* its retry letter topic with one
  subscription name;
* `reconsume_later(msg, delay=...)`, `(msg, level=...)` or `(msg)` (next level)
  publishes a new copy of the message to the retry topic, delivered after the delay,
  or to the dead letter topic once the retry count would pass `max_redeliver_count`
  (default 16: the 17th failure goes to the DLQ), then acknowledges the original;
* every copy carries REAL_TOPIC, ORIGIN_MESSAGE_ID, RETRY_TOPIC, RECONSUMETIMES and
  DELAY_TIME next to the user's own properties;
* the DLQ gets its subscription (`initial_subscription_name`) before the first dead
  letter is written, so retention cannot delete dead letters nobody subscribed to;
* Exclusive and Failover subscriptions cannot have delayed delivery: their retries
  are published without a delay and come back at once.

Nothing is lost: the copy is published, and confirmed by the broker, *before* the
original is acknowledged. A crash between the two leaves both (a duplicate the
consumer must tolerate, see the idempotency advice in docs/pulsar.md); a failed
publish raises and leaves the original unacknowledged, so the broker redelivers it.

`negative_ack_consumer` sets up the client's own alternative (negative ack with a
dead-letter policy) with the same names; docs/pulsar.md says how the two differ.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulsar

from brokers.pulsar.naming import (
    CONSOLE_SUBSCRIPTION,
    DEFAULT_NAMING_VERSION,
    RetryTopology,
    retry_topology,
)

REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RETRY_TOPIC = "RETRY_TOPIC"
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
RETRY_PROPERTIES = (REAL_TOPIC, ORIGIN_MESSAGE_ID, RETRY_TOPIC, RECONSUMETIMES, DELAY_TIME)

DEFAULT_MAX_REDELIVER_COUNT = 16
MIN_DELAY_SECONDS = 1
MAX_DELAY_SECONDS = 864_000  # 10 days
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_LEVEL = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_DELAYED_TYPES = (pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared)


def delay_levels_parse(levels: str | Sequence[float | int | str]) -> tuple[float, ...]:
    """Delay levels in seconds from "1s 5s 1m 2h" or a sequence of seconds / "5s" strings.

    Each level must lie in the allowed delay range (1 s .. 864,000 s).
    """
    items = levels.split() if isinstance(levels, str) else list(levels)
    if not items:
        raise ValueError("at least one delay level is required")
    parsed = []
    for item in items:
        if isinstance(item, str):
            match = _LEVEL.match(item.strip())
            if not match:
                raise ValueError(f"delay level {item!r} is not like 10s, 5m, 2h or 1d")
            seconds = float(match.group(1)) * _UNITS[match.group(2)]
        else:
            seconds = float(item)
        parsed.append(_delay_check(seconds))
    return tuple(parsed)


def _delay_check(seconds: float) -> float:
    if not MIN_DELAY_SECONDS <= seconds <= MAX_DELAY_SECONDS:
        raise ValueError(
            f"a retry delay must be between {MIN_DELAY_SECONDS} s and {MAX_DELAY_SECONDS} s "
            f"(10 days), not {seconds:g} s"
        )
    return seconds


DEFAULT_DELAY_LEVEL_SECONDS = delay_levels_parse(DEFAULT_DELAY_LEVELS)


def retry_count_of(message: Any) -> int:
    """How many times a message has been re-consumed after failing.

    RECONSUMETIMES for copies made by `reconsume_later`; for the negative-ack route,
    which makes no copy, the broker's in-memory `redelivery_count()` (reset when every
    consumer of the subscription goes away or the broker restarts).
    """
    properties = message.properties() if hasattr(message, "properties") else dict(message)
    raw = properties.get(RECONSUMETIMES)
    if raw is not None:
        try:
            return max(int(raw), 0)
        except ValueError:
            return 0
    redelivery = getattr(message, "redelivery_count", None)
    return int(redelivery()) if callable(redelivery) else 0


@dataclass(frozen=True)
class RetryDecision:
    """Where `reconsume_later` sends a failed message, and with which properties."""

    dead_letter: bool
    topic: str
    retry_count: int
    delay_seconds: float
    properties: Mapping[str, str] = field(default_factory=dict)


def retry_decide(
    *, topology: RetryTopology, properties: Mapping[str, str], message_topic: str,
    message_id: str, delay: float | dt.timedelta | None = None, level: int | None = None,
    max_redeliver_count: int = DEFAULT_MAX_REDELIVER_COUNT,
    delay_levels: Sequence[float] = DEFAULT_DELAY_LEVEL_SECONDS,
    extra_properties: Mapping[str, str] | None = None,
) -> RetryDecision:
    """The pure rule behind `reconsume_later` (no broker needed, so it is easy to test).

    The retry count after this failure is RECONSUMETIMES + 1. Within
    `max_redeliver_count` the copy goes to the retry topic with RECONSUMETIMES set to
    it; past it the copy goes to the DLQ, carrying the retries that actually happened.
    """
    if delay is not None and level is not None:
        raise ValueError("give a delay or a level, not both")
    if max_redeliver_count < 0:
        raise ValueError("max_redeliver_count must be 0 or more")
    previous = retry_count_of(dict(properties))
    attempt = previous + 1
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else float(delay)
        seconds = _delay_check(seconds)
    elif level is not None:
        if not 1 <= int(level) <= len(delay_levels):
            raise ValueError(f"delay level must be 1..{len(delay_levels)}, not {level}")
        seconds = float(delay_levels[int(level) - 1])
    else:
        # Level increment: retry n waits level n, capped at the last level.
        seconds = float(delay_levels[min(attempt, len(delay_levels)) - 1])

    copied = {str(k): str(v) for k, v in properties.items()}
    for key, value in (extra_properties or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError("message properties must be strings")
        copied[key] = value
    # The first hop names the original topic and message; later hops keep them.
    copied.setdefault(REAL_TOPIC, topology.source if message_topic == topology.retry_topic
                      else message_topic or topology.source)
    copied.setdefault(ORIGIN_MESSAGE_ID, message_id)
    copied[RETRY_TOPIC] = topology.retry_topic
    copied[DELAY_TIME] = str(int(seconds * 1000))
    dead_letter = attempt > max_redeliver_count
    copied[RECONSUMETIMES] = str(previous if dead_letter else attempt)
    return RetryDecision(
        dead_letter=dead_letter,
        topic=topology.dead_letter_topic if dead_letter else topology.retry_topic,
        retry_count=previous if dead_letter else attempt,
        delay_seconds=seconds,
        properties=copied,
    )


_CONSUMER_TYPES = {
    "shared": pulsar.ConsumerType.Shared,
    "key_shared": pulsar.ConsumerType.KeyShared,
    "keyshared": pulsar.ConsumerType.KeyShared,
    "exclusive": pulsar.ConsumerType.Exclusive,
    "failover": pulsar.ConsumerType.Failover,
}


def consumer_type_parse(value: pulsar.ConsumerType | str) -> pulsar.ConsumerType:
    """A consumer type from the enum or its name ("Shared", "Key_Shared", "Exclusive", "Failover")."""
    if isinstance(value, str):
        try:
            return _CONSUMER_TYPES[value.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown subscription type {value!r}") from None
    return value


def initial_position_parse(value: str) -> pulsar.InitialPosition:
    """"earliest" or "latest"."""
    positions = {"earliest": pulsar.InitialPosition.Earliest, "latest": pulsar.InitialPosition.Latest}
    try:
        return positions[value.strip().lower()]
    except KeyError:
        raise ValueError(f"initial position must be earliest or latest, not {value!r}") from None


def client_connect(service_url: str, *, token: str = "", timeout_seconds: float = 5.0) -> pulsar.Client:
    """A `pulsar.Client` with the console's defaults: token auth if given, bounded
    timeouts, and the C++ client's per-connection INFO lines kept out of the logs."""
    quiet = logging.getLogger("brokers.pulsar.client")
    quiet.setLevel(logging.WARNING)
    return pulsar.Client(
        service_url,
        authentication=pulsar.AuthenticationToken(token) if token else None,
        operation_timeout_seconds=max(int(timeout_seconds), 1),
        connection_timeout_ms=int(timeout_seconds * 1000),
        logger=quiet,
    )


def dead_letter_subscription_ensure(client: pulsar.Client, topic: str, subscription: str) -> None:
    """Make sure the DLQ has `subscription`, positioned at its earliest message.

    Subscribing creates the subscription if it is missing and changes nothing if it
    exists; the earliest position keeps every dead letter already there.
    """
    client.subscribe(topic, subscription, consumer_type=pulsar.ConsumerType.Shared,
                     initial_position=pulsar.InitialPosition.Earliest,
                     receiver_queue_size=1).close()


class RetryConsumer:
    """A consumer with a retry letter topic and a DLQ, as the Java client has.

        client = pulsar.Client("pulsar://localhost:6650")
        consumer = RetryConsumer(client, "persistent://shop/orders/created", "billing")
        while True:
            msg = consumer.receive()
            try:
                handle(msg)
                consumer.acknowledge(msg)
            except TemporaryFailure:
                consumer.reconsume_later(msg)            # next delay level
            except RateLimited:
                consumer.reconsume_later(msg, delay=30)  # seconds (or a timedelta)

    Extra keyword arguments go to `pulsar.Client.subscribe` (initial_position,
    receiver_queue_size, ...). The wrapper does not own `client`.
    """

    def __init__(
        self, client: pulsar.Client, topic: str, subscription: str, *,
        consumer_type: pulsar.ConsumerType | str = pulsar.ConsumerType.Shared,
        naming_version: str = DEFAULT_NAMING_VERSION,
        retry_topic: str | None = None, dead_letter_topic: str | None = None,
        max_redeliver_count: int = DEFAULT_MAX_REDELIVER_COUNT,
        delay_levels: str | Sequence[float] = DEFAULT_DELAY_LEVELS,
        initial_subscription_name: str = CONSOLE_SUBSCRIPTION,
        **subscribe_options: Any,
    ) -> None:
        self.topology = retry_topology(topic, subscription, naming_version=naming_version,
                                       retry_topic=retry_topic, dead_letter_topic=dead_letter_topic)
        if max_redeliver_count < 0:
            raise ValueError("max_redeliver_count must be 0 or more")
        self.max_redeliver_count = max_redeliver_count
        self.delay_levels = delay_levels_parse(delay_levels)
        consumer_type = consumer_type_parse(consumer_type)
        self.consumer_type = consumer_type
        if isinstance(subscribe_options.get("initial_position"), str):
            subscribe_options["initial_position"] = initial_position_parse(
                subscribe_options["initial_position"])
        self.initial_subscription_name = initial_subscription_name
        self._client = client
        # The DLQ gets its subscription first, before anything can be written to it.
        dead_letter_subscription_ensure(client, self.topology.dead_letter_topic,
                                        initial_subscription_name)
        self._consumer = client.subscribe(
            [self.topology.source, self.topology.retry_topic], subscription,
            consumer_type=consumer_type, **subscribe_options)
        self._producers: dict[str, pulsar.Producer] = {}

    @property
    def consumer(self) -> pulsar.Consumer:
        return self._consumer

    @property
    def delayed_delivery(self) -> bool:
        """Only Shared and Key_Shared subscriptions get delayed retries."""
        return self.consumer_type in _DELAYED_TYPES

    def receive(self, timeout_millis: int | None = None) -> pulsar.Message:
        return self._consumer.receive(timeout_millis)

    def poll(self, timeout_millis: int) -> pulsar.Message | None:
        """The next message, or None if none came within `timeout_millis`."""
        try:
            return self._consumer.receive(timeout_millis)
        except pulsar.Timeout:
            return None

    def acknowledge(self, message: pulsar.Message) -> None:
        self._consumer.acknowledge(message)

    def negative_acknowledge(self, message: pulsar.Message) -> None:
        self._consumer.negative_acknowledge(message)

    def reconsume_later(
        self, message: pulsar.Message, *, delay: float | dt.timedelta | None = None,
        level: int | None = None, properties: Mapping[str, str] | None = None,
    ) -> RetryDecision:
        """Send a failed message to the retry topic (or the DLQ), then acknowledge it.

        `delay` in seconds (1 .. 864,000) or a timedelta; `level` 1..len(delay_levels);
        neither: the level after the message's retry count. `properties` are added to
        the copy. Returns where the copy went. Raises (and acknowledges nothing) if the
        copy could not be published.
        """
        decision = retry_decide(
            topology=self.topology, properties=message.properties(),
            message_topic=message.topic_name(), message_id=str(message.message_id()),
            delay=delay, level=level, max_redeliver_count=self.max_redeliver_count,
            delay_levels=self.delay_levels, extra_properties=properties,
        )
        send_options: dict[str, Any] = {"properties": dict(decision.properties)}
        if message.partition_key():
            send_options["partition_key"] = message.partition_key()
        if message.ordering_key():
            send_options["ordering_key"] = message.ordering_key()
        if not decision.dead_letter and self.delayed_delivery:
            send_options["deliver_after"] = dt.timedelta(seconds=decision.delay_seconds)
        # 1. publish the copy and wait for the broker's receipt (send is synchronous);
        self._producer(decision.topic).send(message.data(), **send_options)
        # 2. only then acknowledge the original. A crash here leaves both: a duplicate,
        #    never a loss.
        self._consumer.acknowledge(message)
        return decision

    def _producer(self, topic: str) -> pulsar.Producer:
        producer = self._producers.get(topic)
        if producer is None:
            producer = self._client.create_producer(topic, batching_enabled=False)
            self._producers[topic] = producer
        return producer

    def close(self) -> None:
        for producer in self._producers.values():
            # already gone with its connection; nothing is pending on a sync producer
            with contextlib.suppress(pulsar.PulsarException):
                producer.close()
        self._producers.clear()
        self._consumer.close()

    def __enter__(self) -> RetryConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def negative_ack_consumer(
    client: pulsar.Client, topic: str, subscription: str, *,
    consumer_type: pulsar.ConsumerType = pulsar.ConsumerType.Shared,
    max_redeliver_count: int = DEFAULT_MAX_REDELIVER_COUNT,
    naming_version: str = DEFAULT_NAMING_VERSION, dead_letter_topic: str | None = None,
    initial_subscription_name: str = CONSOLE_SUBSCRIPTION,
    negative_ack_redelivery_delay_ms: int = 60_000,
    **subscribe_options: Any,
) -> pulsar.Consumer:
    """The client's own retry: negative acks plus a dead-letter policy, same DLQ name.

    No copy is made on a retry: the broker redelivers the same message after
    `negative_ack_redelivery_delay_ms` (the client scans every delay/3, so it may come up
    to a third later), and `message.redelivery_count()` counts the attempts in broker
    memory only. After `max_redeliver_count` redeliveries the client writes the message
    to the DLQ (with REAL_TOPIC and ORIGIN_MESSAGE_ID). The DLQ subscription is created
    here first, like `RetryConsumer` does.
    """
    topology = retry_topology(topic, subscription, naming_version=naming_version,
                              dead_letter_topic=dead_letter_topic)
    dead_letter_subscription_ensure(client, topology.dead_letter_topic, initial_subscription_name)
    policy = pulsar.ConsumerDeadLetterPolicy(
        max_redeliver_count=max_redeliver_count,
        dead_letter_topic=topology.dead_letter_topic,
        initial_subscription_name=initial_subscription_name,
    )
    return client.subscribe(topology.source, subscription, consumer_type=consumer_type,
                            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
                            dead_letter_policy=policy, **subscribe_options)


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The user's own properties of a message, without the retry bookkeeping."""
    return {k: v for k, v in properties.items() if k not in RETRY_PROPERTIES}


