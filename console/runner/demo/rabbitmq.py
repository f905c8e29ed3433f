"""Demo traffic on a RabbitMQ cluster: orders, a flaky consumer, retries and dead letters.

Two consuming queues on the cluster's `master` exchange:

- `billing@orders` (routing key `orders.*`) fails one order in ten for good (it ends in
  `billing@orders@failed` after the retries) and one in ten once (it comes back from
  `billing@orders@retry` and then succeeds);
- `shipping@orders` (routing key `orders.created`) never fails, and never sees
  billing's retries: they come back with routing key `billing@orders` only.

The retry wait is 3 s unless the cluster's options set `retry_ttl_ms`, so dead letters
show up within a minute. Plain Python through `brokers.rabbitmq`, no Django.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from brokers.base import BrokerError, ClusterConfig, KnownSubscription
from brokers.rabbitmq.connection import blocking_connection
from brokers.rabbitmq.consumer import ReceivedMessage, RetryingConsumer, publish_json
from brokers.rabbitmq.topology import Topology, declare_subscription

BILLING = "billing@orders"
SHIPPING = "shipping@orders"
ROUTES = {BILLING: ("orders.*",), SHIPPING: ("orders.created",)}
DEMO_RETRY_TTL_MS = 3000
ORDERS_PER_SECOND = 2.0


def _queues(config: ClusterConfig) -> dict[str, str]:
    """Queue names, with the optional `demo_queue_prefix` option in front (tests use it
    so they never share a queue with a running demo)."""
    prefix = str(config.options.get("demo_queue_prefix", ""))
    return {BILLING: prefix + BILLING, SHIPPING: prefix + SHIPPING}


def subscriptions(config: ClusterConfig) -> list[KnownSubscription]:
    names = _queues(config)
    return [KnownSubscription(name=names[name], source=", ".join(keys), mode="ttl-dlx")
            for name, keys in ROUTES.items()]


def demo_config(config: ClusterConfig) -> ClusterConfig:
    """The cluster's config with the demo's short retry wait unless one is configured."""
    options = dict(config.options)
    options.setdefault("retry_ttl_ms", DEMO_RETRY_TTL_MS)
    return ClusterConfig(kind=config.kind, name=config.name, service_url=config.service_url,
                         admin_url=config.admin_url, username=config.username, password=config.password,
                         token=config.token, options=options, timeout_seconds=config.timeout_seconds)


def billing_handler(message: ReceivedMessage) -> None:
    order = message.json()
    number = int(order["order"])
    if number % 10 == 3:
        raise ValueError(f"card declined for order {number}")
    if number % 10 == 7 and message.retry_count == 0:
        raise TimeoutError(f"payment gateway timed out for order {number}")


def shipping_handler(message: ReceivedMessage) -> None:
    message.json()


def _orders(stop: threading.Event) -> Iterator[dict[str, Any]]:
    for number in itertools.count(1):
        if stop.wait(1.0 / ORDERS_PER_SECOND):
            return
        yield {"order": number, "customer": f"c-{random.randint(1, 200)}",
               "amount": round(random.uniform(5, 300), 2), "created_at": time.time()}


def drive(config: ClusterConfig, stop: threading.Event, log: Callable[[str], None]) -> None:
    config = demo_config(config)
    names = _queues(config)
    try:
        topology = Topology.from_options(config.options)
        with blocking_connection(config, doing="declaring the demo topology", purpose="demo") as connection:
            channel = connection.channel()
            for name, keys in ROUTES.items():
                declare_subscription(channel, topology, names[name], keys)
    except BrokerError as exc:
        log(f"RabbitMQ demo not started: {exc}")
        return
    log(f"RabbitMQ demo: orders to {topology.exchange} (orders.created), consumers {names[BILLING]} "
        f"(fails some) and {names[SHIPPING]}, retry wait {topology.retry_ttl_ms} ms, "
        f"max {topology.max_retries} retries")

    def consume(name: str, handler: Callable[[ReceivedMessage], None]) -> None:
        try:
            RetryingConsumer(config, name, handler, declare=False, log=log).run(stop=stop)
        except BrokerError as exc:
            log(f"RabbitMQ demo consumer {name} stopped: {exc}")

    threads = [threading.Thread(target=consume, args=(names[BILLING], billing_handler), daemon=True,
                                name="demo-rabbitmq-billing"),
               threading.Thread(target=consume, args=(names[SHIPPING], shipping_handler), daemon=True,
                                name="demo-rabbitmq-shipping")]
    for thread in threads:
        thread.start()
    try:
        publish_json(config, "orders.created", _orders(stop))
    except BrokerError as exc:
        log(f"RabbitMQ demo producer stopped: {exc}")
    # The consumers end once `stop` is set (or their connection is lost).
    for thread in threads:
        thread.join()
