"""Run the console on embedded defaults: web server, Celery worker and beat.

Anything unreachable (Redis for Celery, a broker) is reported and skipped; the web
console always starts.
"""

from __future__ import annotations

import signal
import subprocess
import sys
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

    def handle(self, *args, **options) -> None:
        username, password = demo_admin_ensure()
        default_clusters_ensure()
        processes: list[subprocess.Popen] = []
        python = sys.executable
        if options["no_celery"]:
            pass
        elif tcp_reachable(settings.CELERY_BROKER_URL, default_port=6379):
            processes.append(subprocess.Popen(
                [python, "-m", "celery", "-A", "console", "worker", "--loglevel", "INFO",
                 "--concurrency", "2"]))
            processes.append(subprocess.Popen(
                [python, "-m", "celery", "-A", "console", "beat", "--loglevel", "INFO"]))
        else:
            self.stderr.write(f"Redis for Celery is unreachable at {settings.CELERY_BROKER_URL}: "
                              "scheduled and background jobs will not run.")
        address = f"{options['host']}:{options['port']}"
        processes.append(subprocess.Popen(
            [python, "manage.py", "runserver", address, "--noreload"]))
        self.stdout.write(self.style.SUCCESS(
            f"\nRedrive console: http://{address}/\nLog in as {username} / {password}\n"
            "Press Ctrl-C to stop.\n"))
        self.stdout.flush()
        self._wait(processes)

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
