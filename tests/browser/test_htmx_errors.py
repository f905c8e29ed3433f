"""What htmx does when the answer is not the fragment it asked for.

A session that ended (logged out in another tab, expired) turns an htmx request into
a redirect to the login page; a refused form into the 403 page; a bug into the 500
page. Each must show as a whole page, never as a login form nested inside the results
table, nor as nothing at all.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in
from tests.conftest import PASSWORD

pytestmark = pytest.mark.browser


def test_filtering_after_the_session_ended_goes_to_the_login_page(
    page, viewer, make_cluster, make_dead_letters
):
    make_dead_letters(make_cluster("rabbitmq"), 2, subscription="orders-sub")
    log_in(page, viewer)
    page.goto("/archive/")
    expect(page.locator("#results table.letters tbody tr")).to_have_count(2)
    page.context.clear_cookies()

    page.locator("form.filters input[name=subscription]").fill("orders-sub")
    page.locator("form.filters").get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"/login/\?next="))
    assert page.get_by_role("heading", name="Log in to Redrive").count() == 1
    assert page.locator("#results").count() == 0
    # Logging in again returns to the archive.
    page.get_by_label("Username", exact=True).fill(viewer.username)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/archive/$"))
    assert page.get_by_role("heading", name="Dead letters").is_visible()


def test_connection_test_after_the_session_ended_shows_the_expired_form_page(page, admin_user, make_cluster):
    cluster = make_cluster("rabbitmq", service_url="amqp://127.0.0.1:1/%2F")
    log_in(page, admin_user)
    page.goto(f"/clusters/{cluster.pk}/")
    page.context.clear_cookies()
    with page.expect_response(f"**/clusters/{cluster.pk}/test/") as answer:
        page.get_by_role("button", name="Test connection").click()
    assert answer.value.status == 403
    expect(page.get_by_role("heading", name="This form has expired")).to_be_visible()
    # The whole page was replaced: no stale cluster page around the message.
    assert page.locator("#connection").count() == 0
    assert page.title().startswith("Form expired")
    cluster.refresh_from_db()
    assert cluster.last_check_ok is None


def test_plain_form_after_the_session_ended_shows_the_expired_form_page(
    nojs_page, operator, make_cluster, make_dead_letters
):
    from console.archive.models import DeadLetter

    (letter,) = make_dead_letters(make_cluster("rabbitmq"), 1)
    log_in(nojs_page, operator)
    nojs_page.goto("/archive/")
    nojs_page.context.clear_cookies()
    nojs_page.locator(f"#results input[name=ids][value='{letter.pk}']").check()
    with nojs_page.expect_response("**/archive/discard/") as answer:
        nojs_page.get_by_role("button", name="Discard selected").click()
    assert answer.value.status == 403
    expect(nojs_page.get_by_role("heading", name="This form has expired")).to_be_visible()
    assert DeadLetter.objects.get(pk=letter.pk).state == DeadLetter.STATE_PARKED


def test_an_unexpected_error_during_an_htmx_filter_shows_the_error_page(
    page, viewer, make_cluster, make_dead_letters, monkeypatch
):
    """The live server runs in this process, so breaking the selector breaks the page."""
    import console.archive.selectors

    make_dead_letters(make_cluster("rabbitmq"), 1)
    log_in(page, viewer)
    page.goto("/archive/")
    expect(page.locator("#results table.letters tbody tr")).to_have_count(1)

    def broken(**filters):
        raise RuntimeError("secret internals: password=hunter2")

    monkeypatch.setattr(console.archive.selectors, "dead_letter_list", broken)
    with page.expect_response(re.compile(r"/archive/\?")) as answer:
        page.locator("form.filters").get_by_role("button", name="Filter").click()
    assert answer.value.status == 500
    expect(page.get_by_role("heading", name="Something went wrong")).to_be_visible()
    assert page.locator("#results").count() == 0
    # Nothing of the error itself reaches the browser.
    assert "hunter2" not in page.content() and "Traceback" not in page.content()
    page.get_by_role("link", name="Back to the clusters").click()
    page.wait_for_url("**/clusters/")
