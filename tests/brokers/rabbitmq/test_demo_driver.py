"""The RabbitMQ demo driver (console/runner/demo/rabbitmq.py) against the real broker."""

from __future__ import annotations

import threading
import time
import uuid

from brokers.rabbitmq.topology import failed_queue, retry_queue
from console.runner.demo import rabbitmq as demo


def test_the_demo_makes_retries_and_dead_letters_appear_and_stops_when_asked(make_rabbitmq_harness):
    harness = make_rabbitmq_harness(retry_ttl_ms=200)
    prefix = f"demo-{uuid.uuid4().hex[:8]}-"
    config = harness.cluster_config(options={**harness.options, "demo_queue_prefix": prefix})
    names = [s.name for s in demo.subscriptions(config)]
    harness.queues.extend(names)
    billing, shipping = names
    assert billing == prefix + "billing@orders"
    stop = threading.Event()
    lines: list[str] = []
    driver = threading.Thread(target=demo.drive, args=(config, stop, lines.append))
    driver.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if harness.depth(failed_queue(billing)) >= 1:
                break
    finally:
        stop.set()
        driver.join(timeout=30)
    assert not driver.is_alive()
    assert harness.depth(failed_queue(billing)) >= 1
    [(body, props)] = harness.receive(failed_queue(billing), 1)
    assert props["x-retry-count"] == "3"
    assert "card declined" in props["x-redrive-error"]
    # Shipping never failed and never saw billing's retries.
    assert harness.depth(retry_queue(shipping)) == harness.depth(failed_queue(shipping)) == 0
    assert "RabbitMQ demo:" in lines[0]


def test_the_demo_returns_quietly_when_rabbitmq_is_unreachable(rabbitmq_harness):
    lines: list[str] = []
    demo.drive(rabbitmq_harness.unreachable_config(), threading.Event(), lines.append)
    assert len(lines) == 1 and "not started" in lines[0]
