"""An operator's discard shows in the admin's audit log, which also downloads as CSV."""

from __future__ import annotations

import csv
import io

import pytest
from playwright.sync_api import expect

from console.archive.models import DeadLetter
from tests.browser.conftest import log_in, screenshot

pytestmark = pytest.mark.browser


def test_discard_by_an_operator_is_in_the_audit_log_and_its_csv(
    new_context, operator, admin_user, make_cluster, make_dead_letters
):
    cluster = make_cluster("rabbitmq", name="east")
    letters = make_dead_letters(cluster, 3, subscription="orders-sub")
    # A reason a spreadsheet would run as a formula if the export passed it on as is.
    reason = '=HYPERLINK("http://example.invalid/","duplicates of order 42")'

    page = new_context().new_page()
    log_in(page, operator)
    page.goto("/archive/?subscription=orders-sub")
    for letter in letters[:2]:
        page.locator(f"#results input[name=ids][value='{letter.pk}']").check()
    page.locator("#results input[name=reason]").fill(reason)
    with page.expect_navigation():
        page.get_by_role("button", name="Discard selected").click()
    assert page.locator(".messages .msg-success").inner_text() == "Discarded 2 dead letter(s)."
    # Back on the same filtered list, the two now show as discarded.
    assert "subscription=orders-sub" in page.url
    expect(page.locator("#results .state-discarded")).to_have_count(2)
    assert sorted(DeadLetter.objects.values_list("state", flat=True)) == ["discarded", "discarded", "parked"]

    admin = new_context().new_page()
    log_in(admin, admin_user)
    admin.get_by_role("link", name="Audit log").click()
    admin.wait_for_url("**/audit/")
    row = admin.locator("tbody tr", has_text="archive.discard")
    expect(row).to_have_count(1)
    cells = row.locator("td").all_inner_texts()
    assert cells[1:7] == [operator.username, "archive.discard", "east", "orders-sub", "2", "ok"]
    assert cells[7] == reason
    screenshot(admin, "audit-log")

    with admin.expect_download() as download_info:
        admin.get_by_role("link", name="Export CSV").click()
    download = download_info.value
    assert download.suggested_filename == "redrive-audit.csv"
    with open(download.path(), newline="", encoding="utf-8") as exported:
        table = list(csv.DictReader(io.StringIO(exported.read())))
    discards = [r for r in table if r["action"] == "archive.discard"]
    assert len(discards) == 1
    entry = discards[0]
    assert (entry["actor"], entry["cluster"], entry["subscription"], entry["count"], entry["result"]) == (
        operator.username,
        "east",
        "orders-sub",
        "2",
        "ok",
    )
    # The file carries the reason as text, quoted so a spreadsheet does not evaluate it.
    assert entry["detail"] == "'" + reason


def test_audit_log_filters_by_action_and_the_export_keeps_the_filter(
    page, admin_user, operator, make_cluster, make_dead_letters
):
    from console.archive.services import dead_letters_discard

    cluster = make_cluster("rabbitmq", name="east")
    letters = make_dead_letters(cluster, 2)
    dead_letters_discard(letter_ids=[letters[0].pk], actor=operator, reason="one")
    log_in(page, admin_user)
    page.goto("/audit/")
    # The cluster made by the fixture is not audited; the discard is.
    page.locator("form.filters input[name=action]").fill("archive.discard")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/audit/?*")
    assert page.locator("tbody tr").count() == 1
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export CSV").click()
    with open(download_info.value.path(), encoding="utf-8") as exported:
        lines = exported.read().splitlines()
    assert lines[0] == "created_at,actor,action,cluster,subscription,count,result,detail"
    assert len(lines) == 2 and ",archive.discard,east," in lines[1]


def test_audit_pages_keep_the_filter(page, admin_user, operator):
    from console.audit.services import audit_record

    for number in range(101):
        audit_record(actor=operator, action="archive.discard", subscription=f"sub-{number}", count=1)
    audit_record(actor=admin_user, action="cluster.create")
    log_in(page, admin_user)
    page.goto("/audit/?action=archive.discard")
    assert page.locator(".pager span").inner_text() == "page 1 of 2"
    page.get_by_role("link", name="older →").click()
    page.wait_for_url("**page=2")
    assert page.locator(".pager span").inner_text() == "page 2 of 2"
    # One discard left for page two; the cluster.create entry is filtered out.
    assert page.locator("tbody tr").all_inner_texts() == [page.locator("tbody tr").inner_text()]
    assert "archive.discard" in page.locator("tbody tr").inner_text()
    assert page.locator("form.filters input[name=action]").input_value() == "archive.discard"
