"""Demo traffic on the default clusters, so a newcomer sees retries and dead letters.

`make run` (`manage.py run_console`, unless `--no-demo`) and `manage.py demo` start a
`DemoRunner`. For each default cluster (see console.runner.services) whose kind has a
driver module here and whose broker answers, it

1. registers the driver's subscriptions with the console (so clusters without an
   inventory API list them),
2. runs the driver's `drive` in a thread, and
3. every ~10 s collects those subscriptions' DLQs into the archive
   (`dead_letters_collect`, actor None = the system).

The driver interface
--------------------
A driver is the module `console.runner.demo.<kind>` (kind as in Cluster.kind:
"pulsar", "rabbitmq", "rocketmq"). It must not import Django: it works through the
`brokers.<kind>` helpers only, like any application would. It exposes two functions:

    def subscriptions(config: ClusterConfig) -> list[KnownSubscription]:
        '''The subscriptions the demo consumes, each with its source and mode.'''

    def drive(config: ClusterConfig, stop: threading.Event,
              log: Callable[[str], None]) -> None:
        '''Produce demo orders and consume them with the broker's retry helper,
        failing a share of them so that retries and dead letters appear, until `stop`
        is set. Use short delays so things move within a minute. Return quietly
        (after one `log` line) if the broker is unreachable; never raise for it.'''

A missing driver module, an unreachable broker or a driver that crashes is logged
and skipped: the console always starts.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from types import ModuleType

from django.db import close_old_connections, connection

from brokers.base import BrokerError, KnownSubscription
from console.clusters.models import Cluster

logger = logging.getLogger(__name__)

COLLECT_INTERVAL_SECONDS = 10.0


def demo_driver(kind: str) -> ModuleType | None:
    """The driver module of a cluster kind, or None if there is none."""
    name = f"{__name__}.{kind}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


class DemoRunner:
    """Runs the drivers and the collector in daemon threads until `stop()`."""

    def __init__(self, *, clusters: list[Cluster], log: Callable[[str], None] | None = None,
                 collect_interval: float = COLLECT_INTERVAL_SECONDS) -> None:
        self.clusters = clusters
        self.log = log or logger.info
        self.collect_interval = collect_interval
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.collected: list[tuple[Cluster, KnownSubscription]] = []

    def start(self) -> list[str]:
        """Start what can start; return the names of the clusters with demo traffic."""
        from console.clusters.services import (
            cluster_config,
            cluster_test_connection,
            registered_subscription_add,
        )

        started = []
        for cluster in self.clusters:
            driver = demo_driver(cluster.kind)
            if driver is None:
                continue
            try:
                ok, message = cluster_test_connection(cluster=cluster)
            except Exception as exc:  # noqa: BLE001 - a broken adapter must not stop the console
                ok, message = False, str(exc)
            if not ok:
                self.log(f"demo: skipping {cluster.name}, broker unreachable: {message}")
                continue
            try:
                subscriptions = list(driver.subscriptions(cluster_config(cluster)))
                for sub in subscriptions:
                    registered_subscription_add(cluster=cluster, actor=None, name=sub.name,
                                                source=sub.source, mode=sub.mode)
            except (BrokerError, ValueError) as exc:
                self.log(f"demo: skipping {cluster.name}: {exc}")
                continue
            # The driver gets the config with its subscriptions registered.
            config = cluster_config(cluster)
            self._thread(f"demo-{cluster.name}", self._drive, driver, config, cluster.name)
            self.collected += [(cluster, sub) for sub in subscriptions]
            started.append(cluster.name)
        if self.collected:
            self._thread("demo-collector", self._collect_loop)
        return started

    def _thread(self, name: str, target: Callable, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _drive(self, driver: ModuleType, config, cluster_name: str) -> None:
        def log(line: str) -> None:
            self.log(f"demo {cluster_name}: {line}")

        try:
            driver.drive(config, self.stop_event, log)
        except Exception:  # noqa: BLE001 - a crashing demo must not take the console down
            logger.exception("demo driver for %s stopped with an error", cluster_name)
            log("stopped with an error (see the log)")

    def _collect_loop(self) -> None:
        from console.archive.services import dead_letters_collect

        try:
            while not self.stop_event.wait(self.collect_interval):
                close_old_connections()
                for cluster, sub in self.collected:
                    if self.stop_event.is_set():
                        break
                    try:
                        moved = dead_letters_collect(cluster=cluster, subscription=sub.name, actor=None)
                    except BrokerError as exc:
                        self.log(f"demo: collecting {sub.name} on {cluster.name} failed: {exc}")
                        continue
                    except Exception:  # noqa: BLE001 - keep collecting the other subscriptions
                        logger.exception("demo collect of %s on %s failed", sub.name, cluster.name)
                        continue
                    if moved:
                        self.log(f"demo: archived {moved} dead letters of {sub.name} on {cluster.name}")
        finally:
            connection.close()

    def stop(self, *, timeout: float = 15.0) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout)


def demo_runner_for_default_clusters(*, log: Callable[[str], None] | None = None) -> DemoRunner:
    """A runner over the default clusters that exist in the database."""
    from console.runner.services import default_cluster_names

    clusters = list(Cluster.objects.filter(name__in=default_cluster_names()).order_by("name"))
    return DemoRunner(clusters=clusters, log=log)
