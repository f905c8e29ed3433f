"""The push consumer: clustering, broadcasting and orderly modes.

The listener gets one message and returns `ConsumeResult.SUCCESS`,
`ConsumeResult.RECONSUME_LATER` or `RetryLater(level)`. Returning None, raising, or
not finishing within `consume_timeout` seconds of the message being fetched (time
spent waiting in the consumer's own queue included) all count as failure.

- Clustering (default): each message goes to one consumer of the group. On failure
  the message is sent back (`retry.send_back`): to `%RETRY%{group}` at level
  `3 + reconsumeTimes`, or to `%DLQ%{group}` once reconsumeTimes >= max (default 16).
  The consumer reads its retry topic too. If sending back fails (Redis away), the
  message is consumed again locally after 5 s with its count + 1; it stays pending in
  Redis meanwhile, so a crash then loses nothing (another consumer claims it).
- Broadcasting: every consumer instance gets every message, from its own offset. A
  failure is logged as a warning and the message dropped: broadcasting never retries.
- Orderly: one consumer at a time holds each topic's queue (a lock in Redis) and
  consumes its messages one by one. A failure retries the same message in place every
  `suspend_seconds` (default 3 s), blocking the queue; with a max set, a message past
  it goes to the DLQ, otherwise it retries until it succeeds.

Messages a consumer fetched but did not settle stay in the group's pending list; after
`consume_timeout` another consumer claims them (XAUTOCLAIM), so a crashed consumer's
messages are consumed again, never lost.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace

from brokers.base import BrokerError
from brokers.rocketmq.connection import Connection
from brokers.rocketmq.message import Message, MessageError, decode, tag_matches, validate_user_topic
from brokers.rocketmq.naming import retry_topic
from brokers.rocketmq.retry import send_back, send_back_many
from brokers.rocketmq.topology import subscription_ensure

logger = logging.getLogger(__name__)

CLUSTERING, BROADCASTING, ORDERLY = "clustering", "broadcasting", "orderly"
DEFAULT_CONSUME_TIMEOUT = 15 * 60.0  # RocketMQ's consumeTimeout: 15 minutes
SEND_BACK_RETRY_SECONDS = 5.0
ORDERLY_SUSPEND_SECONDS = 3.0

_RENEW_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""


class ConsumeResult(enum.StrEnum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass(frozen=True)
class RetryLater:
    """Fail and ask for a delay level (1..18); a negative level sends the message
    straight to the DLQ. Level 0 is the default `3 + reconsumeTimes`."""

    level: int = 0


Listener = Callable[[Message], "ConsumeResult | RetryLater | None"]


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# One lock for all deliveries: a claim is a few instructions, and a lock per message
# would cost more to make than it ever waits.
_CLAIM_LOCK = threading.Lock()


class _Delivery:
    """One message being consumed; settled exactly once (by the listener or the timeout)."""

    __slots__ = ("message", "deadline", "_settled")

    def __init__(self, message: Message, deadline: float) -> None:
        self.message = message
        self.deadline = deadline
        self._settled = False

    def claim(self) -> bool:
        with _CLAIM_LOCK:
            if self._settled:
                return False
            self._settled = True
            return True


class PushConsumer:
    """Consumes the subscribed topics of one group and calls `listener` per message."""

    def __init__(self, connection: Connection, group: str, listener: Listener, *,
                 subscriptions: Mapping[str, str] | None = None, mode: str = CLUSTERING,
                 max_reconsume_times: int | None = None, consume_timeout: float = DEFAULT_CONSUME_TIMEOUT,
                 threads: int = 4, batch: int = 32, max_inflight: int = 128,
                 suspend_seconds: float = ORDERLY_SUSPEND_SECONDS,
                 send_back_retry_seconds: float = SEND_BACK_RETRY_SECONDS, start_from: str | None = None,
                 consumer_name: str | None = None, poll_block_ms: int = 200) -> None:
        if mode not in (CLUSTERING, BROADCASTING, ORDERLY):
            raise MessageError(f"consumer mode {mode!r} is not one of clustering, broadcasting, orderly")
        self.connection = connection
        self.group = group
        self.listener = listener
        self.mode = mode
        self.subscriptions: dict[str, str] = {}
        for topic, expression in (subscriptions or {}).items():
            self.subscribe(topic, expression)
        if max_reconsume_times is None:
            # Orderly consumers retry until success unless told otherwise (RocketMQ's -1).
            max_reconsume_times = None if mode == ORDERLY else connection.max_reconsume_times
        self.max_reconsume_times = max_reconsume_times
        self.consume_timeout = consume_timeout
        self.threads = threads
        self.batch = batch
        self.suspend_seconds = suspend_seconds
        self.send_back_retry_seconds = send_back_retry_seconds
        # Where a new group (or, broadcasting, each new instance) starts: "first" message
        # the topic holds or only messages sent from now on ("last"). Broadcasting keeps
        # its offsets in memory, so it starts at "last" unless told otherwise, or every
        # restart would consume the whole history again.
        self.start_from = start_from or ("last" if mode == BROADCASTING else "first")
        self._broadcast_offsets: dict[str, str] = {}
        self.name = consumer_name or default_consumer_name()
        self.poll_block_ms = poll_block_ms
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._executor: ThreadPoolExecutor | None = None
        self.max_inflight = max(1, max_inflight)
        # Successes waiting to be acknowledged in one round trip by the fetching thread.
        # A crash before that flush means the message is delivered again: at least once.
        self._acks: list[Message] = []
        self._acks_lock = threading.Lock()
        self._inflight: dict[int, _Delivery] = {}
        self._inflight_lock = threading.Lock()
        self._timers: set[threading.Timer] = set()
        self._renew_lock = connection.client.register_script(_RENEW_LOCK)

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Subscribe to a topic with a tag expression ("*" or "TagA || TagB").
        System topics are refused: the retry topic is subscribed automatically and the
        DLQ is write-only for consumers."""
        validate_user_topic(topic)
        self.subscriptions[topic] = expression

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> PushConsumer:
        if not self.subscriptions:
            raise MessageError("the consumer has no subscription")
        subscription_ensure(self.connection, group=self.group, topics=self.subscriptions, mode=self.mode,
                            max_reconsume_times=self.max_reconsume_times,
                            start="$" if self.start_from == "last" else "0")
        self._stop.clear()
        if self.mode == BROADCASTING:
            # Fixed before start() returns: a message sent after it is never missed.
            keys = self.connection.keys
            self._broadcast_offsets = {keys.stream(topic): self._start_offset(keys.stream(topic))
                                       for topic in self.subscriptions}
        self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix=f"rocketmq-{self.group}")
        if self.mode == ORDERLY:
            targets = [(self._run_orderly, topic) for topic in self.subscriptions]
        elif self.mode == BROADCASTING:
            targets = [(self._run_broadcasting, None)]
        else:
            targets = [(self._run_clustering, None)]
        for target, argument in targets:
            thread = threading.Thread(target=target, args=(argument,), daemon=True,
                                      name=f"rocketmq-{self.group}-{self.mode}")
            thread.start()
            self._threads.append(thread)
        return self

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop fetching, let running listeners finish. Unsettled messages stay pending
        in Redis and are claimed by the group later."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []
        for timer in list(self._timers):
            timer.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self.mode == CLUSTERING:
            self._flush_acks()

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # -- clustering ------------------------------------------------------------------

    def _streams(self) -> dict[str, str]:
        keys = self.connection.keys
        streams = {keys.stream(topic): ">" for topic in self.subscriptions}
        streams[keys.stream(retry_topic(self.group))] = ">"
        return streams

    def _run_clustering(self, _argument: object) -> None:
        last_claim = 0.0
        while not self._stop.is_set():
            try:
                self._flush_acks()
                self._expire_inflight()
                if time.monotonic() - last_claim > min(5.0, self.consume_timeout):
                    last_claim = time.monotonic()
                    self._claim_abandoned()
                self._fetch_clustering()
            except BrokerError as exc:
                self._pause(exc)

    def _fetch_clustering(self) -> None:
        free = self._free_slots()
        if not free:
            time.sleep(0.002)
            return
        try:
            with self.connection.errors():
                answer = self.connection.client.xreadgroup(
                    self.group, self.name, self._streams(), count=free, block=self.poll_block_ms)
        except BrokerError as exc:
            if "NOGROUP" in str(exc):
                # Someone removed a stream or group (the console can rebuild it): recreate.
                subscription_ensure(self.connection, group=self.group, topics=self.subscriptions,
                                    mode=self.mode, max_reconsume_times=self.max_reconsume_times)
                return
            raise
        for stream, entries in answer or []:
            self._dispatch(stream, entries)

    def _claim_abandoned(self) -> None:
        """Take over entries another consumer fetched but never settled within the timeout."""
        idle_ms = int(self.consume_timeout * 1000) + 1000
        for stream in self._streams():
            free = self._free_slots()
            if not free:
                return
            try:
                with self.connection.errors():
                    _next, entries, _deleted = self.connection.client.xautoclaim(
                        stream, self.group, self.name, idle_ms, "0-0", count=free)
            except BrokerError as exc:
                if "NOGROUP" in str(exc):
                    continue
                raise
            if entries:
                self._dispatch(stream, entries, redelivered=True)

    def _dispatch(self, stream: bytes | str, entries: list, *, redelivered: bool = False) -> None:
        stream_key = stream.decode() if isinstance(stream, bytes) else stream
        topic = self.connection.keys.topic_of(stream_key)
        expression = self.subscriptions.get(topic, "*")
        skipped = []
        wanted = []
        for entry_id, fields in entries:
            if not fields:
                continue  # deleted while pending
            entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            message = decode(fields, entry_id=entry, stream=stream_key,
                             delivery_count=2 if redelivered else 1)
            if not tag_matches(expression, message.tags):
                skipped.append(entry)  # filtered out: the offset moves on, as on a broker
                continue
            wanted.append(message)
        self._submit_many(wanted)
        if skipped:
            with self.connection.errors():
                self.connection.client.xack(stream_key, self.group, *skipped)

    def _free_slots(self) -> int:
        with self._inflight_lock:
            return max(0, min(self.batch, self.max_inflight - len(self._inflight)))

    def _flush_acks(self) -> None:
        with self._acks_lock:
            acks, self._acks = self._acks, []
        if not acks:
            return
        by_stream: dict[str, list[str]] = {}
        for message in acks:
            by_stream.setdefault(message.stream, []).append(message.entry_id)
        try:
            with self.connection.errors():
                pipe = self.connection.client.pipeline(transaction=False)
                for stream_key, entry_ids in by_stream.items():
                    pipe.xack(stream_key, self.group, *entry_ids)
                pipe.execute()
        except BrokerError as exc:
            # Not acknowledged: they stay pending and are consumed again later (at least once).
            logger.warning("ack of %d messages failed, they will be delivered again: %s", len(acks), exc)

    def _submit(self, message: Message) -> None:
        self._submit_many([message])

    def _submit_many(self, messages: list[Message]) -> None:
        """Hand messages to the worker threads, in at most `threads` chunks: one task
        per chunk, not per message, keeps the thread hand-offs few."""
        if not messages:
            return
        deadline = time.monotonic() + self.consume_timeout
        deliveries = [_Delivery(message, deadline) for message in messages]
        with self._inflight_lock:
            for delivery in deliveries:
                self._inflight[id(delivery)] = delivery
        size = -(-len(deliveries) // self.threads)
        chunks = [deliveries[i:i + size] for i in range(0, len(deliveries), size)]
        for chunk in chunks:
            executor = self._executor
            try:
                if executor is None:
                    raise RuntimeError("consumer stopped")
                executor.submit(self._consume_chunk, chunk)
            except RuntimeError:  # shutting down: the messages stay pending in Redis
                for delivery in chunk:
                    self._forget(delivery)

    def _consume_chunk(self, deliveries: list[_Delivery]) -> None:
        # Failures of the chunk are sent back together (one round trip); until then
        # they are pending in Redis like any message being consumed.
        failures: list[tuple[Message, ConsumeResult | RetryLater, str]] = []
        try:
            for delivery in deliveries:
                if self._stop.is_set():
                    break  # the rest is not settled: it stays pending in Redis, claimed later
                self._consume(delivery, forget=False, failures=failures)
                if len(failures) >= 64:
                    self._send_back_failures(failures)
                    failures = []
        finally:
            self._send_back_failures(failures)
            with self._inflight_lock:
                for delivery in deliveries:
                    self._inflight.pop(id(delivery), None)

    def _forget(self, delivery: _Delivery) -> None:
        with self._inflight_lock:
            self._inflight.pop(id(delivery), None)

    def _consume(self, delivery: _Delivery, *, forget: bool = True,
                 failures: list | None = None) -> None:
        message = delivery.message
        if time.monotonic() > delivery.deadline:
            return  # waited too long in our queue; the timeout path settles it
        outcome, reason = self._call_listener(message)
        if delivery.claim():
            try:
                if (failures is not None and outcome != ConsumeResult.SUCCESS
                        and self.mode == CLUSTERING):
                    failures.append((message, outcome, reason))
                    return
                self._settle(message, outcome, reason)
            finally:
                if forget:
                    self._forget(delivery)

    def _call_listener(self, message: Message) -> tuple[ConsumeResult | RetryLater, str]:
        try:
            result = self.listener(message)
        except Exception as exc:
            logger.info("listener of %s raised on %s: %r", self.group, message.message_id, exc)
            return ConsumeResult.RECONSUME_LATER, f"listener raised {type(exc).__name__}: {exc}"
        if result is None:
            return ConsumeResult.RECONSUME_LATER, "listener returned nothing"
        if isinstance(result, RetryLater):
            return result, "listener asked to retry later"
        if result == ConsumeResult.SUCCESS:
            return ConsumeResult.SUCCESS, ""
        return ConsumeResult.RECONSUME_LATER, "listener returned RECONSUME_LATER"

    def _expire_inflight(self) -> None:
        now = time.monotonic()
        with self._inflight_lock:
            late = [d for d in self._inflight.values() if d.deadline < now]
        for delivery in late:
            if delivery.claim():
                try:
                    self._settle(delivery.message, ConsumeResult.RECONSUME_LATER,
                                 f"consume timeout after {self.consume_timeout:g} s")
                finally:
                    self._forget(delivery)

    def _settle(self, message: Message, outcome: ConsumeResult | RetryLater, reason: str) -> None:
        if self.mode == BROADCASTING:
            # No group, nothing to acknowledge; a failure is only reported.
            if outcome != ConsumeResult.SUCCESS:
                logger.warning("%s (%s)", broadcasting_failure_is_dropped(message), reason)
            return
        if outcome == ConsumeResult.SUCCESS:
            with self._acks_lock:
                self._acks.append(message)
            return
        level = outcome.level if isinstance(outcome, RetryLater) else 0
        try:
            sent = send_back(self.connection, message, group=self.group,
                             max_reconsume_times=self.max_reconsume_times, requested_level=level,
                             reason=reason)
        except BrokerError as exc:
            # The original is still pending in Redis; consume it again here after 5 s.
            logger.warning("sending %s back failed (%s); consuming it again in %g s",
                           message.message_id, exc, self.send_back_retry_seconds)
            self._reconsume_later(replace(message, reconsume_times=message.reconsume_times + 1))
            return
        logger.info("%s failed (%s): copy %s sent to %s", message.message_id, reason, sent.message_id,
                    sent.topic)

    def _send_back_failures(self, failures: list[tuple[Message, ConsumeResult | RetryLater, str]]) -> None:
        if not failures:
            return
        batch = [(message, outcome.level if isinstance(outcome, RetryLater) else 0, reason)
                 for message, outcome, reason in failures]
        answers = send_back_many(self.connection, batch, group=self.group,
                                 max_reconsume_times=self.max_reconsume_times)
        for (message, _level, reason), answer in zip(batch, answers, strict=True):
            if isinstance(answer, BrokerError):
                # The original is still pending in Redis; consume it again here after 5 s.
                logger.warning("sending %s back failed (%s); consuming it again in %g s",
                               message.message_id, answer, self.send_back_retry_seconds)
                self._reconsume_later(replace(message, reconsume_times=message.reconsume_times + 1))
            else:
                logger.debug("%s failed (%s): copy %s sent to %s", message.message_id, reason,
                             answer.message_id, answer.topic)

    def _reconsume_later(self, message: Message) -> None:
        def again() -> None:
            self._timers.discard(timer)
            if not self._stop.is_set():
                self._submit(message)

        timer = threading.Timer(self.send_back_retry_seconds, again)
        timer.daemon = True
        self._timers.add(timer)
        timer.start()

    # -- broadcasting ----------------------------------------------------------------

    def _run_broadcasting(self, _argument: object) -> None:
        keys = self.connection.keys
        offsets = self._broadcast_offsets
        while not self._stop.is_set():
            try:
                self._expire_inflight()
                free = self._free_slots()
                if not free:
                    time.sleep(0.01)
                    continue
                with self.connection.errors():
                    answer = self.connection.client.xread(offsets, count=free, block=self.poll_block_ms)
                for stream, entries in answer or []:
                    stream_key = stream.decode() if isinstance(stream, bytes) else stream
                    topic = keys.topic_of(stream_key)
                    for entry_id, fields in entries:
                        entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                        offsets[stream_key] = entry
                        message = decode(fields, entry_id=entry, stream=stream_key, delivery_count=1)
                        if tag_matches(self.subscriptions.get(topic, "*"), message.tags):
                            self._submit(message)
            except BrokerError as exc:
                self._pause(exc)

    def _start_offset(self, stream_key: str) -> str:
        if self.start_from != "last":
            return "0-0"
        with self.connection.errors():
            last = self.connection.client.xrevrange(stream_key, count=1)
        if not last:
            return "0-0"
        entry = last[0][0]
        return entry.decode() if isinstance(entry, bytes) else entry

    # -- orderly ---------------------------------------------------------------------

    def _run_orderly(self, topic: str) -> None:
        keys = self.connection.keys
        stream_key = keys.stream(topic)
        lock_key = keys.order_lock(self.group, topic)
        lock_ms = max(30_000, int(self.consume_timeout * 1000) * 2)
        while not self._stop.is_set():
            try:
                with self.connection.errors():
                    holding = bool(self._renew_lock(keys=[lock_key], args=[self.name, lock_ms]))
                if not holding:
                    self._stop.wait(1.0)
                    continue
                with self.connection.errors():
                    # Holding the queue: whatever is pending was left by an earlier holder
                    # (or by us before a restart) and comes first, in order.
                    _next, entries, _deleted = self.connection.client.xautoclaim(
                        stream_key, self.group, self.name, 0, "0-0", count=self.batch)
                    if not entries:
                        answer = self.connection.client.xreadgroup(
                            self.group, self.name, {stream_key: ">"}, count=self.batch,
                            block=self.poll_block_ms)
                        entries = answer[0][1] if answer else []
                for entry_id, fields in entries:
                    if self._stop.is_set():
                        return
                    if fields:
                        entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                        self._consume_in_place(decode(fields, entry_id=entry, stream=stream_key,
                                                      delivery_count=1), topic, lock_key, lock_ms)
            except BrokerError as exc:
                if "NOGROUP" in str(exc):
                    with contextlib.suppress(BrokerError):
                        subscription_ensure(self.connection, group=self.group, topics=self.subscriptions,
                                            mode=self.mode, max_reconsume_times=self.max_reconsume_times)
                self._pause(exc)

    def _consume_in_place(self, message: Message, topic: str, lock_key: str, lock_ms: int) -> None:
        """Consume one message until it succeeds (or passes max): the queue waits."""
        if not tag_matches(self.subscriptions.get(topic, "*"), message.tags):
            with self.connection.errors():
                self.connection.client.xack(message.stream, self.group, message.entry_id)
            return
        while not self._stop.is_set():
            outcome, reason = self._call_with_timeout(message)
            if outcome == ConsumeResult.SUCCESS:
                with self.connection.errors():
                    self.connection.client.xack(message.stream, self.group, message.entry_id)
                return
            limit = self.max_reconsume_times
            if limit is not None and message.reconsume_times >= limit:
                # Past the max: the copy goes to the DLQ and the original is acknowledged together.
                send_back(self.connection, message, group=self.group, max_reconsume_times=limit,
                          requested_level=-1, reason=reason)
                return
            logger.info("orderly %s failed (%s); retrying in place in %g s", message.message_id, reason,
                        self.suspend_seconds)
            self._stop.wait(self.suspend_seconds)
            with self.connection.errors():
                self._renew_lock(keys=[lock_key], args=[self.name, lock_ms])
            message = replace(message, reconsume_times=message.reconsume_times + 1)

    def _call_with_timeout(self, message: Message) -> tuple[ConsumeResult | RetryLater, str]:
        executor = self._executor
        if executor is None:
            return ConsumeResult.RECONSUME_LATER, "consumer stopped"
        future: Future = executor.submit(self._call_listener, message)
        try:
            return future.result(timeout=self.consume_timeout)
        except FutureTimeout:
            return ConsumeResult.RECONSUME_LATER, f"consume timeout after {self.consume_timeout:g} s"

    # -- shared ----------------------------------------------------------------------

    def _pause(self, exc: BrokerError) -> None:
        logger.warning("consumer %s of %s: %s; retrying in 1 s", self.name, self.group, exc)
        self._stop.wait(1.0)


def broadcasting_failure_is_dropped(message: Message) -> str:
    """The warning a broadcasting consumer logs for a failed message (never retried)."""
    return (f"broadcasting consumer failed on message {message.message_id} of {message.source_topic}; "
            "broadcasting mode never retries, the message is dropped")
