"""The console's view of a Pulsar cluster (the contract of brokers/base.py).

Two channels:

* the binary protocol (`service_url`, `pulsar-client`) for everything that moves
  messages: collect from a DLQ, peek a retry topic with a Reader, republish, discard,
  and creating topics and subscriptions where no admin URL is set;
* for inventory and topology health, the admin REST API (`admin_url`) where set, or
  else the broker's Prometheus metrics (`options["metrics_url"]`, which pulsar-lite
  has) plus the subscriptions the console knows (`config.known_subscriptions`).

Cluster options (`ClusterConfig.options`), documented in docs/pulsar.md:

    naming_version        "2.9" (default, also for 3.x/4.x), "2.7" or "2.6"
    overrides             {subscription: {"retry_topic": ..., "dead_letter_topic": ...}}
    console_subscription  the console's subscription on every DLQ (default "redrive")
    metrics_url           http://host:port/metrics, for inventory without an admin URL
    namespaces            ["tenant/ns", ...] the admin inventory looks at (default: all)
    metrics_settle_seconds how long a rebuild waits for the metrics to show its work (15)
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pulsar

from brokers.base import (
    BrokerAdapter,
    BrokerError,
    ClusterConfig,
    DeadLetter,
    DeadLetterSink,
    KnownSubscription,
    PeekedMessage,
    RebuildPlan,
    RebuildStep,
    ReplayMessage,
    ReplayOutcome,
    SubscriptionInfo,
)
from brokers.pulsar.admin import BrokerMetrics, MetricsSnapshot, PulsarAdmin
from brokers.pulsar.naming import (
    CONSOLE_SUBSCRIPTION,
    InvalidName,
    RetryTopology,
    is_retry_or_dead_letter_topic,
    naming_version_check,
    topic_parse,
    topology_from_options,
)
from brokers.pulsar.retry import (
    DELAY_TIME,
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    RECONSUMETIMES,
    RETRY_TOPIC,
    client_connect,
    dead_letter_subscription_ensure,
)

logger = logging.getLogger(__name__)

# The replay marker: a republished copy names the message it replays.
REPLAY_OF = "REDRIVE_REPLAY_OF"
PEEK_SCAN_LIMIT = 10_000
_EMPTY_BATCHES_TO_STOP = 2
_BATCH_WAIT_MS = 200
_TRANSIENT = (pulsar.ConnectError, pulsar.Timeout, pulsar.LookupError, pulsar.ServiceUnitNotReady,
              pulsar.TooManyLookupRequestException, pulsar.ProducerQueueIsFull)

PROBLEM_RETRY_MISSING = "retry topic missing"
PROBLEM_DLQ_MISSING = "DLQ topic missing"
PROBLEM_DLQ_UNSUBSCRIBED = "DLQ has no subscription: its dead letters may be deleted by retention"
PROBLEM_NOT_ON_BROKER = "subscription not found on the broker"


@dataclass(frozen=True)
class _Subscription:
    name: str
    source: str
    mode: str
    topology: RetryTopology
    backlog: int | None = None
    consumers: int | None = None
    on_broker: bool | None = None


class _TopologyState:
    """What is known of topics and subscriptions; None answers mean "cannot tell"."""

    def __init__(self, *, topics: set[str] | None = None,
                 subscriptions: dict[str, list[str]] | None = None,
                 backlogs: dict[tuple[str, str], int] | None = None, source: str = "") -> None:
        self._topics = topics
        self._subscriptions = subscriptions
        self._backlogs = backlogs or {}
        self.source = source

    @property
    def known(self) -> bool:
        return self._topics is not None

    def topic_exists(self, topic: str) -> bool | None:
        if self._topics is None:
            return None
        return topic in self._topics or f"{topic}-partition-0" in self._topics

    def subscriptions(self, topic: str) -> list[str] | None:
        if self._subscriptions is None:
            return None
        return self._subscriptions.get(topic, [])

    def backlog(self, topic: str, subscription: str) -> int | None:
        return self._backlogs.get((topic, subscription))


class PulsarAdapter(BrokerAdapter):
    kind = "pulsar"

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config)
        self._client: pulsar.Client | None = None
        self._producers: dict[str, pulsar.Producer] = {}
        self._lock = threading.Lock()
        options = config.options
        try:
            naming_version_check(options.get("naming_version"))
        except InvalidName as exc:
            raise BrokerError(str(exc), permanent=True) from None
        self.console_subscription = str(options.get("console_subscription") or CONSOLE_SUBSCRIPTION)
        self._admin = (PulsarAdmin(config.admin_url, token=config.token, username=config.username,
                                   password=config.password, timeout=config.timeout_seconds)
                       if config.admin_url else None)
        metrics_url = str(options.get("metrics_url") or "")
        self._metrics = BrokerMetrics(metrics_url, timeout=config.timeout_seconds) if metrics_url else None
        self._settle_seconds = float(options.get("metrics_settle_seconds", 15))

    # --- connection ----------------------------------------------------------------
    def _pulsar(self) -> pulsar.Client:
        with self._lock:
            if self._client is None:
                try:
                    self._client = client_connect(self.config.service_url, token=self.config.token,
                                                  timeout_seconds=self.config.timeout_seconds)
                except (pulsar.PulsarException, ValueError) as exc:
                    raise BrokerError(f"cannot use service URL {self.config.service_url!r}: {exc}",
                                      permanent=True) from None
            return self._client

    def close(self) -> None:
        producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            # Every send was confirmed or reported before republish returned.
            with contextlib.suppress(pulsar.PulsarException):
                producer.close()
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            # the connection is gone already; nothing of ours is pending
            with contextlib.suppress(pulsar.PulsarException):
                client.close()

    def check_connection(self) -> str:
        parts = [f"Pulsar at {self.config.service_url}"]
        # Any lookup needs a live, authenticated connection. Look up a topic that exists
        # where one is known: a broker set to auto-create partitioned topics may create
        # the one it is asked about.
        probe = "persistent://public/default/redrive-connection-check"
        for known in self.config.known_subscriptions:
            try:
                probe = topic_parse(known.source).full
                break
            except InvalidName:
                continue
        with _broker_errors("connect"):
            self._pulsar().get_topic_partitions(probe)
        if self._admin is not None:
            parts.append(f"admin API version {self._admin.version()[:40]}")
        if self._metrics is not None:
            self._metrics.snapshot()
            parts.append("broker metrics readable")
        return ", ".join(parts)

    # --- inventory -------------------------------------------------------------------
    def list_subscriptions(self) -> list[SubscriptionInfo]:
        subscriptions, state = self._inventory()
        return sorted((self._describe(sub, state) for sub in subscriptions),
                      key=lambda s: (s.name, s.source))

    def _describe(self, sub: _Subscription, state: _TopologyState) -> SubscriptionInfo:
        topology = sub.topology
        problems = [PROBLEM_NOT_ON_BROKER] if sub.on_broker is False else []
        problems += self._missing(topology, state)
        dlq_subs = state.subscriptions(topology.dead_letter_topic)
        dlq_depth = None
        if dlq_subs:
            depths = [state.backlog(topology.dead_letter_topic, s) for s in dlq_subs]
            known_depths = [d for d in depths if d is not None]
            dlq_depth = (state.backlog(topology.dead_letter_topic, self.console_subscription)
                         if self.console_subscription in dlq_subs else None)
            if dlq_depth is None and known_depths:
                dlq_depth = max(known_depths)
        return SubscriptionInfo(
            name=sub.name, source=sub.source, mode=sub.mode,
            retry_queue=topology.retry_topic, dead_letter_queue=topology.dead_letter_topic,
            backlog=sub.backlog if sub.backlog is not None else state.backlog(sub.source, sub.name),
            retry_depth=state.backlog(topology.retry_topic, sub.name),
            dead_letter_depth=dlq_depth, consumers=sub.consumers, problems=problems,
            details={
                "naming_version": topology.naming_version,
                "inventory": state.source,
                "console_subscription": self.console_subscription,
                "dlq_subscriptions": ", ".join(dlq_subs) if dlq_subs is not None else "unknown",
            },
        )

    def _missing(self, topology: RetryTopology, state: _TopologyState) -> list[str]:
        problems = []
        if state.topic_exists(topology.retry_topic) is False:
            problems.append(PROBLEM_RETRY_MISSING)
        dlq_exists = state.topic_exists(topology.dead_letter_topic)
        if dlq_exists is False:
            problems.append(PROBLEM_DLQ_MISSING)
        if dlq_exists is not None and not state.subscriptions(topology.dead_letter_topic):
            problems.append(PROBLEM_DLQ_UNSUBSCRIBED)
        return problems

    def _inventory(self) -> tuple[list[_Subscription], _TopologyState]:
        if self._admin is not None:
            return self._inventory_from_admin()
        found: dict[tuple[str, str], _Subscription] = {}
        state = _TopologyState(source="registered in the console (no admin URL, no metrics URL)")
        if self._metrics is not None:
            snapshot = self._metrics.snapshot()
            state = _state_from_metrics(snapshot)
            for (topic, name), backlog in snapshot.backlogs.items():
                if self._is_consumer_subscription(topic, name):
                    discovered = self._subscription(name, topic, "", backlog)
                    if discovered is not None:
                        found[(discovered.name, discovered.source)] = discovered
        for known in self.config.known_subscriptions:
            sub = self._subscription(known.name, known.source, known.mode)
            if sub is None:
                continue
            existing = found.get((sub.name, sub.source))
            if existing is None or (known.mode and not existing.mode):
                found[(sub.name, sub.source)] = _Subscription(
                    sub.name, sub.source, known.mode or (existing.mode if existing else ""),
                    sub.topology, backlog=existing.backlog if existing else None)
        return list(found.values()), state

    def _is_consumer_subscription(self, topic: str, name: str) -> bool:
        # Readers hold non-durable "reader-…" subscriptions; the console's own and the
        # retry/DLQ topics are not consumer subscriptions on a source.
        return not (is_retry_or_dead_letter_topic(topic) or name.startswith("reader-")
                    or name == self.console_subscription)

    def _subscription(self, name: str, source: str, mode: str, backlog: int | None = None,
                      consumers: int | None = None, on_broker: bool | None = None
                      ) -> _Subscription | None:
        try:
            topology = topology_from_options(source, name, self.config.options)
        except InvalidName as exc:
            logger.warning("skipping subscription with an invalid name: %s", exc)
            return None
        return _Subscription(name, topology.source, mode, topology, backlog, consumers, on_broker)

    def _inventory_from_admin(self) -> tuple[list[_Subscription], _TopologyState]:
        admin = self._admin
        assert admin is not None
        namespaces = list(self.config.options.get("namespaces") or [])
        if not namespaces:
            for tenant in admin.tenants():
                namespaces += admin.namespaces(tenant)
        topics: set[str] = set()
        for namespace in namespaces:
            topics.update(admin.topics(namespace))
        subscriptions: dict[str, list[str]] = {}
        backlogs: dict[tuple[str, str], int] = {}
        found: dict[tuple[str, str], _Subscription] = {}
        for topic in sorted(topics):
            stats = admin.topic_stats(topic) or {}
            subs = stats.get("subscriptions") or {}
            if not isinstance(subs, dict):
                continue
            subscriptions[topic] = sorted(
                name for name, sub in subs.items()
                if not (isinstance(sub, dict) and sub.get("isDurable") is False))
            for name, sub_stats in subs.items():
                sub_stats = sub_stats if isinstance(sub_stats, dict) else {}
                backlogs[(topic, name)] = int(sub_stats.get("msgBacklog") or 0)
                if sub_stats.get("isDurable") is False or not self._is_consumer_subscription(topic, name):
                    continue
                consumers = sub_stats.get("consumers")
                sub = self._subscription(
                    name, topic, str(sub_stats.get("type") or ""), backlogs[(topic, name)],
                    len(consumers) if isinstance(consumers, list) else None, on_broker=True)
                if sub is not None:
                    found[(sub.name, sub.source)] = sub
        for known in self.config.known_subscriptions:
            sub = self._subscription(known.name, known.source, known.mode, on_broker=False)
            if sub is not None and (sub.name, sub.source) not in found:
                found[(sub.name, sub.source)] = sub
        state = _TopologyState(topics=topics, subscriptions=subscriptions, backlogs=backlogs,
                               source="admin API")
        return list(found.values()), state

    def _state(self) -> _TopologyState:
        return self._inventory()[1]

    def _resolve(self, subscription: str) -> _Subscription:
        """A subscription by name: the console's registrations first, then the broker's."""
        for known in self.config.known_subscriptions:
            if known.name == subscription:
                sub = self._subscription(known.name, known.source, known.mode)
                if sub is not None:
                    return sub
        for sub in sorted(self._inventory()[0], key=lambda s: s.source):
            if sub.name == subscription:
                return sub
        raise BrokerError(f"unknown subscription {subscription!r} on cluster {self.config.name}: "
                          "register it with its source topic", permanent=True)

    # --- rebuild -------------------------------------------------------------------------
    def plan_rebuild(self, subscription: str) -> RebuildPlan:
        sub = self._resolve(subscription)
        return RebuildPlan(subscription, self._steps_needed(sub.topology, self._state()))

    def _steps_needed(self, topology: RetryTopology, state: _TopologyState) -> list[RebuildStep]:
        if not state.known:
            # Nothing tells what exists: plan what is harmless to repeat.
            unsure = "cannot be checked without an admin URL or metrics URL; harmless if it exists"
            return [RebuildStep("create topic", topology.retry_topic, unsure),
                    RebuildStep("create subscription", topology.dead_letter_topic,
                                f"{self.console_subscription} at the earliest message; {unsure}")]
        steps = []
        problems = self._missing(topology, state)
        if PROBLEM_RETRY_MISSING in problems:
            steps.append(RebuildStep("create topic", topology.retry_topic,
                                     f"retry letter topic (naming {topology.naming_version})"))
        if PROBLEM_DLQ_MISSING in problems:
            steps.append(RebuildStep("create topic", topology.dead_letter_topic,
                                     f"dead letter topic (naming {topology.naming_version})"))
        if PROBLEM_DLQ_UNSUBSCRIBED in problems:
            steps.append(RebuildStep(
                "create subscription", topology.dead_letter_topic,
                f"{self.console_subscription} at the earliest message, so no dead letter is lost"))
        return steps

    def apply_rebuild(self, plan: RebuildPlan) -> RebuildPlan:
        sub = self._resolve(plan.subscription)
        # Plan afresh: only what is still missing now is created (idempotent).
        needed = set(self._steps_needed(sub.topology, self._state()))
        done = [step for step in plan.steps if step in needed]
        for step in done:
            if step.action == "create topic":
                self._topic_create(step.target)
            elif step.action == "create subscription":
                self._subscription_create(step.target)
        if done and self._admin is None and self._metrics is not None:
            self._wait_for_metrics(sub.topology)
        return RebuildPlan(plan.subscription, done)

    def _topic_create(self, topic: str) -> None:
        if self._admin is not None:
            self._admin.topic_create(topic)
            return
        with _broker_errors(f"create topic {topic}"):
            # Brokers create a topic on first use; a producer is the lightest first use.
            self._pulsar().create_producer(topic).close()

    def _subscription_create(self, topic: str) -> None:
        if self._admin is not None:
            self._admin.subscription_create(topic, self.console_subscription)
            return
        with _broker_errors(f"create subscription on {topic}"):
            dead_letter_subscription_ensure(self._pulsar(), topic, self.console_subscription)

    def _wait_for_metrics(self, topology: RetryTopology) -> None:
        """The metrics are a snapshot refreshed every few seconds: wait until they show
        the rebuilt topology, so the next inventory does not report it missing."""
        deadline = time.monotonic() + self._settle_seconds
        while time.monotonic() < deadline:
            if not self._steps_needed(topology, self._state()):
                return
            time.sleep(0.5)

    # --- dead letters ----------------------------------------------------------------------
    def collect_dead_letters(self, subscription: str, sink: DeadLetterSink, *,
                             limit: int | None = None, batch_size: int = 500) -> int:
        sub = self._resolve(subscription)

        def to_letters(messages: list[pulsar.Message]) -> None:
            sink([_dead_letter(m, sub) for m in messages])

        return self._drain(sub.topology.dead_letter_topic, to_letters, limit=limit,
                           batch_size=batch_size)

    def discard_dead_letters(self, subscription: str) -> int:
        sub = self._resolve(subscription)
        return self._drain(sub.topology.dead_letter_topic, lambda messages: None, limit=None,
                           batch_size=500)

    def _drain(self, topic: str, handle: Callable[[list[pulsar.Message]], None], *,
               limit: int | None, batch_size: int) -> int:
        """Receive what waits on `topic` under the console's subscription in batches;
        acknowledge each batch only after `handle` returned.

        Nothing is lost: if `handle` raises, nothing of the batch is acknowledged and
        closing the consumer gives every unacknowledged message back to the
        subscription; a crash before the acks has the same effect.
        """
        batch_size = max(1, int(batch_size))
        if limit is not None and limit <= 0:
            return 0
        client = self._pulsar()
        with _broker_errors(f"subscribe to {topic}"):
            consumer = client.subscribe(
                topic, self.console_subscription, consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
                receiver_queue_size=max(batch_size, 10),
                batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(
                    batch_size, 64 * 1024 * 1024, _BATCH_WAIT_MS),
            )
        moved = 0
        try:
            try:
                last = consumer.get_last_message_id()
            except _TRANSIENT as exc:
                raise BrokerError(f"Pulsar could not read {topic}: {exc}") from None
            except pulsar.PulsarException:
                # pulsar-lite answers an error for a topic without messages; then only
                # quiet batches tell when to stop.
                last = None
            if last is not None and last.entry_id() < 0:
                return 0  # nothing was ever written
            empty, reached_last = 0, False
            while limit is None or moved < limit:
                with _broker_errors(f"read {topic}"):
                    batch = consumer.batch_receive()
                if not batch:
                    empty += 1
                    if empty >= (1 if reached_last else _EMPTY_BATCHES_TO_STOP):
                        break
                    continue
                empty = 0
                if limit is not None:
                    batch = batch[: limit - moved]  # the rest goes back on close
                handle(batch)
                # The batch is safe where `handle` put it: only now leave the DLQ.
                with _broker_errors(f"acknowledge on {topic}"):
                    for message in batch:
                        consumer.acknowledge(message)
                moved += len(batch)
                if last is not None and not (batch[-1].message_id() < last):
                    # What was there when we started has come; one quiet batch more
                    # picks up anything redelivered out of order.
                    reached_last = True
        finally:
            try:
                consumer.close()  # flushes the acknowledgements
            except pulsar.PulsarException:
                logger.warning("closing the DLQ consumer on %s failed; unacknowledged "
                               "messages stay on the broker", topic)
        return moved

    # --- peek ------------------------------------------------------------------------------
    def peek_retry_queue(self, subscription: str, *, limit: int = 50) -> list[PeekedMessage]:
        sub = self._resolve(subscription)
        limit = max(0, int(limit))
        if limit == 0:
            return []
        # A Reader has no durable subscription: reading moves no cursor and consumes nothing.
        last: collections.deque[PeekedMessage] = collections.deque(maxlen=limit)
        with _broker_errors(f"read {sub.topology.retry_topic}"):
            reader = self._pulsar().create_reader(sub.topology.retry_topic, pulsar.MessageId.earliest,
                                                  receiver_queue_size=min(max(limit, 10), 1000))
        try:
            with _broker_errors(f"read {sub.topology.retry_topic}"):
                scanned = 0
                while scanned < PEEK_SCAN_LIMIT and reader.has_message_available():
                    message = reader.read_next(int(self.config.timeout_seconds * 1000))
                    last.append(_peeked(message))
                    scanned += 1
        finally:
            # a reader holds nothing durable
            with contextlib.suppress(pulsar.PulsarException):
                reader.close()
        return list(last)

    # --- republish -------------------------------------------------------------------------
    def replay_destinations(self, subscription: str) -> list[tuple[str, str]]:
        sub = self._resolve(subscription)
        return [("", f"where it came from (REAL_TOPIC, else {sub.source})"),
                (sub.topology.retry_topic, "the retry topic (the consumer retries it again)")]

    def republish(self, messages: Sequence[ReplayMessage]) -> list[ReplayOutcome]:
        outcomes: dict[int, ReplayOutcome] = {}
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        for index, message in enumerate(messages):
            destination = message.destination or message.properties.get(REAL_TOPIC) or message.source
            try:
                by_topic[topic_parse(destination).full].append(index)
            except InvalidName as exc:
                outcomes[index] = ReplayOutcome(message.key, False, error=str(exc), permanent=True)
        for topic, indexes in by_topic.items():
            self._republish_to(topic, [(i, messages[i]) for i in indexes], outcomes)
        return [outcomes[i] for i in range(len(messages))]

    def _replay_producer(self, topic: str) -> pulsar.Producer:
        """One batching producer per destination, kept until close(): a replay job
        calls republish chunk after chunk."""
        producer = self._producers.get(topic)
        if producer is not None and not producer.is_connected():
            # The broker went away since the last chunk: start afresh, so an
            # unreachable broker raises (and the caller waits) instead of every message
            # timing out one by one.
            self._producers.pop(topic, None)
            with contextlib.suppress(pulsar.PulsarException):
                producer.close()
            producer = None
        if producer is None:
            producer = self._pulsar().create_producer(
                topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                max_pending_messages=1000, block_if_queue_full=True,
                send_timeout_millis=int(self.config.timeout_seconds * 1000) or 5000)
            self._producers[topic] = producer
        return producer

    def _republish_to(self, topic: str, batch: list[tuple[int, ReplayMessage]],
                      outcomes: dict[int, ReplayOutcome]) -> None:
        try:
            producer = self._replay_producer(topic)
        except _TRANSIENT as exc:
            raise BrokerError(f"cannot reach Pulsar to republish to {topic}: {exc}") from None
        except pulsar.PulsarException as exc:
            for index, message in batch:
                outcomes[index] = ReplayOutcome(message.key, False, error=f"{topic}: {exc}",
                                                permanent=_permanent(exc))
            return
        done = threading.Event()
        pending = [len(batch)]
        lock = threading.Lock()

        def callback_for(index: int, key: str) -> Callable[[Any, Any], None]:
            def confirmed(result: Any, message_id: Any) -> None:
                if result == pulsar.Result.Ok:
                    outcome = ReplayOutcome(key, True, broker_message_id=_message_key(topic, message_id))
                else:
                    outcome = ReplayOutcome(key, False, error=f"broker refused: {result}",
                                            permanent=result in _PERMANENT_RESULTS)
                with lock:
                    outcomes[index] = outcome
                    pending[0] -= 1
                    if pending[0] == 0:
                        done.set()
            return confirmed

        try:
            for index, message in batch:
                try:
                    producer.send_async(bytes(message.payload), callback_for(index, message.key),
                                        properties=_replay_properties(message))
                except (pulsar.PulsarException, TypeError, ValueError) as exc:
                    with lock:
                        outcomes[index] = ReplayOutcome(message.key, False, error=str(exc),
                                                        permanent=not isinstance(exc, _TRANSIENT))
                        pending[0] -= 1
                        if pending[0] == 0:
                            done.set()
            # each message's callback reports its own outcome
            with contextlib.suppress(pulsar.PulsarException):
                producer.flush()
            done.wait(self.config.timeout_seconds * 2 + 5)
        finally:
            if not done.is_set():
                # Something is stuck: start afresh next time. The outcomes below say
                # what was confirmed.
                self._producers.pop(topic, None)
                with contextlib.suppress(pulsar.PulsarException):
                    producer.close()
        for index, message in batch:
            # No confirm seen: not confirmed, so the letter stays in the archive.
            outcomes.setdefault(index, ReplayOutcome(message.key, False, error="no confirm from the broker"))


_PERMANENT_RESULTS = {pulsar.Result.MessageTooBig, pulsar.Result.InvalidMessage,
                      pulsar.Result.AuthorizationError, pulsar.Result.AuthenticationError,
                      pulsar.Result.InvalidTopicName, pulsar.Result.TopicNotFound}


def _permanent(exc: Exception) -> bool:
    return not isinstance(exc, _TRANSIENT)


def _replay_properties(message: ReplayMessage) -> dict[str, str]:
    properties = {str(k): str(v) for k, v in message.properties.items()
                  if k not in (RETRY_TOPIC, DELAY_TIME)}
    properties[RECONSUMETIMES] = "0"
    origin = message.origin_message_id or properties.get(ORIGIN_MESSAGE_ID, "")
    if origin:
        properties[ORIGIN_MESSAGE_ID] = origin
        properties[REPLAY_OF] = origin
    else:
        properties[REPLAY_OF] = message.key
    return properties


def _message_key(topic: str, message_id: Any) -> str:
    """A message id that is stable and unique on the cluster: topic plus position."""
    return (f"{topic}@{message_id.ledger_id()}:{message_id.entry_id()}:"
            f"{message_id.partition()}:{message_id.batch_index()}")


def _published_at(message: pulsar.Message) -> datetime | None:
    stamp = message.publish_timestamp()
    return datetime.fromtimestamp(stamp / 1000, tz=UTC) if stamp else None


def _dead_letter(message: pulsar.Message, sub: _Subscription) -> DeadLetter:
    properties = dict(message.properties())
    try:
        retry_count = max(int(properties.get(RECONSUMETIMES, "0")), 0)
    except ValueError:
        retry_count = 0
    return DeadLetter(
        broker_message_id=_message_key(message.topic_name(), message.message_id()),
        subscription=sub.name,
        source=properties.get(REAL_TOPIC) or sub.source,
        payload=message.data(),
        properties=properties,
        retry_count=retry_count,
        origin_message_id=properties.get(ORIGIN_MESSAGE_ID, ""),
        last_failure_at=_published_at(message),
    )


def _peeked(message: pulsar.Message) -> PeekedMessage:
    properties = dict(message.properties())
    due_at = _published_at(message)
    try:
        if due_at is not None and DELAY_TIME in properties:
            due_at += timedelta(milliseconds=int(properties[DELAY_TIME]))
    except ValueError:
        pass  # a foreign DELAY_TIME: show the publish time
    try:
        retry_count = max(int(properties.get(RECONSUMETIMES, "0")), 0)
    except ValueError:
        retry_count = 0
    return PeekedMessage(message_id=_message_key(message.topic_name(), message.message_id()),
                         payload=message.data(), properties=properties,
                         retry_count=retry_count, due_at=due_at)


def _state_from_metrics(snapshot: MetricsSnapshot) -> _TopologyState:
    subscriptions: dict[str, list[str]] = {}
    for topic in snapshot.topics:
        names = snapshot.subscriptions_of(topic)
        count = snapshot.subscription_counts.get(topic)
        # Per-subscription samples can outlive an unsubscribe; the count is current.
        if count == 0:
            names = []
        subscriptions[topic] = names
    return _TopologyState(topics=set(snapshot.topics), subscriptions=subscriptions,
                          backlogs=dict(snapshot.backlogs), source="broker metrics")


class _broker_errors:
    """Turn client exceptions into BrokerError, transient or permanent."""

    def __init__(self, doing: str) -> None:
        self.doing = doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, BrokerError):
            return False
        if isinstance(exc, pulsar.PulsarException):
            raise BrokerError(f"Pulsar could not {self.doing}: {exc}",
                              permanent=_permanent(exc)) from None
        if isinstance(exc, InvalidName):
            raise BrokerError(str(exc), permanent=True) from None
        return False


__all__ = ["KnownSubscription", "PulsarAdapter"]
