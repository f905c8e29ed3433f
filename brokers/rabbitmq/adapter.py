"""The console's view of a RabbitMQ cluster using the TTL + dead-letter-exchange topology.

Inventory and health come from the management HTTP API (`admin_url`, credentials
`username`/`password`); everything that moves messages goes over AMQP (`service_url`),
where counts are exact and publisher confirms exist. The vhost is `options["vhost"]`
or the path of the amqp URL. Other cluster options (see `Topology`): `exchange`,
`retry_exchange`, `failed_exchange`, `retry_ttl_ms`, `max_retries`, and
`max_message_bytes` (largest body a replay sends, default 128 MiB as RabbitMQ's own
default limit) and `replay_window` (replayed messages in flight awaiting their confirm,
default 2000).

A subscription here is a consuming queue `{queue}`; its retry queue is
`{queue}@retry` and its DLQ `{queue}@failed`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from queue import Empty, Full, Queue
from typing import Any

import pika
import pika.exceptions

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
from brokers.rabbitmq.connection import blocking_connection, broker_error, server_version, vhost_of
from brokers.rabbitmq.management import ManagementClient
from brokers.rabbitmq.messages import (
    AMQP_PREFIX,
    HEADER_DEAD_LETTER_ID,
    HEADER_FIRST_FAILURE,
    HEADER_LAST_FAILURE,
    HEADER_ORIG_ROUTING_KEY,
    content_id,
    header_text,
    millis_to_datetime,
    replay_properties,
    retry_count_of,
    string_properties,
)
from brokers.rabbitmq.publisher import Publication, publish_confirmed
from brokers.rabbitmq.topology import (
    Topology,
    bind_queue,
    declare_exchange,
    declare_queue,
    failed_queue,
    is_derived_queue,
    retry_queue,
    validate_queue_name,
)

DESTINATION_QUEUE = "queue"
DESTINATION_ORIGINAL = "original"
DEFAULT_MAX_MESSAGE_BYTES = 128 * 1024 * 1024
DEFAULT_REPLAY_WINDOW = 2000
MODE = "ttl-dlx"

PEEK_EXPLANATION = (
    "RabbitMQ has no way to look at a queue without taking messages off it. Peeking "
    "fetches the first messages of the retry queue without acknowledging them and puts "
    "them straight back (requeue). Nothing is lost, and RabbitMQ puts a requeued message "
    "back in its place where it can, but a message may be marked redelivered, and one "
    "whose wait ended during the peek goes back to its queue just after it."
)


@dataclass
class _State:
    """What the management API says about the cluster's exchanges, queues and bindings."""

    queues: dict[str, dict[str, Any]]
    exchanges: dict[str, dict[str, Any] | None]
    # exchange -> queue -> routing keys bound
    bindings: dict[str, dict[str, set[str]]]


def _topic_matches(pattern: str, key: str) -> bool:
    """Whether a topic binding key (with `*` and `#` words) matches a routing key."""
    words, target = pattern.split("."), key.split(".")

    @functools.cache  # several `#` words would otherwise explore the same positions again
    def match(i: int, j: int) -> bool:
        if i == len(words):
            return j == len(target)
        if words[i] == "#":
            return any(match(i + 1, k) for k in range(j, len(target) + 1))
        if j == len(target):
            return False
        return (words[i] == "*" or words[i] == target[j]) and match(i + 1, j + 1)

    return match(0, 0)


def _rate(stats: Mapping[str, Any] | None, name: str) -> float | None:
    details = (stats or {}).get(f"{name}_details") or {}
    rate = details.get("rate")
    return float(rate) if isinstance(rate, int | float) else None


class _DeadLetterReader(threading.Thread):
    """Reads a DLQ for `collect_dead_letters` on its own connection, in its own thread.

    Everything touching the AMQP connection happens in this thread (pika connections
    are not thread-safe): it hands batches over through `batches` and sends the acks
    the caller queues in `acks`, in order, each only after the caller's sink returned.
    If the caller fails, the reader closes the connection without acknowledging the
    rest, and RabbitMQ puts those messages back.
    """

    AHEAD = 2  # batches handed over but not yet acknowledged, besides the one in the sink

    def __init__(self, adapter: RabbitMQAdapter, subscription: str, *, limit: int | None,
                 batch_size: int) -> None:
        super().__init__(name=f"redrive-collect-{subscription}", daemon=True)
        self.adapter = adapter
        self.subscription = subscription
        self.queue_name = failed_queue(subscription)
        self.limit = limit
        self.batch_size = batch_size
        self.batches: Queue[tuple[str, Any, int]] = Queue(maxsize=self.AHEAD)
        self.acks: Queue[int] = Queue()
        self.stopping = threading.Event()
        self.acked = 0

    # caller's side
    def next_item(self) -> tuple[str, Any, int]:
        while True:
            try:
                kind, value, tag = self.batches.get(timeout=0.5)
            except Empty:
                if not self.is_alive():
                    raise BrokerError("the dead-letter reader stopped unexpectedly") from None
                continue
            if kind == "error":
                raise value
            return kind, value, tag

    def acknowledge(self, tag: int) -> None:
        self.acks.put(tag)

    def finish(self) -> None:
        """Stop the reader and wait until its connection is closed (so, after a failure,
        RabbitMQ has put every unacknowledged message back before the caller goes on)."""
        self.stopping.set()
        self.join()

    # reader's side
    def run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            self._put(("error", exc, 0))

    def _put(self, item: tuple[str, Any, int]) -> bool:
        """Hand an item over, sending acks while the caller is busy; False if stopping."""
        while True:
            try:
                self.batches.put(item, timeout=0.05)
                return True
            except Full:
                if self.stopping.is_set():
                    return False
                self._send_acks()

    def _send_acks(self) -> None:
        while True:
            try:
                tag = self.acks.get_nowait()
            except Empty:
                return
            self.channel.basic_ack(delivery_tag=tag, multiple=True)
            self.acked = tag

    def _read(self) -> None:
        adapter, name = self.adapter, self.queue_name
        with adapter._connection(f"collecting {name!r}") as connection:
            self.channel = channel = connection.channel()
            waiting = adapter._open_queue(channel, name)
            target = waiting if self.limit is None else min(max(int(self.limit), 0), waiting)
            if target > 0:
                self._consume(channel, target)
            self._put(("end", None, 0))
            # Wait for the caller's last acks (it sets `stopping` once its sink is done).
            while not self.stopping.is_set():
                connection.process_data_events(time_limit=0.05)
                self._send_acks()
            self._send_acks()

    def _consume(self, channel: Any, target: int) -> None:
        prefetch = min(target, self.batch_size * (self.AHEAD + 1), 65535)
        channel.basic_qos(prefetch_count=prefetch)
        idle_limit = max(self.adapter.config.timeout_seconds, 1.0)
        batch: list[DeadLetter] = []
        seen: dict[str, int] = {}
        received = last_tag = 0
        idle_since = time.monotonic()
        for method, properties, body in channel.consume(self.queue_name, inactivity_timeout=0.05):
            self._send_acks()
            if self.stopping.is_set():
                return
            if method is None:
                # Silence with room in the prefetch window means the queue is empty (someone
                # else drained it); with the window full, it means the caller is busy.
                if received - self.acked < prefetch and time.monotonic() - idle_since > idle_limit:
                    break
                continue
            idle_since = time.monotonic()
            batch.append(self.adapter._dead_letter(self.queue_name, self.subscription, method,
                                                   properties, body, seen))
            received += 1
            last_tag = method.delivery_tag
            if len(batch) >= self.batch_size or received >= target:
                if not self._put(("batch", batch, last_tag)):
                    return
                batch = []
            if received >= target:
                break
        if batch and not self._put(("batch", batch, last_tag)):
            return
        # Deliveries prefetched past the target go back to the queue, unacknowledged.
        channel.cancel()


class RabbitMQAdapter(BrokerAdapter):
    kind = "rabbitmq"
    peek_note = PEEK_EXPLANATION

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config)
        self.topology = Topology.from_options(config.options)
        self.vhost = vhost_of(config)
        try:
            self.max_message_bytes = int(config.options.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES))
            self.replay_window = max(int(config.options.get("replay_window", DEFAULT_REPLAY_WINDOW)), 1)
        except (TypeError, ValueError) as exc:
            raise BrokerError("max_message_bytes and replay_window must be integers", permanent=True) from exc
        self._management_client: ManagementClient | None = None

    def close(self) -> None:
        if self._management_client is not None:
            self._management_client.close()
            self._management_client = None

    def _management(self) -> ManagementClient:
        if self._management_client is None:
            self._management_client = ManagementClient(self.config, self.vhost)
        return self._management_client

    def _connection(self, doing: str) -> Any:
        return blocking_connection(self.config, doing=doing)

    # connection -------------------------------------------------------------------------
    def check_connection(self) -> str:
        with self._connection("connecting") as connection:
            version = server_version(connection)
        if self.config.admin_url:
            management = self._management()
            version = management.overview().get("rabbitmq_version") or version
            management.check_vhost()
        exchanges = ", ".join(self.topology.exchanges)
        return f"RabbitMQ {version or '(version unknown)'}, vhost {self.vhost!r}, exchanges {exchanges}"

    # inventory --------------------------------------------------------------------------
    def _state(self) -> _State:
        management = self._management()
        queues = {q["name"]: q for q in management.queues()}
        exchanges = {name: management.exchange(name) for name in self.topology.exchanges}
        bindings: dict[str, dict[str, set[str]]] = {}
        for name, exchange in exchanges.items():
            by_queue: dict[str, set[str]] = {}
            if exchange is not None:
                for binding in management.bindings_from(name):
                    if binding.get("destination_type") == "queue":
                        by_queue.setdefault(binding["destination"], set()).add(binding.get("routing_key", ""))
            bindings[name] = by_queue
        return _State(queues=queues, exchanges=exchanges, bindings=bindings)

    def _subscription_names(self, state: _State) -> set[str]:
        """Consuming queues of this cluster's topology: bound to `master`, or whose
        `@retry`/`@failed` queue is tied to the cluster's exchanges, or registered."""
        t = self.topology
        names = {q for q in state.bindings[t.exchange] if not is_derived_queue(q)}
        for exchange, suffix_queue in ((t.retry_exchange, retry_queue), (t.failed_exchange, failed_queue)):
            for destination, keys in state.bindings[exchange].items():
                names.update(k for k in keys if destination == suffix_queue(k))
        for name, queue in state.queues.items():
            if name.endswith("@retry") and (queue.get("arguments") or {}).get(
                    "x-dead-letter-exchange") == t.exchange:
                names.add(name[: -len("@retry")])
        names.update(k.name for k in self.config.known_subscriptions)
        valid = set()
        for name in names:
            with contextlib.suppress(BrokerError):
                valid.add(validate_queue_name(name))
        return valid

    def list_subscriptions(self) -> list[SubscriptionInfo]:
        state = self._state()
        return [self._info(name, state) for name in sorted(self._subscription_names(state))]

    def _info(self, name: str, state: _State) -> SubscriptionInfo:
        t = self.topology
        problems, _steps = self._diagnose(name, state)
        queue = state.queues.get(name) or {}
        retry = state.queues.get(retry_queue(name)) or {}
        failed = state.queues.get(failed_queue(name)) or {}
        keys = sorted(state.bindings[t.exchange].get(name, set()) - {name})
        stats = queue.get("message_stats")
        details = {
            "exchange": t.exchange,
            "retry_exchange": t.retry_exchange,
            "failed_exchange": t.failed_exchange,
            "routing_keys": keys,
            "retry_ttl_ms": self._effective(retry).get("message-ttl"),
            "max_retries": t.max_retries,
            "retry_consumers": retry.get("consumers"),
            "dead_letter_consumers": failed.get("consumers"),
            "publish_rate": _rate(stats, "publish"),
            "deliver_rate": _rate(stats, "deliver_get"),
            "ack_rate": _rate(stats, "ack"),
            "retry_rate": _rate(retry.get("message_stats"), "publish"),
            "dead_letter_rate": _rate(failed.get("message_stats"), "publish"),
            "vhost": self.vhost,
            "note": "depths and rates are the management API's samples (every few seconds)",
            "peek_note": PEEK_EXPLANATION,
        }
        return SubscriptionInfo(
            name=name,
            source=", ".join(keys) or name,
            mode=MODE,
            retry_queue=retry_queue(name),
            dead_letter_queue=failed_queue(name),
            backlog=queue.get("messages") if queue else None,
            retry_depth=retry.get("messages") if retry else None,
            dead_letter_depth=failed.get("messages") if failed else None,
            consumers=queue.get("consumers") if queue else None,
            problems=problems,
            details=details,
        )

    @staticmethod
    def _effective(queue: Mapping[str, Any]) -> dict[str, Any]:
        """TTL and dead-letter settings as RabbitMQ applies them: a policy's, overridden
        by the queue's own arguments (for the TTL the lower of the two wins)."""
        policy = queue.get("effective_policy_definition") or {}
        if not isinstance(policy, Mapping):
            policy = {}
        arguments = queue.get("arguments") or {}
        effective = {k: policy[k] for k in ("message-ttl", "dead-letter-exchange",
                                            "dead-letter-routing-key") if k in policy}
        for key in ("dead-letter-exchange", "dead-letter-routing-key"):
            if f"x-{key}" in arguments:
                effective[key] = arguments[f"x-{key}"]
        if "x-message-ttl" in arguments:
            ttl = arguments["x-message-ttl"]
            effective["message-ttl"] = min(ttl, effective.get("message-ttl", ttl))
        return effective

    def _diagnose(self, name: str, state: _State) -> tuple[list[str], list[RebuildStep]]:
        """What is missing or wrong for one subscription, and the steps that repair what
        can be repaired without deleting a queue that holds messages."""
        t = self.topology
        problems: list[str] = []
        steps: list[RebuildStep] = []
        for exchange in t.exchanges:
            found = state.exchanges.get(exchange)
            if found is None:
                problems.append(f"exchange {exchange} is missing")
                steps.append(RebuildStep("declare exchange", exchange, "topic, durable"))
            elif found.get("type") != "topic":
                problems.append(f"exchange {exchange} is a {found.get('type')} exchange, not topic: "
                                "rebuild cannot change that (delete and recreate it by hand)")

        for queue in (name, retry_queue(name), failed_queue(name)):
            if queue not in state.queues:
                problems.append(f"queue {queue} is missing")
                detail = "durable"
                if queue == retry_queue(name):
                    detail = (f"durable, TTL {t.retry_ttl_ms} ms, dead-letters to {t.exchange} "
                              f"with routing key {name}")
                steps.append(RebuildStep("declare queue", queue, detail))

        retry = state.queues.get(retry_queue(name))
        if retry is not None:
            effective = self._effective(retry)
            wrong = []
            if "message-ttl" not in effective:
                wrong.append("has no TTL (messages would wait there forever)")
            if effective.get("dead-letter-exchange") != t.exchange:
                wrong.append(f"dead-letters to {effective.get('dead-letter-exchange') or 'nowhere'!r} "
                             f"instead of {t.exchange!r}")
            if effective.get("dead-letter-routing-key") != name:
                wrong.append(f"dead-letters with routing key "
                             f"{effective.get('dead-letter-routing-key') or '(the original)'!r} "
                             f"instead of {name!r}")
            if wrong:
                # The management API's figures lag; whether a queue may be recreated is
                # decided on the exact count (and the delete itself is if-empty anyway).
                depth, consumers = self._exact_counts(retry_queue(name))
                text = f"retry queue {retry_queue(name)} " + "; ".join(wrong)
                if depth or consumers:
                    problems.append(f"{text}. It holds {depth} messages or has consumers and Redrive "
                                    "never deletes such a queue: let it drain, then rebuild")
                else:
                    problems.append(text)
                    steps.append(RebuildStep(
                        "recreate empty queue", retry_queue(name),
                        f"TTL {t.retry_ttl_ms} ms, dead-letters to {t.exchange} with routing key {name}"))

        for queue, exchange, key, why in (
            (name, t.exchange, name, "retried messages coming back from the retry queue would be dropped"),
            (retry_queue(name), t.retry_exchange, name, "failed messages could not be retried"),
            (failed_queue(name), t.failed_exchange, name, "dead letters would be dropped"),
        ):
            if key not in state.bindings.get(exchange, {}).get(queue, set()):
                if queue in state.queues and state.exchanges.get(exchange) is not None:
                    problems.append(f"{queue} is not bound to {exchange} with routing key {key}: {why}")
                steps.append(RebuildStep("bind queue", queue, f"to {exchange} with routing key {key}"))

        for other, keys in state.bindings.get(t.exchange, {}).items():
            if other != name and any(_topic_matches(k, name) for k in keys):
                problems.append(f"queue {other} is bound to {t.exchange} with a key matching {name!r}: "
                                "it would also receive this queue's retries")
        return problems, steps

    def _exact_counts(self, queue: str) -> tuple[int, int]:
        """(messages, consumers) of a queue as RabbitMQ counts them right now."""
        with self._connection(f"counting {queue!r}") as connection:
            ok = connection.channel().queue_declare(queue=queue, passive=True).method
            return ok.message_count, ok.consumer_count

    # rebuild ----------------------------------------------------------------------------
    def plan_rebuild(self, subscription: str) -> RebuildPlan:
        validate_queue_name(subscription)
        _problems, steps = self._diagnose(subscription, self._state())
        return RebuildPlan(subscription=subscription, steps=steps)

    def apply_rebuild(self, plan: RebuildPlan) -> RebuildPlan:
        # Only what is still needed now: applying a stale or repeated plan does nothing twice.
        current = self.plan_rebuild(plan.subscription)
        wanted = set(plan.steps)
        todo = [step for step in current.steps if step in wanted]
        if not todo:
            return RebuildPlan(subscription=plan.subscription)
        name = plan.subscription
        t = self.topology
        done: list[RebuildStep] = []
        with self._connection(f"rebuilding {name!r}") as connection:
            channel = connection.channel()
            for step in todo:
                if step.action == "declare exchange":
                    declare_exchange(channel, step.target)
                elif step.action == "declare queue":
                    declare_queue(channel, step.target,
                                  t.retry_queue_arguments(name) if step.target == retry_queue(name) else None)
                elif step.action == "recreate empty queue":
                    # if_empty/if_unused make RabbitMQ itself refuse if messages or a consumer
                    # arrived since the plan: a queue holding messages is never deleted.
                    try:
                        channel.queue_delete(queue=step.target, if_empty=True, if_unused=True)
                    except pika.exceptions.ChannelClosedByBroker as exc:
                        raise BrokerError(f"{step.target} is no longer empty or unused; nothing was "
                                          f"deleted ({exc.reply_text})", permanent=True) from exc
                    declare_queue(channel, step.target, t.retry_queue_arguments(name))
                    # A deleted queue loses its bindings: bind the new one again.
                    bind_queue(channel, step.target, t.retry_exchange, name)
                elif step.action == "bind queue":
                    exchange = {retry_queue(name): t.retry_exchange,
                                failed_queue(name): t.failed_exchange}.get(step.target, t.exchange)
                    bind_queue(channel, step.target, exchange, name)
                done.append(step)
        return RebuildPlan(subscription=name, steps=done)

    # collect ----------------------------------------------------------------------------
    def _open_queue(self, channel: Any, queue: str) -> int:
        try:
            return channel.queue_declare(queue=queue, passive=True).method.message_count
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                raise BrokerError(f"queue {queue} does not exist in vhost {self.vhost!r}: "
                                  "rebuild the subscription's topology", permanent=True) from exc
            raise

    def _dead_letter(self, queue: str, subscription: str, method: Any, properties: pika.BasicProperties,
                     body: bytes, seen: dict[str, int]) -> DeadLetter:
        headers = properties.headers or {}
        if HEADER_DEAD_LETTER_ID in headers:
            message_id = header_text(headers[HEADER_DEAD_LETTER_ID])
        else:
            message_id = content_id(queue, properties, body)
            # Byte-identical foreign messages in one run get distinct ids in queue order,
            # which a redelivery keeps (requeued messages return to their place).
            seen[message_id] = seen.get(message_id, 0) + 1
            if seen[message_id] > 1:
                message_id = f"{message_id}-{seen[message_id]}"
        original_key = headers.get(HEADER_ORIG_ROUTING_KEY)
        return DeadLetter(
            broker_message_id=message_id,
            subscription=subscription,
            source=header_text(original_key) if original_key is not None else method.routing_key,
            payload=bytes(body),
            properties=string_properties(properties),
            retry_count=retry_count_of(headers),
            origin_message_id=properties.message_id or "",
            first_failure_at=millis_to_datetime(headers.get(HEADER_FIRST_FAILURE)),
            last_failure_at=millis_to_datetime(headers.get(HEADER_LAST_FAILURE)),
        )

    def collect_dead_letters(self, subscription: str, sink: DeadLetterSink, *, limit: int | None = None,
                             batch_size: int = 500) -> int:
        """Drain `{queue}@failed` into `sink`, batch by batch, acknowledging after the sink.

        The AMQP side runs in a reader thread with its own connection, a batch or two
        ahead, so RabbitMQ's deliveries and the archive's commits overlap; the sink runs
        on the calling thread (the archive's database connection belongs to it).
        """
        validate_queue_name(subscription)
        reader = _DeadLetterReader(self, subscription, limit=limit, batch_size=max(int(batch_size), 1))
        reader.start()
        moved = 0
        try:
            while True:
                kind, letters, tag = reader.next_item()
                if kind == "end":
                    break
                # The sink returns only once the batch is committed; the ack is sent after
                # it, so a crash in between leaves the batch on the broker, and the stable
                # ids make collecting it again harmless.
                sink(letters)
                reader.acknowledge(tag)
                moved += len(letters)
        finally:
            reader.finish()
        return moved

    # peek -------------------------------------------------------------------------------
    def peek_retry_queue(self, subscription: str, *, limit: int = 50) -> list[PeekedMessage]:
        """Messages waiting in `{queue}@retry`, oldest first.

        RabbitMQ cannot browse a queue: each message is fetched without an ack and all
        are requeued at the end (see PEEK_EXPLANATION). While held they cannot expire,
        so a peek can delay a retry by its own duration, never lose it.
        """
        validate_queue_name(subscription)
        queue = retry_queue(subscription)
        ttl_ms = self._retry_ttl_ms(queue)
        peeked: list[PeekedMessage] = []
        with self._connection(f"peeking {queue!r}") as connection:
            channel = connection.channel()
            self._open_queue(channel, queue)
            try:
                for _ in range(max(int(limit), 0)):
                    method, properties, body = channel.basic_get(queue=queue, auto_ack=False)
                    if method is None:
                        break
                    headers = properties.headers or {}
                    last = millis_to_datetime(headers.get(HEADER_LAST_FAILURE))
                    peeked.append(PeekedMessage(
                        message_id=properties.message_id or content_id(queue, properties, body),
                        payload=bytes(body),
                        properties=string_properties(properties),
                        retry_count=retry_count_of(headers),
                        due_at=last + timedelta(milliseconds=ttl_ms) if last else None,
                    ))
            finally:
                if channel.is_open:
                    # delivery tag 0 with multiple: every message fetched on this channel.
                    channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)
        return peeked

    def _retry_ttl_ms(self, queue: str) -> int:
        """The TTL the retry queue really has (it may differ from the cluster's option),
        from the management API when there is one; else the configured TTL."""
        if self.config.admin_url:
            with contextlib.suppress(BrokerError):
                found = self._management().queue(queue)
                ttl = self._effective(found or {}).get("message-ttl")
                if isinstance(ttl, int):
                    return ttl
        return self.topology.retry_ttl_ms

    # republish --------------------------------------------------------------------------
    def replay_destinations(self, subscription: str) -> list[tuple[str, str]]:
        return [
            (DESTINATION_QUEUE, f"only {subscription} (exchange {self.topology.exchange}, "
                                f"routing key {subscription})"),
            (DESTINATION_ORIGINAL, f"every subscriber of the original routing key "
                                   f"(x-orig-routing-key on exchange {self.topology.exchange})"),
        ]

    def republish(self, messages: Sequence[ReplayMessage]) -> list[ReplayOutcome]:
        outcomes: dict[int, ReplayOutcome] = {}
        publications: list[Publication] = []
        index_of: dict[str, int] = {}
        for index, message in enumerate(messages):
            try:
                publication = self._publication(message)
            except BrokerError as exc:
                outcomes[index] = ReplayOutcome(key=message.key, confirmed=False, error=exc.message,
                                                permanent=exc.permanent)
                continue
            if publication.key in index_of:
                outcomes[index] = ReplayOutcome(key=message.key, confirmed=False, permanent=True,
                                                error="the same key appears twice in one replay")
                continue
            index_of[publication.key] = index
            publications.append(publication)
        for publication, result in zip(publications, publish_confirmed(self.config, publications,
                                                                      window=self.replay_window),
                                       strict=True):
            index = index_of[publication.key]
            outcomes[index] = ReplayOutcome(
                key=messages[index].key, confirmed=result.confirmed,
                broker_message_id=(publication.properties.message_id or "") if result.confirmed else "",
                error=result.error, permanent=result.permanent)
        return [outcomes[i] for i in range(len(messages))]

    def _publication(self, message: ReplayMessage) -> Publication:
        validate_queue_name(message.subscription)
        if len(message.payload) > self.max_message_bytes:
            raise BrokerError(f"the message is {len(message.payload)} bytes, over the "
                              f"{self.max_message_bytes}-byte limit", permanent=True)
        destination = message.destination or DESTINATION_QUEUE
        if destination == DESTINATION_QUEUE:
            routing_key = message.subscription
        elif destination == DESTINATION_ORIGINAL:
            routing_key = message.properties.get(HEADER_ORIG_ROUTING_KEY) or message.source
        else:
            raise BrokerError(f"unknown replay destination {destination!r}", permanent=True)
        if len(routing_key.encode()) > 255:
            raise BrokerError("the routing key is longer than 255 bytes", permanent=True)
        origin = message.origin_message_id or message.properties.get(AMQP_PREFIX + "message_id", "")
        properties = replay_properties(message.properties, replay_of=origin, key=message.key)
        if not properties.message_id:
            properties.message_id = origin or uuid.uuid4().hex
        return Publication(key=message.key, exchange=self.topology.exchange, routing_key=routing_key,
                           body=bytes(message.payload), properties=properties)

    # discard ----------------------------------------------------------------------------
    def discard_dead_letters(self, subscription: str) -> int:
        validate_queue_name(subscription)
        queue = failed_queue(subscription)
        with self._connection(f"purging {queue!r}") as connection:
            channel = connection.channel()
            self._open_queue(channel, queue)
            return channel.queue_purge(queue=queue).method.message_count


__all__ = ["PEEK_EXPLANATION", "RabbitMQAdapter", "broker_error"]
