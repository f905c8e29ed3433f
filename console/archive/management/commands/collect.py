"""manage.py collect --cluster NAME --subscription SUB [--limit N]"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from brokers.base import BrokerError
from console.archive.services import dead_letters_collect
from console.clusters.models import Cluster


class Command(BaseCommand):
    help = "Move what waits in a subscription's DLQ into the archive (audited as the system)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster name")
        parser.add_argument("--subscription", required=True)
        parser.add_argument("--limit", type=int, default=None, help="at most this many")

    def handle(self, *args, **options) -> None:
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        try:
            cluster = Cluster.objects.get(name=options["cluster"])
        except Cluster.DoesNotExist as exc:
            raise CommandError(f"no cluster named {options['cluster']!r}") from exc
        try:
            moved = dead_letters_collect(cluster=cluster, subscription=options["subscription"],
                                         actor=None, limit=options["limit"])
        except BrokerError as exc:
            raise CommandError(f"collect failed: {exc.message}") from exc
        self.stdout.write(f"collected {moved} dead letter(s) from {options['subscription']}")
