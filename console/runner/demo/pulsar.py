"""Demo traffic on the embedded Pulsar: orders, a billing consumer, some failures.

The consumer uses the project's retry helper (`RetryConsumer.reconsume_later`) with
short delays and at most 3 retries, so within a minute its retry topic and DLQ fill:
every fifth order has a declined card (fails every time and ends in the DLQ), every
fifth order after that hits a timeout once and succeeds on its first retry. No
Django here (see the driver interface in console/runner/demo/__init__.py).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections.abc import Callable

from brokers.base import BrokerError, ClusterConfig, KnownSubscription
from brokers.pulsar.adapter import PulsarAdapter
from brokers.pulsar.naming import CONSOLE_SUBSCRIPTION
from brokers.pulsar.retry import RetryConsumer, client_connect, retry_count_of

SOURCE = "persistent://public/default/demo-orders"
SUBSCRIPTION = "demo-billing"
MODE = "Shared"
MAX_RETRIES = 3
DELAY_LEVELS = "1s 2s 3s"
ORDERS_PER_SECOND = 2.0


def subscriptions(config: ClusterConfig) -> list[KnownSubscription]:
    return [KnownSubscription(name=SUBSCRIPTION, source=SOURCE, mode=MODE)]


def drive(config: ClusterConfig, stop: threading.Event, log: Callable[[str], None]) -> None:
    try:
        with PulsarAdapter(config) as adapter:
            adapter.check_connection()
    except BrokerError as exc:
        log(f"Pulsar unreachable, no demo traffic: {exc}")
        return
    client = client_connect(config.service_url, token=config.token,
                            timeout_seconds=config.timeout_seconds)
    consumer = None
    try:
        producer = client.create_producer(SOURCE)
        consumer = RetryConsumer(
            client, SOURCE, SUBSCRIPTION, consumer_type=MODE,
            naming_version=str(config.options.get("naming_version") or "2.9"),
            max_redeliver_count=MAX_RETRIES, delay_levels=DELAY_LEVELS,
            initial_subscription_name=str(config.options.get("console_subscription")
                                          or CONSOLE_SUBSCRIPTION),
            initial_position="earliest",
        )
        log(f"producing orders to {SOURCE}; {SUBSCRIPTION} fails some of them")
        _loop(producer, consumer, stop)
        producer.close()
    except Exception as exc:  # noqa: BLE001 - the broker went away: stop the demo, not the console
        log(f"demo stopped: {exc}")
    finally:
        # Closing after a lost connection may fail; there is nothing left to save.
        with contextlib.suppress(Exception):
            if consumer is not None:
                consumer.close()
            client.close()


def _loop(producer, consumer: RetryConsumer, stop: threading.Event) -> None:
    order = int(time.time()) % 100_000 * 10
    next_send = time.monotonic()
    while not stop.is_set():
        if time.monotonic() >= next_send:
            order += 1
            body = {"order": order, "customer": f"c-{random.randint(1, 40)}",
                    "amount": round(random.uniform(5, 500), 2)}
            producer.send(json.dumps(body).encode(), properties={"tenant": "demo-shop"},
                          partition_key=body["customer"])
            next_send += 1 / ORDERS_PER_SECOND
        message = consumer.poll(100)
        if message is not None:
            _bill(consumer, message)


def _bill(consumer: RetryConsumer, message) -> None:
    try:
        order = int(json.loads(message.data())["order"])
    except (ValueError, KeyError, TypeError):
        consumer.reconsume_later(message, properties={"error": "InvalidOrder: not JSON"})
        return
    if order % 5 == 0:
        consumer.reconsume_later(message, properties={"error": "CardDeclined: insufficient funds"})
    elif order % 5 == 1 and retry_count_of(message) == 0:
        consumer.reconsume_later(message, properties={"error": "TimeoutException: inventory service"})
    else:
        consumer.acknowledge(message)
