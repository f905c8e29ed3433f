"""manage.py rebuild --cluster NAME --subscription SUB [--apply]"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from brokers.base import BrokerError
from console.clusters.models import Cluster
from console.clusters.services import rebuild_apply, rebuild_plan


class Command(BaseCommand):
    help = "Show what a subscription's retry/DLQ topology lacks; with --apply, create it (audited)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster name")
        parser.add_argument("--subscription", required=True)
        parser.add_argument("--apply", action="store_true", help="create what is missing")

    def handle(self, *args, **options) -> None:
        try:
            cluster = Cluster.objects.get(name=options["cluster"])
        except Cluster.DoesNotExist as exc:
            raise CommandError(f"no cluster named {options['cluster']!r}") from exc
        try:
            if options["apply"]:
                plan = rebuild_apply(cluster=cluster, subscription=options["subscription"], actor=None)
                verb = "created"
            else:
                plan = rebuild_plan(cluster=cluster, subscription=options["subscription"])
                verb = "would create"
        except BrokerError as exc:
            raise CommandError(f"rebuild failed: {exc.message}") from exc
        if not plan.steps:
            self.stdout.write("nothing is missing")
        for step in plan.steps:
            self.stdout.write(f"{verb}: {step.action} {step.target} {step.detail}".rstrip())
