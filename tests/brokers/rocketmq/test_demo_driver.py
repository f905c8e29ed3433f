"""The demo driver (console/runner/demo/rocketmq.py) against real Redis: orders flow,
billing's failures reach its retry topic and DLQ within a minute, and an unreachable
Redis makes it return quietly."""

from __future__ import annotations

import ast
import threading
import uuid
from pathlib import Path

from brokers import adapter_for
from brokers.base import ClusterConfig
from console.runner.demo import rocketmq as demo
from tests.fixtures.rocketmq import CONTRACT_DB, SHARED_URL, delete_prefix, free_port, wait_for


def test_the_demo_driver_imports_only_the_broker_library_not_django():
    tree = ast.parse(Path(demo.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not any(name.startswith(("django", "console")) for name in imported), imported
    assert any(name.startswith("brokers.rocketmq") for name in imported)


def test_the_demo_produces_orders_and_billing_failures_become_dead_letters():
    prefix = f"test-demo-{uuid.uuid4().hex[:8]}:"
    config = ClusterConfig(kind="rocketmq", name="local-rocketmq",
                           service_url=SHARED_URL.format(db=CONTRACT_DB),
                           options={"key_prefix": prefix, "demo_prefix": "t"})
    stop = threading.Event()
    lines: list[str] = []
    thread = threading.Thread(target=demo.drive, args=(config, stop, lines.append), daemon=True)
    thread.start()
    try:
        with adapter_for(config) as adapter:
            def listed():
                return {s.name: s for s in adapter.list_subscriptions()}

            assert wait_for(lambda: (listed().get("tbilling") and listed()["tbilling"].dead_letter_depth),
                            timeout=60)
            subscriptions = listed()
    finally:
        stop.set()
        thread.join(20)
        delete_prefix(config.service_url, prefix)
    assert not thread.is_alive()
    assert [s.name for s in demo.subscriptions(config)] == ["tbilling", "tshipping"]
    billing, shipping = subscriptions["tbilling"], subscriptions["tshipping"]
    assert billing.source == shipping.source == "torders"
    assert billing.healthy and shipping.healthy
    assert shipping.dead_letter_depth == 0
    assert any("producing orders" in line for line in lines)


def test_the_demo_returns_quietly_when_redis_is_unreachable():
    config = ClusterConfig(kind="rocketmq", name="gone", service_url=f"redis://127.0.0.1:{free_port()}/5",
                           timeout_seconds=1)
    lines: list[str] = []
    demo.drive(config, threading.Event(), lines.append)
    assert len(lines) == 1 and "unreachable" in lines[0]
