"""Logging in through the login form, and what a wrong password does."""

from __future__ import annotations

import pytest

from tests.browser.conftest import log_in, screenshot
from tests.conftest import PASSWORD

pytestmark = pytest.mark.browser


def test_anonymous_visitor_is_sent_to_the_login_form(page):
    page.goto("/archive/")
    assert page.url.endswith("/login/?next=/archive/")
    assert page.get_by_role("heading", name="Log in to Redrive").is_visible()
    assert page.get_by_role("link", name="Dead letters").count() == 0
    screenshot(page, "login")


def test_login_form_logs_in_and_returns_to_the_page_asked_for(page, operator):
    page.goto("/archive/")
    page.get_by_label("Username", exact=True).fill(operator.username)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/archive/")
    assert page.get_by_role("heading", name="Dead letters").is_visible()
    assert page.locator(".who").inner_text().startswith(operator.username)
    assert "operator" in page.locator(".who .role").inner_text()


def test_wrong_password_shows_an_error_and_stays_logged_out(page, operator):
    page.goto("/login/")
    page.get_by_label("Username", exact=True).fill(operator.username)
    page.get_by_label("Password", exact=True).fill(PASSWORD + "-wrong")
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
    assert page.locator(".error").inner_text() == (
        "Your username and password didn't match. Please try again."
    )
    # The password typed is not echoed back into the page.
    assert PASSWORD not in page.content()
    screenshot(page, "login-error")
    page.goto("/clusters/")
    assert "/login/" in page.url
    assert page.get_by_role("button", name="Log out").count() == 0


def test_log_out_ends_the_session(page, operator):
    log_in(page, operator)
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/login/")
    page.goto("/archive/")
    assert "/login/" in page.url


@pytest.mark.parametrize(
    ("role", "sections"),
    [
        ("viewer", ["Clusters", "Dead letters"]),
        ("admin", ["Clusters", "Dead letters", "Audit log"]),
    ],
)
def test_every_page_offers_the_same_sections_and_marks_the_current_one(page, make_user, role, sections):
    """Sections added by other apps (replay, analytics) show too, when the role may open them."""
    user = make_user(role)
    log_in(page, user)
    seen = {}
    for path, current in [("/clusters/", "Clusters"), ("/archive/", "Dead letters")]:
        page.goto(path)
        links = page.locator(".topbar nav a")
        seen[path] = links.all_inner_texts()
        assert page.locator(".topbar nav a[aria-current=page]").inner_text() == current
    assert seen["/clusters/"] == seen["/archive/"]
    assert [
        name for name in seen["/clusters/"] if name in ("Clusters", "Dead letters", "Audit log")
    ] == sections
    for name in seen["/clusters/"]:
        with page.expect_navigation():
            page.locator(".topbar nav").get_by_role("link", name=name, exact=True).click()
        assert page.locator(".topbar nav a[aria-current=page]").inner_text() == name
