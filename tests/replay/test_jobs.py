"""Replay jobs without a broker: what is refused, what is selected, control, audit,
schedules, auto-collect, retention and roles."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from console.accounts.roles import role_permissions
from console.archive.models import DeadLetter
from console.archive.services import dead_letters_discard
from console.audit.models import AuditEntry
from console.replay import services
from console.replay.models import ReplayJob, ReplayLedgerEntry, ReplayPolicy


@pytest.mark.parametrize("rate", [0, -5, "nan", "inf", 10_000_000, "fast"])
def test_a_rate_that_is_zero_negative_or_absurd_is_refused_and_nothing_is_created(
        rate, make_cluster, make_dead_letters, operator):
    letters = make_dead_letters(make_cluster(), 3)
    with pytest.raises(ValidationError) as refused:
        services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], rate_limit=rate)
    assert "rate" in str(refused.value).lower()
    assert not ReplayJob.objects.exists() and not ReplayLedgerEntry.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="replay").exists()


@pytest.mark.parametrize("size", [0, -1, 100_000, "ten"])
def test_a_batch_size_out_of_range_is_refused(size, make_cluster, make_dead_letters, operator):
    letters = make_dead_letters(make_cluster(), 1)
    with pytest.raises(ValidationError, match="batch size"):
        services.replay_job_create(actor=operator, letter_ids=[letters[0].pk], batch_size=size)
    assert not ReplayJob.objects.exists()


def test_unknown_ids_are_refused(operator):
    with pytest.raises(ValidationError, match="None of the selected"):
        services.replay_job_create(actor=operator, letter_ids=[987654, 987655])
    with pytest.raises(ValidationError, match="at least one"):
        services.replay_job_create(actor=operator, letter_ids=[])


def test_a_filter_matching_nothing_says_zero_on_a_dry_run_and_finishes_at_once(make_cluster, operator,
                                                                               make_dead_letters):
    cluster = make_cluster()
    make_dead_letters(cluster, 4)
    dry = services.replay_job_create(actor=operator, filters={"cluster": cluster.pk, "text": "no such"},
                                     dry_run=True)
    assert (dry.state, dry.total, dry.dry_run) == ("done", 0, True)
    real = services.replay_job_create(actor=operator, filters={"cluster": cluster.pk, "text": "no such"})
    assert (real.state, real.total, real.remaining) == ("done", 0, 0)
    assert not ReplayLedgerEntry.objects.exists()


def test_a_dry_run_counts_only_parked_and_failed_letters_and_sends_nothing(make_cluster, make_dead_letters,
                                                                           operator):
    cluster = make_cluster()
    letters = make_dead_letters(cluster, 5)
    dead_letters_discard(letter_ids=[letters[0].pk], actor=operator)
    DeadLetter.objects.filter(pk=letters[1].pk).update(state="failed")
    job = services.replay_job_create(actor=operator, filters={"cluster": cluster.pk}, dry_run=True)
    assert job.total == 4 and job.state == "done"
    assert not ReplayLedgerEntry.objects.exists()
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {"parked", "failed", "discarded"}
    assert AuditEntry.objects.get(action="replay.dry_run").count == 4


def test_a_second_job_on_a_selection_already_being_replayed_is_refused_naming_the_first(
        make_cluster, make_dead_letters, operator):
    letters = make_dead_letters(make_cluster(), 3)
    ids = [x.pk for x in letters]
    first = services.replay_job_create(actor=operator, letter_ids=ids)
    with pytest.raises(ValidationError, match=f"#{first.pk}"):
        services.replay_job_create(actor=operator, letter_ids=ids)
    assert ReplayJob.objects.count() == 1
    # Overlapping selections: the new job takes only the letters nobody holds.
    more = make_dead_letters(letters[0].cluster, 2)
    second = services.replay_job_create(actor=operator, letter_ids=ids + [x.pk for x in more])
    assert second.total == 2


def test_a_filter_job_stores_its_filter_and_selects_the_matching_letters(make_cluster, make_dead_letters,
                                                                         operator):
    cluster = make_cluster()
    make_dead_letters(cluster, 3, subscription="orders-sub", properties={"error": "Timeout"})
    make_dead_letters(cluster, 2, subscription="orders-sub", properties={"error": "Refused"})
    job = services.replay_job_create(
        actor=operator, filters={"cluster": cluster.pk, "property": ("error", "Timeout")}, rate_limit=25)
    assert job.total == 3 and job.rate_limit == 25
    assert job.filters == {"cluster": cluster.pk, "property": "error=Timeout"}
    assert services.replay_filters_parse(job.filters)["property"] == ("error", "Timeout")


def test_pause_resume_cancel_follow_the_job_state_and_are_audited(make_cluster, make_dead_letters, operator):
    letters = make_dead_letters(make_cluster(), 2)
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters])
    assert services.replay_job_pause(job_id=job.pk, actor=operator).state == "paused"
    with pytest.raises(ValidationError, match="paused"):
        services.replay_job_pause(job_id=job.pk, actor=operator)
    assert services.replay_job_resume(job_id=job.pk, actor=operator).state == "queued"
    cancelled = services.replay_job_cancel(job_id=job.pk, actor=operator)
    assert cancelled.state == "cancelled" and cancelled.remaining == 2
    with pytest.raises(ValidationError, match="already cancelled"):
        services.replay_job_cancel(job_id=job.pk, actor=operator)
    with pytest.raises(ValidationError):
        services.replay_job_resume(job_id=job.pk, actor=operator)
    # Unsent letters stay parked, free for another job.
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {"parked"}
    assert services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters]).total == 2
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["replay.start", "replay.pause", "replay.resume", "replay.cancel", "replay.start"]


def test_an_unknown_job_id_is_a_clear_not_found(operator):
    for control in (services.replay_job_pause, services.replay_job_resume, services.replay_job_cancel):
        with pytest.raises(ReplayJob.DoesNotExist):
            control(job_id=424242, actor=operator)
    assert services.replay_job_run(job_id=424242) == "not mine"


def test_a_live_run_cannot_be_resumed_twice_but_a_dead_one_can(make_cluster, make_dead_letters, operator,
                                                               settings):
    letters = make_dead_letters(make_cluster(), 1)
    job = services.replay_job_create(actor=operator, letter_ids=[letters[0].pk])
    ReplayJob.objects.filter(pk=job.pk).update(state="running", lease_id="abc", heartbeat_at=timezone.now())
    with pytest.raises(ValidationError, match="is running"):
        services.replay_job_resume(job_id=job.pk, actor=operator)
    assert services.replay_jobs_recover() == []
    ReplayJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert services.replay_jobs_recover() == [job.pk]
    job.refresh_from_db()
    assert job.lease_id == "" and job.state == "running"


def test_cancelling_a_dead_run_marks_its_in_flight_letters_failed_with_the_reason(
        make_cluster, make_dead_letters, operator):
    letters = make_dead_letters(make_cluster(), 3)
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters], batch_size=2)
    ReplayJob.objects.filter(pk=job.pk).update(state="running")
    services._claim_batch(job, 2)  # a run claimed two letters, then its worker died
    services.replay_job_cancel(job_id=job.pk, actor=operator)

    failed = DeadLetter.objects.filter(state="failed")
    assert failed.count() == 2
    assert all("may have reached the broker" in x.state_reason for x in failed)
    assert DeadLetter.objects.filter(state="parked").count() == 1
    assert not DeadLetter.objects.filter(state="replaying").exists()


def test_only_parked_or_failed_letters_can_be_resent_and_edits_are_checked(make_cluster, make_dead_letters,
                                                                           operator):
    letter, other = make_dead_letters(make_cluster(), 2)
    with pytest.raises(ValidationError, match="JSON object"):
        services.dead_letter_resend(letter=letter, actor=operator, properties="[1, 2]")
    with pytest.raises(ValidationError, match="text key"):
        services.dead_letter_resend(letter=letter, actor=operator, properties={"n": 5})
    DeadLetter.objects.filter(pk=other.pk).update(state="replayed")
    other.refresh_from_db()
    with pytest.raises(ValidationError, match="only parked or failed"):
        services.dead_letter_resend(letter=other, actor=operator)
    assert not ReplayJob.objects.exists()


def test_the_roles_get_the_replay_permissions():
    viewer, operator, admin = (set(role_permissions(r)) for r in ("viewer", "operator", "admin"))
    assert "replay.view_replayjob" in viewer and "replay.add_replayjob" not in viewer
    assert {"replay.add_replayjob", "replay.control_replayjob"} <= operator
    assert "replay.change_replaypolicy" not in operator
    assert {"replay.add_replaypolicy", "replay.change_replaypolicy",
            "replay.change_retentionsetting"} <= admin


# --- schedules ---------------------------------------------------------------------

def test_saving_a_policy_keeps_its_beat_entry_in_step_and_is_audited(make_cluster, admin_user):
    cluster = make_cluster()
    policy = services.replay_policy_save(
        actor=admin_user, name="nightly orders", cluster=cluster, subscription="orders-sub",
        filters={"property": "error=Timeout"}, rate_limit=200, max_per_run=500, cron="0 2 * * *",
        enabled=True)
    task = PeriodicTask.objects.get(pk=policy.periodic_task_id)
    assert task.task == "console.replay.tasks.replay_policy_run"
    assert json.loads(task.args) == [policy.pk] and task.enabled
    assert (task.crontab.minute, task.crontab.hour) == ("0", "2")

    services.replay_policy_save(actor=admin_user, policy=policy, cron="30 4 * * 1-5", enabled=False)
    task.refresh_from_db()
    assert (task.crontab.minute, task.crontab.hour, task.crontab.day_of_week) == ("30", "4", "1-5")
    assert not task.enabled
    assert list(AuditEntry.objects.filter(action__startswith="schedule.").order_by("id")
                .values_list("action", flat=True)) == ["schedule.create", "schedule.update"]

    services.replay_policy_delete(policy=policy, actor=admin_user)
    assert not PeriodicTask.objects.filter(pk=task.pk).exists()
    assert AuditEntry.objects.filter(action="schedule.delete").exists()


@pytest.mark.parametrize("fields, message", [
    ({"cron": "every night"}, "five fields"),
    ({"cron": "61 2 * * *"}, "cron"),
    ({"rate_limit": 0}, "rate"),
    ({"max_per_run": 0}, "Max per run"),
    ({"filters": {"property": "no-equals-sign"}}, "key=value"),
])
def test_a_bad_policy_is_refused_and_nothing_is_scheduled(fields, message, make_cluster, admin_user):
    values = {"name": "p", "cluster": make_cluster(), "subscription": "s", "rate_limit": 10,
              "max_per_run": 10, "cron": "0 2 * * *", "enabled": True, **fields}
    with pytest.raises(ValidationError, match=message):
        services.replay_policy_save(actor=admin_user, **values)
    assert not ReplayPolicy.objects.exists()
    assert not PeriodicTask.objects.filter(task="console.replay.tasks.replay_policy_run").exists()


def test_a_policy_run_is_an_ordinary_job_over_the_oldest_parked_matching_letters(
        make_cluster, make_dead_letters, admin_user):
    cluster = make_cluster()
    wanted = make_dead_letters(cluster, 5, subscription="orders-sub", properties={"error": "Timeout"})
    make_dead_letters(cluster, 3, subscription="orders-sub", properties={"error": "Refused"})
    make_dead_letters(cluster, 3, subscription="billing", properties={"error": "Timeout"})
    policy = services.replay_policy_save(
        actor=admin_user, name="orders timeouts", cluster=cluster, subscription="orders-sub",
        filters={"property": "error=Timeout"}, rate_limit=200, max_per_run=4, cron="0 2 * * *", enabled=True)

    job = services.replay_policy_run(policy_id=policy.pk)
    assert (job.policy, job.total, job.rate_limit) == (policy, 4, 200)
    selected = set(ReplayLedgerEntry.objects.filter(job=job).values_list("dead_letter_id", flat=True))
    assert selected == {x.pk for x in wanted[:4]}
    # The next run takes what the first does not hold.
    assert services.replay_policy_run(policy_id=policy.pk).total == 1
    assert services.replay_policy_run(policy_id=policy.pk) is None
    services.replay_policy_save(actor=admin_user, policy=policy, enabled=False)
    assert services.replay_policy_run(policy_id=policy.pk) is None
    assert services.replay_policy_run(policy_id=999999) is None


# --- auto-collect and retention -------------------------------------------------------

def test_each_cluster_gets_an_auto_collect_entry_at_its_interval(make_cluster,
                                                                 django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        cluster = make_cluster(collect_interval_seconds=120)
    task = PeriodicTask.objects.get(name=f"archive-collect-cluster-{cluster.pk}")
    assert task.task == "console.replay.tasks.archive_collect_cluster"
    assert (task.interval.every, task.interval.period) == (120, "seconds")
    assert json.loads(task.args) == [cluster.pk]
    with django_capture_on_commit_callbacks(execute=True):
        cluster.collect_interval_seconds = 0
        cluster.save()
    assert not PeriodicTask.objects.filter(name=f"archive-collect-cluster-{cluster.pk}").exists()
    with django_capture_on_commit_callbacks(execute=True):
        cluster.collect_interval_seconds = 60
        cluster.save()
    cluster_id = cluster.pk
    cluster.delete()
    assert not PeriodicTask.objects.filter(name=f"archive-collect-cluster-{cluster_id}").exists()


def test_the_purge_deletes_only_discarded_letters_past_retention_and_is_audited(
        make_cluster, make_dead_letters, admin_user, operator):
    cluster = make_cluster()
    old, recent, parked = make_dead_letters(cluster, 3)
    dead_letters_discard(letter_ids=[old.pk, recent.pk], actor=operator)
    services.retention_update(actor=admin_user, days=10)
    DeadLetter.objects.filter(pk=old.pk).update(state_changed_at=timezone.now() - timedelta(days=11))

    assert services.retention_purge(actor=None) == 1
    assert set(DeadLetter.objects.values_list("pk", flat=True)) == {recent.pk, parked.pk}
    entry = AuditEntry.objects.get(action="archive.purge")
    assert entry.count == 1 and entry.cluster_name == cluster.name
    assert AuditEntry.objects.filter(action="retention.update", detail__contains="-> 10").exists()


@pytest.mark.parametrize("days", [0, -3, 100_000, "soon"])
def test_a_bad_retention_period_is_refused(days, admin_user):
    with pytest.raises(ValidationError, match="days"):
        services.retention_update(actor=admin_user, days=days)
    assert services.retention_setting().discarded_retention_days == 30


def test_the_migration_schedules_recovery_and_the_nightly_purge(db):
    recover = PeriodicTask.objects.get(name="replay-recover-stalled-jobs")
    assert (recover.task, recover.interval.every) == ("console.replay.tasks.replay_jobs_recover", 60)
    purge = PeriodicTask.objects.get(name="archive-retention-purge")
    assert purge.task == "console.replay.tasks.retention_purge"


# --- the management command ------------------------------------------------------------

def test_the_command_starts_shows_and_controls_a_job(make_cluster, make_dead_letters, capsys, operator):
    cluster = make_cluster()
    make_dead_letters(cluster, 3, properties={"error": "Timeout"})
    call_command("replay", "start", "--cluster", str(cluster.pk), "--property", "error=Timeout",
                 "--rate", "50", "--user", operator.username)
    job = ReplayJob.objects.get()
    assert (job.total, job.rate_limit, job.created_by) == (3, 50, operator)
    assert f"job #{job.pk} replays 3" in capsys.readouterr().out

    call_command("replay", "show", str(job.pk), "--json")
    assert json.loads(capsys.readouterr().out)["remaining"] == 3
    call_command("replay", "pause", str(job.pk))
    call_command("replay", "resume", str(job.pk))
    call_command("replay", "cancel", str(job.pk))
    assert "cancelled" in capsys.readouterr().out.splitlines()[-1]


def test_the_command_refuses_bad_input_clearly(make_cluster):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no replay job #31337"):
        call_command("replay", "show", "31337")
    with pytest.raises(CommandError, match="rate"):
        call_command("replay", "start", "--cluster", str(make_cluster().pk), "--rate", "0")
    with pytest.raises(CommandError, match="key=value"):
        call_command("replay", "start", "--property", "broken")
    with pytest.raises(CommandError, match="comma-separated"):
        call_command("replay", "start", "--ids", "1,x")
    assert not ReplayJob.objects.exists()
