"""Browser fixtures: Debian's headless Chromium driven by Playwright against the live server.

One browser per session (starting Chromium is the slow part), a fresh context (its own
cookies, its own JavaScript setting) per test. The live server runs in this process on
the real PostgreSQL test database; tests that use it get `transactional_db`, so rows the
test writes are visible to the server thread and the other way round.

Playwright's own browser download does not work on this machine, so the browser is
the system one at /usr/bin/chromium. Set REDRIVE_SCREENSHOTS to a directory to keep
one screenshot of each main page the tests visit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Playwright's sync API runs an asyncio loop in this thread; Django would otherwise
# refuse the ORM calls the tests make while it runs.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright  # noqa: E402

from tests.conftest import PASSWORD  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Long enough for a loaded 2-core machine, short enough that a missing element fails
# the test quickly instead of at the suite's timeout.
ACTION_TIMEOUT_MS = 15_000


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def new_context(browser: Browser, live_server, transactional_db) -> Iterator[Callable[..., BrowserContext]]:
    """new_context(**options) -> a fresh browser context on the live server, closed after the test."""
    opened: list[BrowserContext] = []

    def make(**options) -> BrowserContext:
        options.setdefault("base_url", live_server.url)
        options.setdefault("viewport", {"width": 1280, "height": 860})
        context = browser.new_context(**options)
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        opened.append(context)
        return context

    yield make
    for context in opened:
        context.close()


@pytest.fixture
def page(new_context) -> Page:
    """A page in a fresh JavaScript-enabled context."""
    return new_context().new_page()


@pytest.fixture
def nojs_page(new_context) -> Page:
    """A page in a fresh context with JavaScript turned off: htmx never loads."""
    return new_context(java_script_enabled=False).new_page()


def log_in(page: Page, user, password: str = PASSWORD) -> None:
    """Log in through the login form, as a person would."""
    page.goto("/login/")
    page.get_by_label("Username", exact=True).fill(user.get_username())
    page.get_by_label("Password", exact=True).fill(password)
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
    assert page.get_by_role("button", name="Log out").is_visible(), page.content()


def screenshot(page: Page, name: str) -> None:
    """Keep a full-page screenshot when REDRIVE_SCREENSHOTS names a directory."""
    folder = os.environ.get("REDRIVE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{re.sub(r'[^a-z0-9-]+', '-', name)}.png"), full_page=True)


def click_and_settle(page: Page, target, *, javascript: bool = True) -> None:
    """Click and wait until the page shows the answer.

    With JavaScript, waits for htmx to have swapped and settled the new content (the
    response event alone comes before the swap); without, for the navigation.
    """
    if not javascript:
        with page.expect_navigation():
            target.click()
        return
    page.evaluate("""() => {
        window.__htmx_settled = false;
        document.body.addEventListener("htmx:afterSettle",
            () => { window.__htmx_settled = true; }, {once: true});
    }""")
    target.click()
    page.wait_for_function("window.__htmx_settled === true")
