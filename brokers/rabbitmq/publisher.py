"""Publish many messages and learn, for each, whether RabbitMQ confirmed it.

A BlockingConnection in confirm mode waits for each confirm before the next publish
(about a thousand messages a second here). This publisher uses pika's asynchronous
connection instead: it keeps up to `window` messages in flight, and RabbitMQ's
acks (often covering many messages at once, `multiple=true`) settle them. Messages are
published `mandatory`, so one that no queue would take comes back (`basic.return`,
always before its ack) and is reported as not delivered rather than silently dropped.

Every publication carries a unique `key` in header `x-redrive-replay-key`; that is how
a returned message is matched to its publication.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pika
import pika.exceptions
from pika.spec import Basic

from brokers.base import BrokerError, ClusterConfig
from brokers.rabbitmq.connection import broker_error, connection_parameters
from brokers.rabbitmq.messages import HEADER_REPLAY_KEY, header_text


@dataclass(frozen=True)
class Publication:
    key: str
    exchange: str
    routing_key: str
    body: bytes
    properties: pika.BasicProperties


@dataclass
class PublishResult:
    key: str
    confirmed: bool = False
    error: str = ""
    permanent: bool = False


class _Run:
    """One publishing session on a SelectConnection, driven by its ioloop."""

    def __init__(self, config: ClusterConfig, publications: Sequence[Publication], window: int,
                 idle_timeout: float) -> None:
        self.config = config
        self.publications = publications
        self.window = max(window, 1)
        self.idle_timeout = idle_timeout
        self.results = [PublishResult(key=p.key) for p in publications]
        self.by_key = {p.key: i for i, p in enumerate(publications)}
        self.next_index = 0
        self.in_flight: dict[int, int] = {}  # delivery tag -> index
        self.tag = 0
        self.returned: dict[int, str] = {}
        self.opened = False
        self.open_error: BaseException | None = None
        self.connection: pika.SelectConnection | None = None
        self.channel = None
        self.timer = None
        self.closing = False

    def run(self) -> list[PublishResult]:
        parameters = connection_parameters(self.config, purpose="replay")
        self.connection = pika.SelectConnection(
            parameters, on_open_callback=self._on_open, on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed)
        self._arm_timer()
        self.connection.ioloop.start()
        if not self.opened:
            raise broker_error(self.open_error or pika.exceptions.AMQPConnectionError("not opened"),
                               self.config, doing="connecting to replay")
        for result in self.results:
            if not result.confirmed and not result.error:
                result.error = "no confirm from RabbitMQ before the connection ended; not replayed"
        return self.results

    # connection and channel set-up
    def _on_open(self, connection: pika.SelectConnection) -> None:
        self.opened = True
        connection.channel(on_open_callback=self._on_channel_open)

    def _on_open_error(self, connection: pika.SelectConnection, error: BaseException) -> None:
        self.open_error = error
        self._stop()

    def _on_closed(self, connection: pika.SelectConnection, reason: BaseException) -> None:
        if self.opened and not self.closing:
            text = str(broker_error(reason, self.config, doing="replaying"))
            for index in self.in_flight.values():
                self.results[index].error = text
            self.in_flight.clear()
        self._stop()

    def _on_channel_open(self, channel) -> None:
        self.channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(ack_nack_callback=self._on_confirm,
                                 callback=lambda _frame: self._publish_more())

    def _on_channel_closed(self, channel, reason: BaseException) -> None:
        # A channel error (e.g. 404: the exchange does not exist) settles everything in
        # flight as failed; nothing was confirmed, so the archive keeps those letters.
        error = broker_error(reason, self.config, doing="replaying")
        # Only a missing exchange (404) condemns every message alike; any other channel
        # error was caused by one message and says nothing certain about the others.
        permanent = getattr(reason, "reply_code", None) == 404
        for index in self.in_flight.values():
            self.results[index].error = error.message
            self.results[index].permanent = permanent
        self.in_flight.clear()
        for result in self.results[self.next_index:]:
            result.error = error.message
            result.permanent = permanent
        self.next_index = len(self.publications)
        self._finish()

    # publishing and confirms
    def _publish_more(self) -> None:
        while self.next_index < len(self.publications) and len(self.in_flight) < self.window:
            index = self.next_index
            publication = self.publications[index]
            self.next_index += 1
            self.tag += 1
            self.in_flight[self.tag] = index
            self.channel.basic_publish(publication.exchange, publication.routing_key, publication.body,
                                       publication.properties, mandatory=True)
        if not self.in_flight and self.next_index >= len(self.publications):
            self._finish()

    def _on_return(self, channel, method, properties, body) -> None:
        key = header_text((properties.headers or {}).get(HEADER_REPLAY_KEY, ""))
        index = self.by_key.get(key)
        if index is not None:
            self.returned[index] = (f"no queue is bound to {method.exchange!r} with routing key "
                                    f"{method.routing_key!r}: {method.reply_text}")

    def _on_confirm(self, frame) -> None:
        method = frame.method
        acked = isinstance(method, Basic.Ack)
        if method.multiple:
            # `in_flight` keeps publication order, so the covered tags are a prefix of it:
            # stop at the first later one instead of scanning the whole window.
            tags = list(itertools.takewhile(lambda t: t <= method.delivery_tag, self.in_flight))
        else:
            tags = [method.delivery_tag]
        for tag in tags:
            index = self.in_flight.pop(tag, None)
            if index is None:
                continue
            result = self.results[index]
            if index in self.returned:
                result.error = self.returned.pop(index)
                result.permanent = True
            elif acked:
                result.confirmed = True
            else:
                result.error = "RabbitMQ refused the message (nack)"
        self._arm_timer()
        self._publish_more()

    # ending
    def _arm_timer(self) -> None:
        if self.connection is None:
            return
        if self.timer is not None:
            self.connection.ioloop.remove_timeout(self.timer)
        self.timer = self.connection.ioloop.call_later(self.idle_timeout, self._on_idle)

    def _on_idle(self) -> None:
        self.timer = None
        for index in self.in_flight.values():
            self.results[index].error = "RabbitMQ sent no confirm in time; not known to be replayed"
        self.in_flight.clear()
        self.next_index = len(self.publications)
        if not self.opened:
            self.open_error = pika.exceptions.AMQPConnectionError("timed out connecting")
        self._finish()

    def _finish(self) -> None:
        if self.closing:
            return
        self.closing = True
        connection = self.connection
        if connection is not None and connection.is_open:
            connection.close()
        else:
            # Still connecting (or already closed): just stop waiting; closing a
            # connection that never opened is not allowed by pika.
            self._stop()

    def _stop(self) -> None:
        if self.connection is not None:
            if self.timer is not None:
                with contextlib.suppress(Exception):
                    self.connection.ioloop.remove_timeout(self.timer)
                self.timer = None
            self.connection.ioloop.stop()


def publish_confirmed(config: ClusterConfig, publications: Sequence[Publication], *,
                      window: int = 2000, idle_timeout: float | None = None) -> list[PublishResult]:
    """Publish all, mandatory and persistent as given; one result per publication, in order.

    Raises BrokerError only when the connection cannot be opened. A message is
    `confirmed` only when RabbitMQ acked it and did not return it as unroutable.
    `idle_timeout` (default: the config's timeout, at least 5 s) bounds the wait for
    the next confirm.
    """
    if not publications:
        return []
    keys = [p.key for p in publications]
    if len(set(keys)) != len(keys):
        raise BrokerError("two replayed messages share a key", permanent=True)
    run = _Run(config, publications, window, idle_timeout or max(config.timeout_seconds, 5.0))
    try:
        return run.run()
    except BrokerError:
        raise
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise broker_error(exc, config, doing="replaying") from exc
