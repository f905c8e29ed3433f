"""`manage.py replay`: start, watch and control replay jobs from a shell script.

    manage.py replay start --cluster 1 --subscription orders-sub --property error=Timeout --rate 200
    manage.py replay start --ids 4,5,6 --dry-run
    manage.py replay show 12 [--json] [--wait]
    manage.py replay pause|resume|cancel 12
    manage.py replay list

Actions are audited as the system user unless --user names a user.
"""

from __future__ import annotations

import json
import time

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.archive.forms import ArchiveFilterForm
from console.replay import selectors, services
from console.replay.models import ReplayJob


class Command(BaseCommand):
    help = "Start a replay job from a filter or ids, show a job's progress, pause/resume/cancel it."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        start = sub.add_parser("start", help="start a replay job")
        for name in ("cluster", "subscription", "state", "text", "property", "since", "until"):
            start.add_argument(f"--{name}", default="")
        start.add_argument("--ids", default="", help="comma-separated archive ids instead of a filter")
        start.add_argument("--rate", default=str(services.DEFAULT_RATE),
                           help="messages per second, or 'unthrottled'")
        start.add_argument("--batch-size", type=int, default=services.DEFAULT_BATCH)
        start.add_argument("--destination", default="")
        start.add_argument("--dry-run", action="store_true")
        start.add_argument("--description", default="")
        start.add_argument("--user", default="", help="username recorded in the audit log")
        for name in ("show", "pause", "resume", "cancel"):
            one = sub.add_parser(name)
            one.add_argument("job_id", type=int)
            one.add_argument("--user", default="")
            if name == "show":
                one.add_argument("--json", action="store_true", help="print one JSON object")
                one.add_argument("--wait", action="store_true", help="poll until the job stops")
        sub.add_parser("list", help="the 20 newest jobs")

    def _actor(self, username: str):
        if not username:
            return None
        try:
            return get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist as exc:
            raise CommandError(f"no user named {username!r}") from exc

    def handle(self, *args, action: str, **options) -> None:
        try:
            getattr(self, f"do_{action}")(**options)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        except ReplayJob.DoesNotExist as exc:
            raise CommandError(f"no replay job #{options.get('job_id')}") from exc

    def do_start(self, **options) -> None:
        rate = None if options["rate"].strip().lower() == "unthrottled" else options["rate"]
        common = {"actor": self._actor(options["user"]), "rate_limit": rate,
                  "batch_size": options["batch_size"],
                  "destination": options["destination"], "dry_run": options["dry_run"],
                  "description": options["description"] or "started from the command line"}
        if options["ids"]:
            try:
                ids = [int(part) for part in options["ids"].split(",") if part.strip()]
            except ValueError as exc:
                raise CommandError("--ids takes comma-separated numbers") from exc
            job = services.replay_job_create(letter_ids=ids, **common)
        else:
            form = ArchiveFilterForm({k: options[k] for k in ArchiveFilterForm.base_fields if options.get(k)})
            if not form.is_valid():
                raise CommandError("; ".join(f"{f}: {' '.join(e)}" for f, e in form.errors.items()))
            job = services.replay_job_create(filters=form.filters(), **common)
        verb = "would replay" if job.dry_run else "replays"
        self.stdout.write(f"job #{job.pk} {verb} {job.total} dead letter(s) ({job.state})")

    def _print(self, job: ReplayJob, as_json: bool) -> None:
        progress = selectors.replay_job_progress(job=job)
        if as_json:
            self.stdout.write(json.dumps(progress, default=str))
            return
        eta = f", ETA {progress['eta_seconds']} s" if progress["eta_seconds"] is not None else ""
        self.stdout.write(
            f"job #{job.pk} {job.state}: {progress['done']} replayed, {progress['failed']} failed, "
            f"{progress['skipped']} skipped, {progress['remaining']} remaining of {progress['total']} "
            f"({progress['percent']}%), {progress['rate']} msg/s{eta}"
            + (f" - {job.state_reason}" if job.state_reason else ""))

    def do_show(self, *, job_id: int, **options) -> None:
        job = selectors.replay_job_get(job_id=job_id)
        self._print(job, options["json"])
        while options["wait"] and job.state in (ReplayJob.STATE_QUEUED, ReplayJob.STATE_RUNNING):
            time.sleep(2)
            job = selectors.replay_job_get(job_id=job_id)
            self._print(job, options["json"])

    def do_pause(self, *, job_id: int, **options) -> None:
        self._print(services.replay_job_pause(job_id=job_id, actor=self._actor(options["user"])), False)

    def do_resume(self, *, job_id: int, **options) -> None:
        self._print(services.replay_job_resume(job_id=job_id, actor=self._actor(options["user"])), False)

    def do_cancel(self, *, job_id: int, **options) -> None:
        self._print(services.replay_job_cancel(job_id=job_id, actor=self._actor(options["user"])), False)

    def do_list(self, **options) -> None:
        for job in selectors.replay_job_list()[:20]:
            self._print(job, False)
