"""Replay pages with the Django test client (no browser): each page renders, the
forms start and control jobs, roles are enforced, hostile text is escaped."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.archive.models import DeadLetter
from console.audit.models import AuditEntry
from console.replay import services
from console.replay.models import ReplayJob, ReplayLedgerEntry, ReplayPolicy

HOSTILE = '<script>window.__pwned=1</script>'


@pytest.fixture
def letters(make_cluster, make_dead_letters):
    return make_dead_letters(make_cluster(), 3, properties={"error": "Timeout", "note": HOSTILE})


def test_every_replay_page_renders_for_an_admin(client_as, admin_user, letters):
    job = services.replay_job_create(actor=admin_user, letter_ids=[letters[0].pk],
                                     description=HOSTILE)
    policy = services.replay_policy_save(actor=admin_user, name="nightly", cluster=letters[0].cluster,
                                         subscription="orders-sub", rate_limit=10, max_per_run=5,
                                         cron="0 2 * * *", enabled=True)
    client = client_as(admin_user)
    for url in (reverse("replay:jobs"), reverse("replay:job", args=[job.pk]),
                reverse("replay:new") + f"?cluster={letters[0].cluster_id}",
                reverse("replay:resend", args=[letters[1].pk]), reverse("replay:schedules"),
                reverse("replay:schedule_new"), reverse("replay:schedule_edit", args=[policy.pk]),
                reverse("replay:retention")):
        response = client.get(url)
        assert response.status_code == 200, url
        assert HOSTILE not in response.content.decode(), url


def test_replay_selected_from_the_archive_shows_the_count_then_starts_a_job(client_as, operator, letters):
    client = client_as(operator)
    archive = client.get(reverse("archive:list")).content.decode()
    assert 'id="replay-selected"' in archive and 'id="replay-all-matching"' in archive

    ids = [str(x.pk) for x in letters[:2]]
    choose = client.post(reverse("replay:new"), {"ids": ids, "reason": "", "next": "/archive/"})
    assert choose.status_code == 200
    assert "2 selected dead letters" in choose.content.decode()
    assert not ReplayJob.objects.exists()

    started = client.post(reverse("replay:new"), {"ids": ids, "confirm": "1", "rate_limit": "50",
                                                  "batch_size": "10"})
    job = ReplayJob.objects.get()
    assert started.status_code == 302 and started.url == reverse("replay:job", args=[job.pk])
    assert (job.total, job.rate_limit, job.batch_size) == (2, 50, 10)


def test_replay_all_matching_a_filter_with_a_dry_run(client_as, operator, letters, make_dead_letters):
    make_dead_letters(letters[0].cluster, 2, properties={"error": "Refused"})
    client = client_as(operator)
    query = f"?cluster={letters[0].cluster_id}&property=error%3DTimeout"
    page = client.get(reverse("replay:new") + query).content.decode()
    assert "3 dead letters match" in page

    response = client.post(reverse("replay:new"), {
        "cluster": letters[0].cluster_id, "property": "error=Timeout", "confirm": "1",
        "rate_limit": "100", "batch_size": "100", "dry_run": "on"}, follow=True)
    job = ReplayJob.objects.get()
    assert job.dry_run and job.total == 3 and job.state == "done"
    assert "Dry run: 3 dead letter(s) would be replayed" in response.content.decode()
    assert not ReplayLedgerEntry.objects.exists()


@pytest.mark.parametrize("rate", ["0", "-1", "1e12", "abc"])
def test_a_bad_rate_on_the_form_is_shown_and_starts_nothing(client_as, operator, letters, rate):
    response = client_as(operator).post(reverse("replay:new"), {
        "ids": [letters[0].pk], "confirm": "1", "rate_limit": rate, "batch_size": "10"})
    assert response.status_code == 200
    assert 'class="error"' in response.content.decode()
    assert not ReplayJob.objects.exists()


def test_the_second_operator_pressing_replay_is_told_which_job_has_the_letters(client_as, make_user,
                                                                                letters):
    ids = [x.pk for x in letters]
    first = services.replay_job_create(actor=make_user("operator"), letter_ids=ids)
    response = client_as(make_user("operator")).post(reverse("replay:new"), {
        "ids": ids, "confirm": "1", "rate_limit": "10", "batch_size": "10"})
    assert response.status_code == 200
    assert f"already in replay job #{first.pk}" in response.content.decode()
    assert ReplayJob.objects.count() == 1


def test_progress_polls_while_active_and_stops_when_done(client_as, operator, letters):
    job = services.replay_job_create(actor=operator, letter_ids=[x.pk for x in letters])
    client = client_as(operator)
    url = reverse("replay:job", args=[job.pk])
    partial = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-trigger="every 2s"' in partial and "<html" not in partial
    assert 'id="job-remaining">3<' in partial
    page = client.get(url).content.decode()
    assert f'href="{url}">Refresh' in page  # works without JavaScript

    ReplayJob.objects.filter(pk=job.pk).update(state="done", done=3)
    partial = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in partial and 'id="job-done">3<' in partial
    assert "Refresh" not in client.get(url).content.decode()


def test_pause_resume_and_cancel_buttons_redirect_back_to_the_job(client_as, operator, letters):
    job = services.replay_job_create(actor=operator, letter_ids=[letters[0].pk])
    client = client_as(operator)
    for name, state in (("replay:job_pause", "paused"), ("replay:job_resume", "queued"),
                        ("replay:job_cancel", "cancelled")):
        response = client.post(reverse(name, args=[job.pk]))
        assert response.status_code == 302 and response.url == reverse("replay:job", args=[job.pk])
        job.refresh_from_db()
        assert job.state == state
    again = client.post(reverse("replay:job_pause", args=[job.pk]), follow=True)
    assert "only a queued or running job can be paused" in again.content.decode()


def test_a_viewer_watches_but_cannot_start_or_control(client_as, viewer, operator, letters):
    job = services.replay_job_create(actor=operator, letter_ids=[letters[0].pk])
    client = client_as(viewer)
    assert client.get(reverse("replay:jobs")).status_code == 200
    assert client.get(reverse("replay:job", args=[job.pk])).status_code == 200
    assert client.get(reverse("replay:new")).status_code == 403
    assert client.post(reverse("replay:new"), {"ids": [letters[1].pk], "confirm": "1",
                                               "rate_limit": "5"}).status_code == 403
    assert client.post(reverse("replay:job_cancel", args=[job.pk])).status_code == 403
    assert client.get(reverse("replay:resend", args=[letters[1].pk])).status_code == 403
    assert client.post(reverse("replay:retention"), {"discarded_retention_days": "1"}).status_code == 403
    assert client.get(reverse("replay:schedule_new")).status_code == 403
    archive = client.get(reverse("archive:list")).content.decode()
    assert "replay-selected" not in archive
    job.refresh_from_db()
    assert job.state == "queued" and ReplayJob.objects.count() == 1


def test_unknown_ids_are_404_pages(client_as, operator):
    client = client_as(operator)
    assert client.get(reverse("replay:job", args=[999999])).status_code == 404
    assert client.post(reverse("replay:job_pause", args=[999999])).status_code == 404
    assert client.get(reverse("replay:resend", args=[999999])).status_code == 404


def test_the_letter_page_offers_resend_only_while_the_letter_can_be_resent(client_as, operator, letters):
    client = client_as(operator)
    page = client.get(reverse("archive:detail", args=[letters[0].pk])).content.decode()
    assert reverse("replay:resend", args=[letters[0].pk]) in page
    DeadLetter.objects.filter(pk=letters[0].pk).update(state="replayed")
    page = client.get(reverse("archive:detail", args=[letters[0].pk])).content.decode()
    assert reverse("replay:resend", args=[letters[0].pk]) not in page


def test_resend_as_it_is_sends_the_original(client_as, operator, letters):
    response = client_as(operator).post(reverse("replay:resend", args=[letters[0].pk]))
    job = ReplayJob.objects.get()
    assert response.status_code == 302 and response.url == reverse("replay:job", args=[job.pk])
    entry = ReplayLedgerEntry.objects.get(job=job)
    assert entry.payload_override is None and entry.properties_override is None
    assert "unchanged" in AuditEntry.objects.get(action="replay.resend").detail


def test_resend_after_editing_keeps_the_original_and_audits_the_diff(client_as, operator, letters):
    letter = letters[0]
    response = client_as(operator).post(reverse("replay:resend", args=[letter.pk]), {
        "payload": '{"order": "fixed"}', "properties": '{"error": "Timeout", "fixed": "yes"}'})
    assert response.status_code == 302
    entry = ReplayLedgerEntry.objects.get()
    assert bytes(entry.payload_override) == b'{"order": "fixed"}'
    assert entry.properties_override == {"error": "Timeout", "fixed": "yes"}
    letter.refresh_from_db()
    assert letter.properties["note"] == HOSTILE and b"fixed" not in bytes(letter.payload)
    detail = AuditEntry.objects.get(action="replay.resend").detail
    assert "'fixed' added" in detail and "'note' removed" in detail and '+{"order": "fixed"}' in detail


def test_resend_with_broken_properties_shows_the_error_and_sends_nothing(client_as, operator, letters):
    response = client_as(operator).post(reverse("replay:resend", args=[letters[0].pk]), {
        "payload": "x", "properties": "{not json"})
    assert response.status_code == 200 and "JSON object" in response.content.decode()
    assert not ReplayJob.objects.exists()


def test_an_admin_creates_and_edits_a_schedule_from_the_page(client_as, admin_user, operator, make_cluster):
    cluster = make_cluster()
    form = {"name": "nightly", "cluster": cluster.pk, "subscription": "orders-sub",
            "property": "error=Timeout", "rate_limit": "200", "max_per_run": "1000", "cron": "0 2 * * *",
            "enabled": "on"}
    assert client_as(operator).post(reverse("replay:schedule_new"), form).status_code == 403
    client = client_as(admin_user)
    assert client.post(reverse("replay:schedule_new"), form).status_code == 302
    policy = ReplayPolicy.objects.get()
    assert policy.filters == {"property": "error=Timeout"} and policy.periodic_task.enabled

    bad = client.post(reverse("replay:schedule_edit", args=[policy.pk]), {**form, "cron": "at two"})
    assert bad.status_code == 200 and "five fields" in bad.content.decode()
    client.post(reverse("replay:schedule_edit", args=[policy.pk]), {**form, "cron": "15 3 * * *"})
    policy.refresh_from_db()
    assert policy.cron == "15 3 * * *"
    assert client.post(reverse("replay:schedule_delete", args=[policy.pk])).status_code == 302
    assert not ReplayPolicy.objects.exists()


def test_an_admin_sets_retention_and_purges(client_as, admin_user):
    client = client_as(admin_user)
    bad = client.post(reverse("replay:retention"), {"discarded_retention_days": "0"})
    assert bad.status_code == 200 and services.retention_setting().discarded_retention_days == 30
    assert client.post(reverse("replay:retention"), {"discarded_retention_days": "7"}).status_code == 302
    assert services.retention_setting().discarded_retention_days == 7
    purged = client.post(reverse("replay:retention_purge"), follow=True)
    assert "Purged 0 discarded" in purged.content.decode()
    assert AuditEntry.objects.filter(action="archive.purge").exists()
