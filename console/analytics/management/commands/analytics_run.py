"""manage.py analytics_run: the nightly pipeline now, in this process (export, Spark jobs, load)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.analytics import services
from console.analytics.models import PipelineRun


class Command(BaseCommand):
    help = "Run the analytics pipeline: export the archive, run the Spark jobs, load the summaries."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--master",
            default="",
            help="Spark master URL: local[*] (default, or ANALYTICS_SPARK_MASTER), "
            "spark://host:7077, yarn, k8s://...",
        )

    def handle(self, *args, master: str, **options) -> None:
        try:
            run = services.pipeline_run_request(
                actor=None, trigger=PipelineRun.COMMAND, master=master or None, enqueue=False
            )
        except services.PipelineBusy as exc:
            raise CommandError(str(exc)) from exc
        run = services.pipeline_run_execute(run_id=run.pk)
        if run.status != PipelineRun.SUCCEEDED:
            raise CommandError(f"run {run.pk} failed: {run.error}")
        jobs = ", ".join(f"{name} {job['rows']} rows {job['seconds']} s" for name, job in run.jobs.items())
        self.stdout.write(
            f"run {run.pk} succeeded on {run.master} in {run.duration_seconds:.1f} s "
            f"over {run.input_rows} letters: {jobs}"
        )
