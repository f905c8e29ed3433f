"""The consumer side: run a handler on a queue with Redrive's retry rules.

`RetryingConsumer` consumes `{queue}` with manual acks and a prefetch window. When the
handler raises, the message is republished (a copy, persistent, headers kept):

- to `master.retry` with routing key `{queue}` while its retry count is below the
  maximum (default 3): `{queue}@retry` holds it for the TTL, then RabbitMQ
  dead-letters it to `master` with routing key `{queue}`, so it comes back to this
  queue only, never to the other subscribers of its original routing key;
- else to `master.failed` with routing key `{queue}`, landing in `{queue}@failed`.

The copy carries `x-orig-routing-key` (the routing key the producer used, kept on
every later hop) and `x-retry-count`. The original is acknowledged only after the
broker confirmed the copy (publisher confirms). Nothing is lost: a crash before the
confirm leaves the original unacknowledged, so RabbitMQ delivers it again; a crash
between the confirm and the ack leaves both (the handler sees the message once more,
which is why handlers must be idempotent).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pika
import pika.exceptions

from brokers.base import BrokerError, ClusterConfig
from brokers.rabbitmq.connection import blocking_connection, broker_error
from brokers.rabbitmq.messages import (
    ERROR_TEXT_LIMIT,
    HEADER_DEAD_LETTER_ID,
    HEADER_ERROR,
    HEADER_FIRST_FAILURE,
    HEADER_LAST_FAILURE,
    HEADER_ORIG_ROUTING_KEY,
    HEADER_RETRY_COUNT,
    header_text,
    now_ms,
    retry_count_of,
    x_death_summary,
)
from brokers.rabbitmq.topology import Topology, declare_subscription, validate_queue_name

logger = logging.getLogger(__name__)

RETRIED = "retry"
DEAD_LETTERED = "failed"


@dataclass(frozen=True)
class ReceivedMessage:
    """One delivery as the handler sees it."""

    body: bytes
    routing_key: str
    exchange: str
    properties: pika.BasicProperties
    redelivered: bool = False

    @property
    def headers(self) -> dict[str, Any]:
        return dict(self.properties.headers or {})

    @property
    def retry_count(self) -> int:
        """Retries so far, from Redrive's own header (0 on the first delivery)."""
        return retry_count_of(self.properties.headers)

    @property
    def original_routing_key(self) -> str:
        """The routing key the producer used, even after the message came back from retry."""
        value = self.headers.get(HEADER_ORIG_ROUTING_KEY)
        return header_text(value) if value is not None else self.routing_key

    @property
    def x_death(self) -> list[dict[str, Any]]:
        """RabbitMQ's own dead-lettering record, for display; not used for counting."""
        return x_death_summary(self.properties.headers)

    def json(self) -> Any:
        """The body parsed as JSON (raises ValueError for a non-JSON body)."""
        return json.loads(self.body)


def failure_copy(message: ReceivedMessage, *, queue: str, topology: Topology,
                 error: BaseException | str | None = None) -> tuple[str, str, pika.BasicProperties]:
    """Where the copy of a failed message goes and with which properties.

    Returns (exchange, routing key, properties); the exchange is the retry exchange
    while `retry_count < max_retries`, else the failed exchange.
    """
    retries = message.retry_count
    headers = message.headers
    headers.setdefault(HEADER_ORIG_ROUTING_KEY, message.routing_key)
    stamp = now_ms()
    headers.setdefault(HEADER_FIRST_FAILURE, stamp)
    headers[HEADER_LAST_FAILURE] = stamp
    if error is not None:
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        headers[HEADER_ERROR] = text[:ERROR_TEXT_LIMIT]
    headers.pop(HEADER_DEAD_LETTER_ID, None)
    if retries < topology.max_retries:
        exchange = topology.retry_exchange
        headers[HEADER_RETRY_COUNT] = retries + 1
    else:
        exchange = topology.failed_exchange
        headers[HEADER_RETRY_COUNT] = retries
        headers[HEADER_DEAD_LETTER_ID] = uuid.uuid4().hex
    source = message.properties
    properties = pika.BasicProperties(
        content_type=source.content_type, content_encoding=source.content_encoding,
        headers=headers, delivery_mode=pika.DeliveryMode.Persistent, priority=source.priority,
        correlation_id=source.correlation_id, reply_to=source.reply_to,
        # A message id on every copy gives the archive an origin id to trace it by.
        message_id=source.message_id or uuid.uuid4().hex,
        timestamp=source.timestamp, type=source.type, user_id=source.user_id, app_id=source.app_id,
    )
    return exchange, queue, properties


def send_failure_copy(channel: Any, method: Any, properties: pika.BasicProperties, body: bytes, *,
                      queue: str, topology: Topology, error: BaseException | str | None = None) -> str:
    """Publish the retry (or `@failed`) copy of a failed delivery and wait for its confirm.

    `channel` must be a BlockingChannel in confirm mode (`channel.confirm_delivery()`),
    so this returns only once the broker confirmed the copy. Returns "retry" or
    "failed". Raises BrokerError if the copy was refused or could not be routed (a
    missing retry queue or binding: rebuild the topology). Does not acknowledge.
    """
    message = ReceivedMessage(body=body, routing_key=method.routing_key, exchange=method.exchange,
                              properties=properties, redelivered=bool(method.redelivered))
    exchange, routing_key, copy_properties = failure_copy(message, queue=queue, topology=topology,
                                                          error=error)
    try:
        channel.basic_publish(exchange=exchange, routing_key=routing_key, body=body,
                              properties=copy_properties, mandatory=True)
    except pika.exceptions.UnroutableError as exc:
        raise BrokerError(f"exchange {exchange!r} routed the copy of a failed message nowhere "
                          f"(routing key {routing_key!r}): the retry topology is broken") from exc
    except pika.exceptions.NackError as exc:
        raise BrokerError("RabbitMQ refused the copy of a failed message") from exc
    return RETRIED if exchange == topology.retry_exchange else DEAD_LETTERED


def reconsume_later(channel: Any, method: Any, properties: pika.BasicProperties, body: bytes, *,
                    queue: str, topology: Topology, error: BaseException | str | None = None) -> str:
    """Send a failed delivery to retry (or to `@failed` past the maximum), then ack it.

    For consumers that run their own loop. The original is acknowledged only after
    the broker confirmed the copy; if the copy fails (BrokerError) the original stays
    unacknowledged. Returns "retry" or "failed".
    """
    outcome = send_failure_copy(channel, method, properties, body, queue=queue, topology=topology,
                                error=error)
    # Confirmed: acknowledging now can only leave a duplicate (if we crash first), never a gap.
    channel.basic_ack(delivery_tag=method.delivery_tag)
    return outcome


@dataclass
class ConsumeStats:
    """Counts of one `run`; `outcomes` keeps the last 1,000 ("ok", "retry", "failed")
    so a consumer running for days does not grow without bound."""

    handled: int = 0
    retried: int = 0
    dead_lettered: int = 0
    copy_errors: int = 0
    outcomes: deque[str] = field(default_factory=lambda: deque(maxlen=1000))


Handler = Callable[[ReceivedMessage], None]


class RetryingConsumer:
    """Consume one queue with a handler, retrying failures through the TTL topology.

    config: the cluster (its options give exchange names, TTL and max retries);
    queue: the consuming queue, e.g. "billing@orders"; routing_keys: what the queue
    subscribes to on `master` (declared with the topology when `declare` is true);
    handler: called per message, raising means failure.
    """

    def __init__(self, config: ClusterConfig, queue: str, handler: Handler, *,
                 routing_keys: Iterable[str] = (), prefetch: int = 20, declare: bool = True,
                 log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.queue = validate_queue_name(queue)
        self.handler = handler
        self.routing_keys = tuple(routing_keys)
        self.prefetch = max(int(prefetch), 1)
        self.declare = declare
        self.topology = Topology.from_options(config.options)
        self.log = log or logger.info

    def run(self, *, stop: threading.Event | None = None, max_messages: int | None = None,
            idle_timeout: float | None = None) -> ConsumeStats:
        """Consume until `stop` is set, `max_messages` were handled, or nothing arrived
        for `idle_timeout` seconds. Unacknowledged deliveries go back to the queue."""
        stats = ConsumeStats()
        with blocking_connection(self.config, doing=f"consuming {self.queue!r}",
                                 purpose=f"consumer {self.queue}") as connection:
            channel = connection.channel()
            if self.declare:
                declare_subscription(channel, self.topology, self.queue, self.routing_keys)
            channel.confirm_delivery()
            channel.basic_qos(prefetch_count=self.prefetch)
            idle_since = time.monotonic()
            try:
                for method, properties, body in channel.consume(self.queue, inactivity_timeout=0.2):
                    if stop is not None and stop.is_set():
                        break
                    if method is None:
                        if idle_timeout is not None and time.monotonic() - idle_since > idle_timeout:
                            break
                        continue
                    idle_since = time.monotonic()
                    self._deliver(channel, method, properties, body, stats)
                    if max_messages is not None and stats.handled >= max_messages:
                        break
            finally:
                if channel.is_open:
                    with contextlib.suppress(pika.exceptions.AMQPError):
                        channel.cancel()
        return stats

    def _deliver(self, channel: Any, method: Any, properties: pika.BasicProperties, body: bytes,
                 stats: ConsumeStats) -> None:
        stats.handled += 1
        message = ReceivedMessage(body=body, routing_key=method.routing_key, exchange=method.exchange,
                                  properties=properties, redelivered=bool(method.redelivered))
        try:
            self.handler(message)
        except Exception as error:  # noqa: BLE001 - any failure of the user's handler is a retry
            try:
                outcome = send_failure_copy(channel, method, properties, body, queue=self.queue,
                                            topology=self.topology, error=error)
            except BrokerError as copy_error:
                # The original stays unacknowledged and goes back to the queue: nothing is
                # lost, it will be tried again once the topology is repaired.
                stats.copy_errors += 1
                self.log(f"{self.queue}: could not send a failed message to retry: {copy_error}")
                time.sleep(1.0)
                channel.basic_nack(delivery_tag=method.delivery_tag, requeue=True)
                return
            # The copy is confirmed: only now may the original go. A crash before this ack
            # leaves the message twice (original redelivered, copy waiting), never nowhere.
            self._acknowledge(channel, method.delivery_tag)
            stats.outcomes.append(outcome)
            if outcome == RETRIED:
                stats.retried += 1
            else:
                stats.dead_lettered += 1
            return
        self._acknowledge(channel, method.delivery_tag)
        stats.outcomes.append("ok")

    def _acknowledge(self, channel: Any, delivery_tag: int) -> None:
        channel.basic_ack(delivery_tag=delivery_tag)


def publish_json(config: ClusterConfig, routing_key: str, documents: Iterable[Any], *,
                 headers: dict[str, Any] | None = None) -> int:
    """Publish JSON documents to the cluster's `master` exchange, persistent, confirmed
    one by one (for demos and small producers; bulk replay uses the publisher module)."""
    topology = Topology.from_options(config.options)
    sent = 0
    try:
        with blocking_connection(config, doing="publishing", purpose="producer") as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            for document in documents:
                channel.basic_publish(
                    exchange=topology.exchange, routing_key=routing_key,
                    body=json.dumps(document).encode(),
                    properties=pika.BasicProperties(
                        content_type="application/json", delivery_mode=pika.DeliveryMode.Persistent,
                        message_id=uuid.uuid4().hex, headers=dict(headers or {})))
                sent += 1
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise broker_error(exc, config, doing="publishing") from exc
    return sent
