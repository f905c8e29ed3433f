"""One dead letter: its payload shown as pretty JSON, text or hex, hostile strings kept as text."""

from __future__ import annotations

import pytest

from tests.browser.conftest import click_and_settle, log_in, screenshot

pytestmark = pytest.mark.browser

SCRIPT = "<script>window.__pwned = 1</script>"
IMAGE = "<img src=x onerror=\"window.__pwned = 2; alert('pwned')\">"


@pytest.fixture
def dialogs(page):
    """Every alert/confirm the page opens; a hostile string that runs would show up here."""
    opened: list[str] = []

    def record(dialog):
        opened.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", record)
    return opened


def test_json_payload_is_shown_pretty_with_every_property(page, viewer, make_cluster, make_dead_letters):
    cluster = make_cluster("rabbitmq", name="east")
    (letter,) = make_dead_letters(
        cluster,
        subscription="orders-sub",
        payload=b'{"order":42,"items":[{"sku":"A-1","qty":2}],"note":"caf\xc3\xa9"}',
        properties={"error": "TimeoutException", "x-first-death-queue": "orders"},
        retry_count=5,
    )
    log_in(page, viewer)
    page.goto("/archive/")
    page.locator("#results table.letters a").first.click()
    page.wait_for_url(f"**/archive/{letter.pk}/")

    assert page.get_by_role("heading", name="Payload").inner_text().startswith("Payload json")
    assert page.locator("#payload").inner_text() == (
        '{\n  "order": 42,\n  "items": [\n    {\n      "sku": "A-1",\n      "qty": 2\n    }\n  ],\n'
        '  "note": "café"\n}'
    )
    properties = dict(
        row.locator("td").all_inner_texts() for row in page.locator("#properties tbody tr").all()
    )
    assert properties == {"error": "TimeoutException", "x-first-death-queue": "orders"}
    assert page.locator("#retry-count").inner_text() == "5"
    assert page.locator(".facts").get_by_text(letter.broker_message_id).is_visible()
    screenshot(page, "dead-letter-json")

    page.get_by_role("link", name="All dead letters of orders-sub").click()
    page.wait_for_url("**/archive/?*")
    assert page.locator("#results .count").inner_text().startswith("1 dead letter")


def test_binary_payload_is_shown_as_hex(page, viewer, make_cluster, make_dead_letters):
    cluster = make_cluster("rabbitmq")
    payload = bytes(range(256))
    (letter,) = make_dead_letters(cluster, payload=payload)
    log_in(page, viewer)
    page.goto(f"/archive/{letter.pk}/")

    assert page.get_by_role("heading", name="Payload").inner_text().startswith("Payload binary, 256 bytes")
    lines = page.locator("#payload").inner_text().splitlines()
    assert len(lines) == 16
    assert lines[0].startswith("00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f")
    assert lines[4] == ("00000040  40 41 42 43 44 45 46 47 48 49 4a 4b 4c 4d 4e 4f  @ABCDEFGHIJKLMNO")
    assert lines[15].startswith("000000f0  f0 f1")
    screenshot(page, "dead-letter-binary")


def test_hostile_strings_are_shown_as_text_and_never_run(
    page, dialogs, viewer, make_cluster, make_dead_letters
):
    cluster = make_cluster("rabbitmq", name=f"c{SCRIPT}")
    payload = f"order failed: {SCRIPT} {IMAGE}"
    (letter,) = make_dead_letters(
        cluster,
        subscription=f"sub{IMAGE}",
        payload=payload.encode(),
        properties={"reason": SCRIPT, f"key{IMAGE}": IMAGE},
    )
    log_in(page, viewer)

    page.goto(f"/archive/{letter.pk}/")
    page.wait_for_load_state("networkidle")
    assert page.locator("#payload").inner_text() == payload
    properties = dict(
        row.locator("td").all_inner_texts() for row in page.locator("#properties tbody tr").all()
    )
    assert properties == {"reason": SCRIPT, f"key{IMAGE}": IMAGE}
    assert page.locator(".facts").get_by_text(f"sub{IMAGE}", exact=True).is_visible()
    assert page.locator(".facts").get_by_text(f"c{SCRIPT}", exact=True).is_visible()
    # Nothing the strings carried became an element or ran.
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    screenshot(page, "dead-letter-hostile")

    # The list shows the same strings (payload preview, subscription, cluster) as text too.
    page.goto("/archive/")
    page.wait_for_load_state("networkidle")
    row = page.locator("#results table.letters tbody tr")
    assert row.count() == 1
    assert row.get_by_text(f"sub{IMAGE}", exact=True).is_visible()
    assert row.get_by_text(f"c{SCRIPT}", exact=True).is_visible()
    assert SCRIPT in row.locator("code").inner_text()
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"

    # Filtering by the hostile name sends it through the URL, htmx's swap and the
    # pushed address; reloading that address renders it back into the form's field.
    page.locator("form.filters input[name=subscription]").fill(f"sub{IMAGE}")
    click_and_settle(page, page.locator("form.filters").get_by_role("button", name="Filter"))
    assert page.locator("#results table.letters tbody tr").count() == 1
    page.reload()
    assert page.locator("form.filters input[name=subscription]").input_value() == f"sub{IMAGE}"
    assert page.locator("#results table.letters tbody tr").count() == 1
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"

    page.goto("/clusters/")
    page.wait_for_load_state("networkidle")
    assert page.get_by_role("link", name=f"c{SCRIPT}", exact=True).is_visible()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert dialogs == []


def test_unknown_dead_letter_is_a_not_found_page(page, viewer):
    log_in(page, viewer)
    response = page.goto("/archive/999999999/")
    assert response.status == 404
    assert page.get_by_role("heading", name="Not found").is_visible()
    # The page keeps the console's frame, so the way back is there.
    assert page.get_by_role("link", name="Dead letters").is_visible()
    screenshot(page, "not-found")
