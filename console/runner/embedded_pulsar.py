"""The pulsar-lite broker `make run` starts as the default demo cluster.

Its data lives under settings.VAR_DIR/pulsar-lite, so dead letters and subscriptions
survive a restart. It listens on 6650 when that port is free (else on any free port,
and the "embedded-pulsar" cluster is updated to match), and its metrics endpoint on
loopback only. It stops with the run command.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from brokers.base import BrokerError
from brokers.pulsar.embedded import EmbeddedPulsar

logger = logging.getLogger(__name__)

EMBEDDED_PULSAR_NAME = "embedded-pulsar"
DEFAULT_PORT = 6650
DEFAULT_METRICS_PORT = 6651


def embedded_pulsar_start(*, var_dir: Path | None = None, port: int = DEFAULT_PORT,
                          metrics_port: int = DEFAULT_METRICS_PORT) -> EmbeddedPulsar | None:
    """Start the broker; None (and a logged reason) if it cannot start, because the
    console must run without it."""
    data_dir = (var_dir or settings.VAR_DIR) / "pulsar-lite"
    broker = EmbeddedPulsar(data_dir, port=port, metrics_port=metrics_port)
    try:
        return broker.start()
    except (BrokerError, OSError, ImportError, RuntimeError) as exc:
        logger.warning("embedded pulsar-lite did not start: %s", exc)
        return None
