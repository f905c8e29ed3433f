"""A viewer reads everything it may read and is refused every changing action.

The buttons are not shown to a viewer; a viewer who posts the form anyway (a stale
page, a hand-made request) gets the 403 page and nothing changes.
"""

from __future__ import annotations

import pytest

from console.archive.models import DeadLetter
from console.audit.models import AuditEntry
from console.clusters.models import Cluster
from tests.browser.conftest import log_in, screenshot

pytestmark = pytest.mark.browser


def post_form(page, action: str, fields: dict[str, str]) -> None:
    """Submit a POST form to `action` from the current page, with its CSRF token, as a browser does."""
    with page.expect_navigation():
        page.evaluate(
            """([action, fields]) => {
                const form = document.createElement("form");
                form.method = "post";
                form.action = action;
                const token = document.querySelector("input[name=csrfmiddlewaretoken]").value;
                for (const [name, value] of Object.entries({...fields, csrfmiddlewaretoken: token})) {
                    const input = document.createElement("input");
                    input.type = "hidden"; input.name = name; input.value = value;
                    form.appendChild(input);
                }
                document.body.appendChild(form);
                form.submit();
            }""",
            [action, fields],
        )


def test_viewer_sees_no_discard_checkbox_and_posting_the_discard_form_is_refused(
    page, viewer, make_cluster, make_dead_letters
):
    cluster = make_cluster("rabbitmq")
    letters = make_dead_letters(cluster, 3)
    log_in(page, viewer)
    page.goto("/archive/")
    assert page.locator("#results table.letters tbody tr").count() == 3
    assert page.locator("#results input[name=ids]").count() == 0
    assert page.get_by_role("button", name="Discard selected").count() == 0

    with page.expect_response("**/archive/discard/") as answer:
        post_form(page, "/archive/discard/", {"ids": str(letters[0].pk), "reason": "try"})
    assert answer.value.status == 403
    assert page.get_by_role("heading", name="Not allowed").is_visible()
    assert page.locator("p.error").inner_text() == (
        "Your role does not allow this action. Ask an admin if you need it."
    )
    screenshot(page, "forbidden")
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {DeadLetter.STATE_PARKED}
    assert not AuditEntry.objects.filter(action="archive.discard").exists()


def test_viewer_is_not_offered_and_is_refused_cluster_changes(page, viewer, make_cluster):
    cluster = make_cluster("rabbitmq", name="east", service_url="amqp://127.0.0.1:1/%2F")
    log_in(page, viewer)
    page.goto("/clusters/")
    assert page.get_by_role("link", name="east").is_visible()
    assert page.get_by_role("link", name="Add cluster").count() == 0
    assert page.get_by_role("link", name="Add the first one.").count() == 0
    assert page.get_by_role("link", name="Audit log").count() == 0

    page.goto(f"/clusters/{cluster.pk}/")
    assert page.get_by_role("heading", name="east").is_visible()
    for hidden in ("Edit", "Rebuild…", "Collect DLQ"):
        assert page.get_by_role("link", name=hidden).count() == 0
    assert page.get_by_role("button", name="Delete cluster").count() == 0
    assert page.get_by_text("Register a subscription").count() == 0

    for refused in ("/clusters/add/", f"/clusters/{cluster.pk}/edit/", "/audit/", "/audit/export.csv"):
        response = page.goto(refused)
        assert response.status == 403, refused
        assert page.get_by_role("heading", name="Not allowed").is_visible()

    page.goto(f"/clusters/{cluster.pk}/")
    with page.expect_response(f"**/clusters/{cluster.pk}/delete/") as answer:
        post_form(page, f"/clusters/{cluster.pk}/delete/", {})
    assert answer.value.status == 403
    assert Cluster.objects.filter(pk=cluster.pk).exists()


def test_operator_sees_the_discard_controls_but_not_the_admin_ones(
    page, operator, make_cluster, make_dead_letters
):
    cluster = make_cluster("rabbitmq")
    make_dead_letters(cluster, 2)
    log_in(page, operator)
    page.goto("/archive/")
    assert page.locator("#results input[name=ids]").count() == 2
    assert page.get_by_role("button", name="Discard selected").is_visible()
    page.goto("/clusters/")
    assert page.get_by_role("link", name="Add cluster").count() == 0
    assert page.goto("/clusters/add/").status == 403
