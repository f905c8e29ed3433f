"""Broker adapters and consumer-side retry helpers, plain Python with no Django.

`brokers.base` is the contract; each broker lives in its own sub-package, the only
place that imports that broker's client library. `adapter_for` builds the adapter of
a cluster's kind, importing its sub-package on first use.
"""

from __future__ import annotations

import importlib

from brokers.base import BrokerAdapter, BrokerError, ClusterConfig

ADAPTER_PATHS = {
    "pulsar": "brokers.pulsar.adapter.PulsarAdapter",
    "rocketmq": "brokers.rocketmq.adapter.RocketMQAdapter",
    "rabbitmq": "brokers.rabbitmq.adapter.RabbitMQAdapter",
}


def adapter_for(config: ClusterConfig) -> BrokerAdapter:
    """The adapter for a cluster; an unknown or not yet installed kind is a permanent error."""
    path = ADAPTER_PATHS.get(config.kind)
    if path is None:
        raise BrokerError(f"unknown cluster kind {config.kind!r}", permanent=True)
    module_name, class_name = path.rsplit(".", 1)
    try:
        adapter_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise BrokerError(
            f"the {config.kind} adapter is not available: {exc}", permanent=True
        ) from exc
    return adapter_class(config)


__all__ = ["ADAPTER_PATHS", "BrokerAdapter", "BrokerError", "ClusterConfig", "adapter_for"]
