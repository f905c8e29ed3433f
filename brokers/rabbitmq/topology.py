"""Names, cluster options and declaration of the retry topology.

Per semantics.md section 3, three topic exchanges (`master`, `master.retry`,
`master.failed`) and, per consuming queue `{queue}`, the queues `{queue}@retry` (TTL,
dead-lettering back to `master` with routing key `{queue}`) and `{queue}@failed`.
`{queue}` is also bound to `master` with routing key `{queue}` so that a retried message
comes back to the failing queue only.

Declaring is idempotent: RabbitMQ accepts a declaration identical to what exists, and
refuses (406 PRECONDITION_FAILED) one that differs, which `declare_*` turn into a
`BrokerError` naming the queue instead of silently running with the wrong arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from brokers.base import BrokerError

RETRY_SUFFIX = "@retry"
FAILED_SUFFIX = "@failed"
DEFAULT_RETRY_TTL_MS = 30_000
DEFAULT_MAX_RETRIES = 3
# RabbitMQ caps queue names and routing keys at 255 bytes of UTF-8; the longest name
# Redrive derives from `{queue}` is `{queue}@failed`.
MAX_QUEUE_NAME_BYTES = 255 - len(FAILED_SUFFIX.encode())


@dataclass(frozen=True)
class Topology:
    """The exchange names and retry numbers of one cluster (its `options`).

    Options, all optional:

    - `exchange` (default "master"), `retry_exchange` (default "<exchange>.retry"),
      `failed_exchange` (default "<exchange>.failed");
    - `retry_ttl_ms`: how long a message waits in `{queue}@retry` (default 30000);
    - `max_retries`: retries before a message goes to `{queue}@failed` (default 3, so at
      most 4 deliveries);
    - `vhost`: read by the connection code, overriding the path of the amqp URL.
    """

    exchange: str = "master"
    retry_exchange: str = "master.retry"
    failed_exchange: str = "master.failed"
    retry_ttl_ms: int = DEFAULT_RETRY_TTL_MS
    max_retries: int = DEFAULT_MAX_RETRIES

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> Topology:
        options = options or {}
        exchange = str(options.get("exchange") or "master")
        try:
            ttl = int(options.get("retry_ttl_ms", DEFAULT_RETRY_TTL_MS))
            max_retries = int(options.get("max_retries", DEFAULT_MAX_RETRIES))
        except (TypeError, ValueError) as exc:
            raise BrokerError(f"retry_ttl_ms and max_retries must be integers: {exc}",
                              permanent=True) from exc
        if ttl < 0 or max_retries < 0:
            raise BrokerError("retry_ttl_ms and max_retries cannot be negative", permanent=True)
        topology = cls(
            exchange=exchange,
            retry_exchange=str(options.get("retry_exchange") or f"{exchange}.retry"),
            failed_exchange=str(options.get("failed_exchange") or f"{exchange}.failed"),
            retry_ttl_ms=ttl,
            max_retries=max_retries,
        )
        for name in topology.exchanges:
            if not name or name.startswith("amq.") or len(name.encode()) > 255:
                raise BrokerError(f"invalid exchange name {name!r}", permanent=True)
        if len(set(topology.exchanges)) != 3:
            raise BrokerError("the three exchanges need three different names", permanent=True)
        return topology

    @property
    def exchanges(self) -> tuple[str, str, str]:
        return (self.exchange, self.retry_exchange, self.failed_exchange)

    def retry_queue_arguments(self, queue: str) -> dict[str, Any]:
        return {
            "x-dead-letter-exchange": self.exchange,
            "x-dead-letter-routing-key": queue,
            "x-message-ttl": self.retry_ttl_ms,
        }


def retry_queue(queue: str) -> str:
    return queue + RETRY_SUFFIX


def failed_queue(queue: str) -> str:
    return queue + FAILED_SUFFIX


def is_derived_queue(name: str) -> bool:
    """True for `{queue}@retry` and `{queue}@failed`, which are never consuming queues."""
    return name.endswith((RETRY_SUFFIX, FAILED_SUFFIX))


def validate_queue_name(queue: str) -> str:
    """Return `queue` if it can be a consuming queue; raise a permanent BrokerError if not.

    Spaces, dots, `@` and any Unicode are fine. Refused: empty names, names RabbitMQ
    reserves (`amq.`), names too long once `@failed` is added, names that end in
    `@retry`/`@failed` themselves, and names with a dot-separated word `*` or `#`: the
    name is also a topic routing key, where such a word is a wildcard and would catch
    other queues' retries.
    """
    if not isinstance(queue, str) or not queue:
        raise BrokerError("a queue name cannot be empty", permanent=True)
    if "\x00" in queue:
        raise BrokerError("a queue name cannot contain NUL characters", permanent=True)
    if queue.startswith("amq."):
        raise BrokerError(f"queue name {queue!r} is reserved by RabbitMQ (amq.)", permanent=True)
    if len(queue.encode()) > MAX_QUEUE_NAME_BYTES:
        raise BrokerError(f"queue name is longer than {MAX_QUEUE_NAME_BYTES} bytes of UTF-8",
                          permanent=True)
    if is_derived_queue(queue):
        raise BrokerError(f"queue name {queue!r} ends in {RETRY_SUFFIX} or {FAILED_SUFFIX}, "
                          "which Redrive keeps for the retry and dead-letter queues", permanent=True)
    if any(word in ("*", "#") for word in queue.split(".")):
        raise BrokerError(f"queue name {queue!r} has a '*' or '#' word, a wildcard in routing keys",
                          permanent=True)
    return queue


def declare_exchanges(channel: Any, topology: Topology) -> None:
    """Declare the three topic exchanges, durable (passive=false: create if missing)."""
    for name in topology.exchanges:
        declare_exchange(channel, name)


def declare_exchange(channel: Any, name: str) -> None:
    _declaring(f"exchange {name!r}", lambda: channel.exchange_declare(
        exchange=name, exchange_type="topic", durable=True, auto_delete=False))


def declare_subscription(channel: Any, topology: Topology, queue: str,
                         routing_keys: Iterable[str] = ()) -> None:
    """Declare the exchanges and the queue's whole retry topology, idempotently.

    `routing_keys` are what the queue subscribes to on `master` (wildcards allowed);
    the binding with routing key `{queue}` is always added.
    """
    validate_queue_name(queue)
    declare_exchanges(channel, topology)
    declare_queue(channel, queue)
    declare_queue(channel, retry_queue(queue), topology.retry_queue_arguments(queue))
    declare_queue(channel, failed_queue(queue))
    for key in [*routing_keys, queue]:
        bind_queue(channel, queue, topology.exchange, key)
    bind_queue(channel, retry_queue(queue), topology.retry_exchange, queue)
    bind_queue(channel, failed_queue(queue), topology.failed_exchange, queue)


def declare_queue(channel: Any, name: str, arguments: Mapping[str, Any] | None = None) -> None:
    """A durable, non-exclusive, non-auto-delete queue."""
    _declaring(f"queue {name!r}", lambda: channel.queue_declare(
        queue=name, durable=True, exclusive=False, auto_delete=False,
        arguments=dict(arguments) if arguments else None))


def bind_queue(channel: Any, queue: str, exchange: str, routing_key: str) -> None:
    _declaring(f"binding of {queue!r} to {exchange!r}", lambda: channel.queue_bind(
        queue=queue, exchange=exchange, routing_key=routing_key))


def _declaring(what: str, declare: Any) -> None:
    import pika.exceptions

    try:
        declare()
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 406:
            raise BrokerError(f"{what} already exists with other settings: {exc.reply_text}",
                              permanent=True) from exc
        if exc.reply_code == 403:
            raise BrokerError(f"not allowed to declare {what}: {exc.reply_text}",
                              permanent=True) from exc
        raise BrokerError(f"declaring {what} failed: {exc.reply_text}",
                          permanent=exc.reply_code in (404, 530)) from exc
