"""Browsing and filtering the dead-letter archive, with htmx and without JavaScript.

The same walk runs twice: once in a normal context, where htmx swaps #results in
place and pushes the URL, and once with JavaScript off, where the filter form is a
plain GET form and the pager plain links.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from console.archive.services import dead_letters_discard
from tests.browser.conftest import click_and_settle, log_in, screenshot

pytestmark = pytest.mark.browser

PAGE_SIZE = 5


@pytest.fixture
def archive(make_cluster, make_dead_letters, admin_user, settings):
    """Two clusters, three subscriptions, two states, two property values."""
    settings.ARCHIVE_PAGE_SIZE = PAGE_SIZE
    east = make_cluster("rabbitmq", name="east")
    west = make_cluster("rabbitmq", name="west")
    orders = make_dead_letters(east, 7, subscription="orders-sub", properties={"error": "TimeoutException"})
    payments = make_dead_letters(
        east,
        3,
        subscription="payments-sub",
        source="payments",
        payload=b'{"payment": "card-declined"}',
        properties={"error": "ValidationError", "tenant": "acme"},
    )
    west_orders = make_dead_letters(
        west, 2, subscription="orders-sub", properties={"error": "TimeoutException"}
    )
    dead_letters_discard(letter_ids=[orders[0].pk, orders[1].pk], actor=admin_user, reason="old")
    return {"east": east, "west": west, "orders": orders, "payments": payments, "west_orders": west_orders}


def expect_count(page, n: int) -> None:
    """The count line starts with how many letters match (actions may follow it)."""
    expect(page.locator("#results .count")).to_have_text(re.compile(rf"^{n} dead letters?\b"))


def rows(page) -> list[dict[str, str]]:
    """The result table as dicts (the discard checkbox column, when shown, is skipped)."""
    found = []
    for row in page.locator("#results table.letters tbody tr").all():
        cells = row.locator("td").all_inner_texts()[-6:]
        found.append(
            dict(
                zip(
                    ["collected", "cluster", "subscription", "state", "retries", "payload"],
                    cells,
                    strict=True,
                )
            )
        )
    return found


def apply_filters(page, javascript: bool, **fields: str) -> None:
    """Fill the filter form (cluster by name, the rest by value) and submit it."""
    form = page.locator("form.filters")
    form.locator("select[name=cluster]").select_option(label=fields.pop("cluster", "any cluster"))
    form.locator("select[name=state]").select_option(fields.pop("state", ""))
    for name in ("subscription", "text", "property"):
        form.locator(f"input[name={name}]").fill(fields.pop(name, ""))
    assert not fields, f"unknown filter fields {fields}"
    requests = []

    def record(request):
        requests.append(request)

    page.on("request", record)
    click_and_settle(page, form.get_by_role("button", name="Filter"), javascript=javascript)
    page.remove_listener("request", record)
    asked = [r for r in requests if "/archive/?" in r.url]
    assert len(asked) == 1
    # With htmx the browser asks for the fragment only; without, for the whole page.
    assert asked[0].headers.get("hx-request") == ("true" if javascript else None)


def walk_the_archive(page, archive, *, javascript: bool) -> None:
    page.goto("/archive/")
    expect_count(page, 12)
    assert len(rows(page)) == PAGE_SIZE
    if javascript:
        # Survives only if no full page load happens from here on.
        page.evaluate("window.__same_document = true")

    apply_filters(page, javascript, subscription="payments-sub")
    expect_count(page, 3)
    assert {row["subscription"] for row in rows(page)} == {"payments-sub"}
    assert "subscription=payments-sub" in page.url

    apply_filters(page, javascript, state="discarded")
    expect_count(page, 2)
    assert {row["state"] for row in rows(page)} == {"discarded"}

    apply_filters(page, javascript, text="card-declined")
    expect_count(page, 3)
    assert all("card-declined" in row["payload"] for row in rows(page))

    apply_filters(page, javascript, property="tenant=acme")
    expect_count(page, 3)
    assert {row["subscription"] for row in rows(page)} == {"payments-sub"}

    apply_filters(page, javascript, property="error=TimeoutException", cluster="west")
    expect_count(page, 2)
    assert {(row["cluster"], row["subscription"]) for row in rows(page)} == {("west", "orders-sub")}

    apply_filters(page, javascript, property="error=TimeoutException", state="parked")
    expect_count(page, 7)

    # A malformed property filter says how to write it, and matches nothing.
    apply_filters(page, javascript, property="no equals sign")
    alert = page.locator("#results [role=alert]")
    expect(alert).to_have_text("property: Write the property filter as key=value.")
    expect_count(page, 0)
    assert rows(page) == []
    screenshot(page, f"archive-bad-filter-{'js' if javascript else 'nojs'}")

    # Paging keeps the filter: 9 TimeoutException letters are two pages of five.
    apply_filters(page, javascript, property="error=TimeoutException")
    expect_count(page, 9)
    expect(page.locator("#results .pager span")).to_have_text("page 1 of 2")
    first_page = [row["collected"] + row["payload"] for row in rows(page)]
    older = page.locator("#results .pager").get_by_role("link", name="older →")
    click_and_settle(page, older, javascript=javascript)
    expect(page.locator("#results .pager span")).to_have_text("page 2 of 2")
    second_page = [row["collected"] + row["payload"] for row in rows(page)]
    assert len(second_page) == 4
    assert not set(first_page) & set(second_page)
    assert "page=2" in page.url and "property=error%3DTimeoutException" in page.url
    if javascript:
        assert page.evaluate("window.__same_document") is True
    screenshot(page, f"archive-{'js' if javascript else 'nojs'}")

    # The address shown (pushed by htmx, or navigated to) is a page of its own.
    page.reload()
    expect(page.locator("#results .pager span")).to_have_text("page 2 of 2")
    expect(page.locator("form.filters input[name=property]")).to_have_value("error=TimeoutException")
    click_and_settle(
        page, page.locator("#results .pager").get_by_role("link", name="← newer"), javascript=javascript
    )
    expect(page.locator("#results .pager span")).to_have_text("page 1 of 2")


def test_operator_browses_and_filters_the_archive_with_htmx(page, archive, operator):
    log_in(page, operator)
    walk_the_archive(page, archive, javascript=True)


def test_viewer_browses_and_filters_the_archive_without_javascript(nojs_page, archive, viewer):
    log_in(nojs_page, viewer)
    walk_the_archive(nojs_page, archive, javascript=False)


def test_subscription_count_on_the_cluster_page_links_to_its_dead_letters(page, archive, viewer):
    """The archive filtered by cluster and subscription, as the subscriptions page links it."""
    log_in(page, viewer)
    east = archive["east"]
    page.goto(f"/archive/?cluster={east.pk}&subscription=orders-sub")
    expect_count(page, 7)
    expect(page.locator("form.filters select[name=cluster]")).to_have_value(str(east.pk))
    assert {(row["cluster"], row["subscription"]) for row in rows(page)} == {("east", "orders-sub")}


def test_time_filters_narrow_the_archive_and_bad_dates_say_so(nojs_page, archive, viewer):
    from datetime import timedelta

    from django.utils import timezone

    page = nojs_page
    log_in(page, viewer)
    page.goto("/archive/")
    now = timezone.now()
    day_before, day_after = (now - timedelta(days=1)), (now + timedelta(days=1))
    form = page.locator("form.filters")

    # ISO with a "T": what a text field and a datetime-local field both accept.
    form.locator("input[name=since]").fill(day_before.strftime("%Y-%m-%dT%H:%M"))
    click_and_settle(page, form.get_by_role("button", name="Filter"), javascript=False)
    expect_count(page, 12)
    form.locator("input[name=since]").fill(day_after.strftime("%Y-%m-%dT%H:%M"))
    click_and_settle(page, form.get_by_role("button", name="Filter"), javascript=False)
    expect_count(page, 0)
    form.locator("input[name=since]").fill("")
    form.locator("input[name=until]").fill(day_before.strftime("%Y-%m-%dT%H:%M"))
    click_and_settle(page, form.get_by_role("button", name="Filter"), javascript=False)
    expect_count(page, 0)

    # Typed by hand into the address: not a date, and an empty window.
    page.goto("/archive/?since=yesterday")
    expect(page.locator("#results [role=alert]")).to_contain_text("Enter a valid date/time.")
    expect_count(page, 0)
    page.goto(
        f"/archive/?since={day_after.strftime('%Y-%m-%dT%H:%M')}&until={day_before.strftime('%Y-%m-%dT%H:%M')}"
    )
    expect(page.locator("#results [role=alert]")).to_have_text(
        "'Collected since' is after 'Collected until'."
    )
