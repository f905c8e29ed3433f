"""The producer: synchronous and asynchronous sends with RocketMQ's retry rules.

- A send is tried once plus `max_retries` (default 2) more times.
- Ordinary errors (Redis unreachable, timed out) are retried at once; flow control
  (Redis out of memory, busy, loading) is retried after an exponential back-off with
  jitter: 1 s, then x1.6 each time with +/-20 % jitter, capped at 120 s.
- A send that still fails is written to the local outbox (a sqlite3 file) and
  reported as DEFERRED; the outbox retrier sends it later with the same message id.
  So once `send` returns, the message is in Redis or on disk: nothing is lost.
- Messages that can never be sent (empty or over 4 MiB body, a bad topic or tag, a
  reserved property name) raise `MessageError` at once and are not stored anywhere.

Retrying a send that timed out can store it twice (the first try may have landed):
every copy keeps the same message id, which is what idempotent consumers key on.
"""

from __future__ import annotations

import enum
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from brokers.base import BrokerError
from brokers.rocketmq.connection import Connection, FlowControlError, translate
from brokers.rocketmq.delay import delay_store
from brokers.rocketmq.message import (
    MAX_MESSAGE_BYTES,
    Message,
    encode,
    now_ms,
    prepared,
    validate_message,
    validate_user_topic,
)
from brokers.rocketmq.outbox import Outbox, OutboxRetrier
from brokers.rocketmq.schedule import level_delay

logger = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 2
# Where a producer keeps what it could not send, unless told otherwise (relative to the
# working directory; the console runs from the project root, whose var/ is not in git).
DEFAULT_OUTBOX_PATH = Path(os.environ.get("REDRIVE_ROCKETMQ_OUTBOX", "var/rocketmq-outbox.sqlite3"))


class SendStatus(enum.StrEnum):
    SEND_OK = "SEND_OK"
    DEFERRED = "DEFERRED"  # kept in the outbox; the retrier will send it


@dataclass(frozen=True)
class SendResult:
    status: SendStatus
    message_id: str
    topic: str
    entry_id: str = ""
    attempts: int = 1
    error: str = ""
    due_at_ms: int = 0

    @property
    def ok(self) -> bool:
        return self.status == SendStatus.SEND_OK


@dataclass(frozen=True)
class BackoffPolicy:
    """Flow-control back-off (RocketMQ's defaults)."""

    initial: float = 1.0
    multiplier: float = 1.6
    jitter: float = 0.2
    maximum: float = 120.0

    def waits(self, rng: random.Random | None = None) -> Iterator[float]:
        """Seconds to wait before each retry after flow control.

        The first wait is `initial`; each next one is min(current * multiplier,
        maximum) plus uniform(-jitter, +jitter) * current.
        """
        rng = rng or random.Random()
        current = self.initial
        yield current
        while True:
            current = min(current * self.multiplier, self.maximum)
            yield max(0.0, current + rng.uniform(-self.jitter * current, self.jitter * current))


class Producer:
    """Sends messages to topics of one RocketMQ-style installation.

    `outbox`: an Outbox or a path for its sqlite3 file (default DEFAULT_OUTBOX_PATH,
    or $REDRIVE_ROCKETMQ_OUTBOX), or None to raise BrokerError instead of deferring
    (then the caller owns the message). Call `start()` to run the
    outbox retrier and `shutdown()` when done; usable as a context manager.
    """

    def __init__(self, connection: Connection, *, max_retries: int = DEFAULT_MAX_RETRIES,
                 backoff: BackoffPolicy | None = None,
                 outbox: Outbox | str | Path | None = DEFAULT_OUTBOX_PATH,
                 outbox_interval: float = 1.0, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 async_workers: int = 4, rng: random.Random | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.connection = connection
        self.max_retries = max_retries
        self.backoff = backoff or BackoffPolicy()
        self.outbox = Outbox(outbox) if isinstance(outbox, str | Path) else outbox
        self.max_message_bytes = max_message_bytes
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._known_topics: set[str] = set()  # registered in the topics set
        self._valid_topics: set[str] = set()
        self._async_workers = async_workers
        self._executor: ThreadPoolExecutor | None = None
        self._retrier = (OutboxRetrier(self.outbox, self._send_from_outbox, destination=self._destination,
                                       interval=outbox_interval)
                         if self.outbox is not None else None)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Producer:
        if self._retrier is not None:
            self._retrier.start()
        return self

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._retrier is not None:
            self._retrier.stop()

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # -- sending ---------------------------------------------------------------------

    def send(self, message: Message, *, delay_level: int = 0) -> SendResult:
        """Send and wait: SEND_OK once Redis stored it, DEFERRED once it is in the outbox.

        `delay_level` > 0 delivers it after that level's delay (via the delay set).
        Raises MessageError for a message that can never be sent; BrokerError only
        when every attempt failed and there is no outbox.
        """
        message = self._checked(message)
        attempts = 0
        waits: Iterator[float] | None = None
        while True:
            attempts += 1
            try:
                entry_id, due = self._send_once(message, delay_level)
            except BrokerError as exc:
                if exc.permanent:
                    raise
                if attempts > self.max_retries:
                    return self._defer(message, delay_level, exc, attempts)
                if isinstance(exc, FlowControlError):
                    waits = waits or self.backoff.waits(self._rng)
                    wait = next(waits)
                    logger.info("flow control sending %s, retrying in %.2f s: %s",
                                message.message_id, wait, exc)
                    self._sleep(wait)
                continue
            return SendResult(SendStatus.SEND_OK, message.message_id, message.topic, entry_id, attempts,
                              due_at_ms=due)

    def send_async(self, message: Message,
                   callback: Callable[[SendResult | None, BaseException | None], None] | None = None,
                   *, delay_level: int = 0) -> Future:
        """Send on a worker thread; `callback(result, None)` on success or deferral,
        `callback(None, error)` for a message that can never be sent. The returned
        future gives the same result."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._async_workers, thread_name_prefix="rocketmq-send")
        future = self._executor.submit(self.send, message, delay_level=delay_level)
        if callback is not None:
            def done(finished: Future) -> None:
                error = finished.exception()
                try:
                    callback(None if error else finished.result(), error)
                except Exception:
                    logger.exception("send callback raised")
            future.add_done_callback(done)
        return future

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Send many messages in one pipeline (one round trip per try), with the same
        retry and outbox rules per message. Validates all before sending any."""
        batch = [self._checked(message) for message in messages]
        results: dict[int, SendResult] = {}
        remaining = list(range(len(batch)))
        attempts = 0
        waits: Iterator[float] | None = None
        while remaining:
            attempts += 1
            flow_control = False
            failed: list[tuple[int, BrokerError]] = []
            try:
                answers = self._pipeline_add([batch[i] for i in remaining])
            except BrokerError as exc:
                answers = [exc] * len(remaining)
            for index, answer in zip(remaining, answers, strict=True):
                if isinstance(answer, BrokerError):
                    if answer.permanent:
                        raise answer
                    flow_control = flow_control or isinstance(answer, FlowControlError)
                    failed.append((index, answer))
                else:
                    results[index] = SendResult(SendStatus.SEND_OK, batch[index].message_id,
                                                batch[index].topic, answer, attempts)
            remaining = [index for index, _ in failed]
            if remaining and attempts > self.max_retries:
                for index, error in failed:
                    results[index] = self._defer(batch[index], 0, error, attempts)
                break
            if remaining and flow_control:
                waits = waits or self.backoff.waits(self._rng)
                self._sleep(next(waits))
        return [results[i] for i in range(len(batch))]

    # -- internals -------------------------------------------------------------------

    def _checked(self, message: Message) -> Message:
        if message.topic not in self._valid_topics:
            validate_user_topic(message.topic)
            self._valid_topics.add(message.topic)
        message = prepared(message)
        validate_message(message, max_bytes=self.max_message_bytes, topic_checked=True)
        return message

    def _send_once(self, message: Message, delay_level: int) -> tuple[str, int]:
        connection = self.connection
        if delay_level > 0:
            due = now_ms() + int(level_delay(delay_level, connection.delay_levels) * 1000)
            delay_store(connection, message, due)
            self._known_topics.add(message.topic)
            return "", due
        with connection.errors():
            pipe = connection.client.pipeline(transaction=False)
            if message.topic not in self._known_topics:
                pipe.sadd(connection.keys.topics, message.topic)
            pipe.xadd(connection.keys.stream(message.topic), encode(message))
            entry_id = pipe.execute()[-1]
        self._known_topics.add(message.topic)
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id), 0

    def _pipeline_add(self, messages: Sequence[Message]) -> list[str | BrokerError]:
        connection = self.connection
        new_topics = {m.topic for m in messages} - self._known_topics
        with connection.errors():
            pipe = connection.client.pipeline(transaction=False)
            if new_topics:
                pipe.sadd(connection.keys.topics, *new_topics)
            for message in messages:
                pipe.xadd(connection.keys.stream(message.topic), encode(message))
            answers = pipe.execute(raise_on_error=False)
        self._known_topics |= new_topics
        answers = answers[1:] if new_topics else answers
        return [translate(a, connection.where) if isinstance(a, Exception)
                else (a.decode() if isinstance(a, bytes) else str(a)) for a in answers]

    def _defer(self, message: Message, delay_level: int, error: BrokerError, attempts: int) -> SendResult:
        if self.outbox is None:
            raise BrokerError(
                f"sending message {message.message_id} failed after {attempts} attempts: {error}")
        # The outbox row is committed before we report: from here the message is on disk.
        self.outbox.add(message, delay_level=delay_level, error=str(error),
                        destination=self._destination)
        logger.warning("message %s to %s kept in the outbox after %d attempts: %s",
                       message.message_id, message.topic, attempts, error)
        return SendResult(SendStatus.DEFERRED, message.message_id, message.topic, attempts=attempts,
                          error=f"{error}; kept in the local outbox and retried in the background")

    @property
    def _destination(self) -> str:
        return f"{self.connection.where}|{self.connection.keys.prefix}"

    def _send_from_outbox(self, message: Message, delay_level: int) -> None:
        self._send_once(message, delay_level)

    def drain_outbox(self) -> int:
        """Send what waits in the outbox now (the retrier does this in the background)."""
        if self.outbox is None:
            return 0
        return self.outbox.drain(self._send_from_outbox, destination=self._destination)
