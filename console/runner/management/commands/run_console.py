"""Run the console on embedded defaults: web server, Celery worker and beat, an
embedded pulsar-lite broker, the RocketMQ-style delay scheduler and demo traffic.

Anything unreachable (Redis for Celery, a broker) is reported and skipped; the web
console always starts.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from console.runner.services import default_clusters_ensure, demo_admin_ensure, tcp_reachable


class Command(BaseCommand):
    help = "Run the console with a Celery worker and beat on embedded defaults."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-celery", action="store_true", help="web server only")
        parser.add_argument("--no-demo", action="store_true", help="no demo traffic")
        parser.add_argument("--no-pulsar", action="store_true",
                            help="do not start the embedded pulsar-lite broker")

    def handle(self, *args, **options) -> None:
        username, password = demo_admin_ensure()
        default_clusters_ensure()
        broker = None if options["no_pulsar"] else self._start_pulsar()
        processes: list[subprocess.Popen] = []
        python = sys.executable
        celery_wanted = not options["no_celery"]
        if celery_wanted and tcp_reachable(settings.CELERY_BROKER_URL, default_port=6379):
            processes.append(subprocess.Popen(
                [python, "-m", "celery", "-A", "console", "worker", "--loglevel", "INFO",
                 "--concurrency", "2"]))
            processes.append(subprocess.Popen(
                [python, "-m", "celery", "-A", "console", "beat", "--loglevel", "INFO"]))
        elif celery_wanted:
            self.stderr.write(f"Redis for Celery is unreachable at {settings.CELERY_BROKER_URL}: "
                              "scheduled and background jobs will not run.")
        if tcp_reachable(settings.ROCKETMQ_DEFAULT_URL, default_port=6379):
            # Retries on RocketMQ-style clusters wait in a delay set until this moves them.
            processes.append(subprocess.Popen([python, "manage.py", "rocketmq_scheduler"]))
        address = f"{options['host']}:{options['port']}"
        processes.append(subprocess.Popen(
            [python, "manage.py", "runserver", address, "--noreload"]))
        self.stdout.write(self.style.SUCCESS(
            f"\nRedrive console: http://{address}/\nLog in as {username} / {password}\n"
            "Press Ctrl-C to stop.\n"))
        self.stdout.flush()
        demo = None if options["no_demo"] else self._start_demo()
        try:
            self._wait(processes)
        finally:
            if demo is not None:
                demo.stop()
            if broker is not None:
                broker.stop()

    def _start_pulsar(self):
        from console.runner.embedded_pulsar import embedded_pulsar_start
        from console.runner.services import embedded_pulsar_cluster_ensure

        broker = embedded_pulsar_start()
        if broker is None:
            self.stderr.write("The embedded pulsar-lite broker did not start (see the log); "
                              "the console runs without it.")
            return None
        embedded_pulsar_cluster_ensure(service_url=broker.service_url, metrics_url=broker.metrics_url)
        self.stdout.write(f"Embedded Pulsar (pulsar-lite): {broker.service_url}")
        return broker

    def _start_demo(self):
        """Start demo traffic in the background: reaching each broker may take a few
        seconds and must not hold up the console."""
        from console.runner.demo import DemoRunner, demo_runner_for_default_clusters

        lock = threading.Lock()

        def log(line: str) -> None:
            with lock:
                self.stdout.write(line)
                self.stdout.flush()

        holder: dict[str, DemoRunner] = {}

        def start() -> None:
            from django.db import connection

            try:
                runner = demo_runner_for_default_clusters(log=log)
                holder["runner"] = runner
                started = runner.start()
                log("Demo traffic on: " + (", ".join(started) or "no reachable default cluster"))
            except Exception as exc:  # noqa: BLE001 - the demo is optional, the console is not
                log(f"Demo traffic did not start: {exc}")
            finally:
                connection.close()

        starter = threading.Thread(target=start, name="demo-start", daemon=True)
        starter.start()

        class _Stopper:
            def stop(self) -> None:
                starter.join(30)
                if "runner" in holder:
                    holder["runner"].stop()

        return _Stopper()

    def _wait(self, processes: list[subprocess.Popen]) -> None:
        def stop(*_args) -> None:
            for process in processes:
                if process.poll() is None:
                    process.terminate()

        signal.signal(signal.SIGTERM, lambda *a: (stop(), sys.exit(0)))
        try:
            while all(p.poll() is None for p in processes[-1:]):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            stop()
            for process in processes:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
