"""Run only the demo traffic (no web server), e.g. next to a console already running."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from console.runner.demo import demo_runner_for_default_clusters


class Command(BaseCommand):
    help = "Produce demo orders on the reachable default clusters and fail a share of them."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seconds", type=float, default=0,
                            help="stop after this long (default: until Ctrl-C)")

    def handle(self, *args, **options) -> None:
        def log(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        runner = demo_runner_for_default_clusters(log=log)
        started = runner.start()
        if not started:
            self.stderr.write("No default cluster with a demo driver is reachable.")
            return
        log("Demo traffic on: " + ", ".join(started) + " (Ctrl-C to stop)")
        deadline = time.monotonic() + options["seconds"] if options["seconds"] else None
        try:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            runner.stop()
