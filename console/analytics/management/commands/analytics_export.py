"""manage.py analytics_export: bring the Parquet export of the archive up to date."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.analytics import conf, services


class Command(BaseCommand):
    help = "Export the dead-letter archive (what changed since the last export) to Parquet."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--path",
            default="",
            help=f"export path (default ANALYTICS_EXPORT_PATH, now {conf.export_path()})",
        )

    def handle(self, *args, path: str, **options) -> None:
        try:
            result = services.analytics_export(export_path=path or None)
        except services.ExportBusy as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"exported {result.rows} row(s) in {result.partitions} partition(s), {result.batches} batch(es)"
        )
