"""Run the delay scheduler of the RocketMQ-style clusters.

Retries on a RocketMQ-style cluster wait in a Redis sorted set (the delay set) until
they are due; this command moves due messages to their topic streams, for every
cluster of that kind (or the ones named with --cluster), one thread per cluster, until
Ctrl-C or SIGTERM. Several schedulers on the same Redis are safe: each message is moved
by exactly one of them. All state is in Redis, so stopping and starting this command
loses nothing: what fell due meanwhile is moved at once.
"""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from brokers.base import BrokerError
from brokers.rocketmq.connection import Connection
from brokers.rocketmq.delay import DelayScheduler
from console.clusters.models import Cluster
from console.clusters.services import cluster_config


class Command(BaseCommand):
    help = "Move due delayed messages (retries) to their topics on the RocketMQ-style clusters."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--cluster", action="append", default=[],
                            help="only this cluster (by name); may be given more than once")
        parser.add_argument("--once", action="store_true", help="move what is due now and exit")
        parser.add_argument("--seconds", type=float, default=0,
                            help="stop after this long (default: until Ctrl-C or SIGTERM)")

    def handle(self, *args, **options) -> None:
        clusters = Cluster.objects.filter(kind=Cluster.KIND_ROCKETMQ).order_by("name")
        if options["cluster"]:
            clusters = clusters.filter(name__in=options["cluster"])
            missing = set(options["cluster"]) - {c.name for c in clusters}
            if missing:
                raise CommandError(f"no RocketMQ-style cluster named {', '.join(sorted(missing))}")
        schedulers = []
        for cluster in clusters:
            try:
                connection = Connection.from_config(cluster_config(cluster))
            except BrokerError as exc:
                self.stderr.write(f"{cluster.name}: {exc}")
                continue
            schedulers.append((cluster.name, DelayScheduler(connection, name=f"delay-{cluster.name}")))
        if not schedulers:
            self.stderr.write("No RocketMQ-style cluster to schedule for.")
            return
        if options["once"]:
            self._once(schedulers)
            return
        self._run(schedulers, options["seconds"])

    def _once(self, schedulers: list[tuple[str, DelayScheduler]]) -> None:
        for name, scheduler in schedulers:
            try:
                moved = scheduler.run_once()
            except BrokerError as exc:
                self.stderr.write(f"{name}: {exc}")
                continue
            finally:
                scheduler.connection.close()
            self.stdout.write(f"{name}: moved {moved} due messages")

    def _run(self, schedulers: list[tuple[str, DelayScheduler]], seconds: float) -> None:
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_args: stop.set())
        threads = [threading.Thread(target=scheduler.run, args=(stop,), name=scheduler.name, daemon=True)
                   for _name, scheduler in schedulers]
        for thread in threads:
            thread.start()
        self.stdout.write("Delay scheduler running for " + ", ".join(n for n, _ in schedulers)
                          + " (Ctrl-C to stop)")
        self.stdout.flush()
        try:
            stop.wait(seconds or None)
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
            for _name, scheduler in schedulers:
                scheduler.connection.close()
