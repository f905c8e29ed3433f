"""The account page: an API token is shown once, when issued."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token

from tests.browser.conftest import log_in, screenshot

pytestmark = pytest.mark.browser


def test_new_api_token_is_shown_once_and_replaces_the_old_one(page, operator):
    log_in(page, operator)
    page.get_by_role("link", name=operator.username).click()
    page.wait_for_url("**/account/")
    assert page.locator("#api-token").count() == 0

    with page.expect_navigation():
        page.get_by_role("button", name="Issue a new token").click()
    first = page.locator("#api-token").inner_text()
    assert first == Token.objects.get(user=operator).key
    screenshot(page, "account")

    with page.expect_navigation():
        page.get_by_role("button", name="Issue a new token").click()
    second = page.locator("#api-token").inner_text()
    assert second != first and Token.objects.get(user=operator).key == second

    page.goto("/account/")
    assert page.locator("#api-token").count() == 0
    assert second not in page.content()
