"""Demo traffic on a RocketMQ-style cluster: orders, a flaky consumer, retries and dead letters.

Topic `orders`, two consumer groups (clustering mode):

- `billing` (all tags) fails one order in ten for good (after two retries it lands in
  `%DLQ%billing`) and one in ten once (it comes back from `%RETRY%billing` and then
  succeeds);
- `shipping` (tag `created` only) never fails.

The demo uses short delay levels (1 s steps) and a max of 2 retries so dead letters show
up within a minute, and runs its own delay scheduler thread (the delay set is shared,
so it also moves anything else that is due). Plain Python through `brokers.rocketmq`,
no Django. The `demo_prefix` option (tests use it) is put in front of the topic and
group names.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections.abc import Callable

from brokers.base import BrokerError, ClusterConfig, KnownSubscription
from brokers.rocketmq.connection import Connection
from brokers.rocketmq.consumer import ConsumeResult, PushConsumer
from brokers.rocketmq.delay import DelayScheduler
from brokers.rocketmq.message import Message
from brokers.rocketmq.producer import Producer
from brokers.rocketmq.schedule import parse_delay_levels

TOPIC, BILLING, SHIPPING = "orders", "billing", "shipping"
DEMO_DELAY_LEVELS = "1s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 10s 10s 10s 10s 10s 10s 10s"
DEMO_MAX_RECONSUME_TIMES = 2
ORDERS_PER_SECOND = 2.0


def _names(config: ClusterConfig) -> tuple[str, str, str]:
    prefix = str(config.options.get("demo_prefix", ""))
    return prefix + TOPIC, prefix + BILLING, prefix + SHIPPING


def subscriptions(config: ClusterConfig) -> list[KnownSubscription]:
    topic, billing, shipping = _names(config)
    return [KnownSubscription(name=billing, source=topic, mode="clustering"),
            KnownSubscription(name=shipping, source=topic, mode="clustering")]


def billing_listener(message: Message) -> ConsumeResult:
    number = int(json.loads(message.body)["order"])
    if number % 10 == 3:
        raise ValueError(f"card declined for order {number}")
    if number % 10 == 7 and message.reconsume_times == 0:
        return ConsumeResult.RECONSUME_LATER  # the payment gateway was slow: try again
    return ConsumeResult.SUCCESS


def shipping_listener(message: Message) -> ConsumeResult:
    json.loads(message.body)
    return ConsumeResult.SUCCESS


def drive(config: ClusterConfig, stop: threading.Event, log: Callable[[str], None]) -> None:
    topic, billing, shipping = _names(config)
    try:
        connection = Connection.from_config(config)
        connection.delay_levels = parse_delay_levels(DEMO_DELAY_LEVELS)
        with connection.errors():
            connection.client.ping()
    except BrokerError as exc:
        log(f"Redis unreachable, no demo traffic: {exc}")
        return
    scheduler = DelayScheduler(connection, name="rocketmq-demo-delay").start()
    consumers = [
        PushConsumer(connection, billing, billing_listener, subscriptions={topic: "*"},
                     max_reconsume_times=DEMO_MAX_RECONSUME_TIMES, consume_timeout=30, threads=2),
        PushConsumer(connection, shipping, shipping_listener, subscriptions={topic: "created"},
                     max_reconsume_times=DEMO_MAX_RECONSUME_TIMES, consume_timeout=30, threads=2),
    ]
    producer = Producer(connection).start()  # its outbox keeps orders while Redis is away
    try:
        for consumer in consumers:
            consumer.start()
        log(f"producing orders to {topic}; {billing} fails some, {shipping} takes the created ones")
        failing = False
        for number in itertools.count(1):
            if stop.wait(1.0 / ORDERS_PER_SECOND):
                break
            order = {"order": number, "customer": f"c-{random.randint(1, 200)}",
                     "amount": round(random.uniform(5, 300), 2), "created_at": time.time()}
            try:
                result = producer.send(Message(topic=topic, body=json.dumps(order).encode(),
                                               tags="created" if number % 4 else "updated",
                                               keys=(f"order-{number}",), properties={"source": "demo"}))
            except BrokerError as exc:
                result = None
                error = str(exc)
            if result is None or not result.ok:
                if not failing:
                    log(f"sending failed, will keep trying: {result.error if result else error}")
                failing = True
                continue
            if failing:
                log("sending works again")
            failing = False
            if number % 50 == 0:
                log(f"{number} orders sent")
    except BrokerError as exc:
        log(f"stopped: {exc}")
    finally:
        for consumer in consumers:
            consumer.shutdown()
        producer.shutdown()
        scheduler.stop()
        connection.close()
