"""An admin adds a cluster through the form and tests its connection.

The cluster points at a port nothing listens on, so the test is the real
"unreachable broker" path: the adapter's connection is refused (or, while a kind's
adapter is not installed, the registry refuses it) and the page says so.
"""

from __future__ import annotations

import re
import socket
import uuid

import pytest

from console.clusters.models import Cluster
from tests.browser.conftest import log_in, screenshot

pytestmark = pytest.mark.browser


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fill_cluster_form(
    page, *, name: str, service_url: str, password: str, token: str, options: str = "{}"
) -> None:
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Kind", exact=True).select_option("rabbitmq")
    page.get_by_label("Service url", exact=True).fill(service_url)
    page.get_by_label("Admin url", exact=True).fill(f"http://127.0.0.1:{closed_port()}")
    page.get_by_label("Username", exact=True).fill("guest")
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_label("Token", exact=True).fill(token)
    page.get_by_label("Options", exact=True).fill(options)


def test_admin_adds_a_cluster_and_its_secrets_never_come_back(page, admin_user):
    password, token = f"pw-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    name = f"rabbit-{uuid.uuid4().hex[:8]}"
    log_in(page, admin_user)
    page.get_by_role("link", name="Add cluster").click()
    page.wait_for_url("**/clusters/add/")
    screenshot(page, "cluster-add")
    fill_cluster_form(
        page, name=name, service_url=f"amqp://127.0.0.1:{closed_port()}/%2F", password=password, token=token
    )
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(re.compile(r"/clusters/\d+/$"))

    assert page.locator(".messages").inner_text() == f"Cluster {name} added."
    assert page.get_by_role("heading", name=name).is_visible()
    html = page.content()
    assert password not in html and token not in html
    cluster = Cluster.objects.get(name=name)
    # Stored (encrypted) and usable by the adapters, just never shown.
    assert (cluster.password, cluster.token, cluster.username) == (password, token, "guest")

    page.get_by_role("link", name="Edit").click()
    page.wait_for_url(f"**/clusters/{cluster.pk}/edit/")
    assert page.get_by_label("Password", exact=True).input_value() == ""
    assert page.get_by_label("Token", exact=True).input_value() == ""
    assert page.get_by_text("A password is stored.").is_visible()
    assert page.get_by_text("A token is stored.").is_visible()
    html = page.content()
    assert password not in html and token not in html

    page.goto("/clusters/")
    assert page.get_by_role("link", name=name).is_visible()
    assert page.locator("tr", has_text=name).get_by_text("not tested").is_visible()


def test_invalid_cluster_form_shows_errors_without_echoing_the_password(page, admin_user):
    password = f"pw-{uuid.uuid4().hex}"
    log_in(page, admin_user)
    page.goto("/clusters/add/")
    fill_cluster_form(
        page, name="", service_url="amqp://127.0.0.1:5672/%2F", password=password, token="", options="[1, 2"
    )
    page.get_by_label("Name", exact=True).fill("")
    # The browser's own check would stop an empty required field; the server's must too.
    page.locator("form.form").evaluate("form => form.noValidate = true")
    with page.expect_navigation():
        page.get_by_role("button", name="Save").click()

    assert page.url.endswith("/clusters/add/")
    errors = page.locator(".errorlist").all_inner_texts()
    assert "This field is required." in errors
    assert any("JSON" in text for text in errors), errors
    assert password not in page.content()
    assert page.get_by_label("Password", exact=True).input_value() == ""
    assert Cluster.objects.count() == 0


def test_connection_test_of_an_unreachable_cluster_shows_why_with_htmx(page, admin_user, make_cluster):
    cluster = make_cluster(
        "rabbitmq", service_url=f"amqp://127.0.0.1:{closed_port()}/%2F", password="not-shown"
    )
    log_in(page, admin_user)
    page.goto(f"/clusters/{cluster.pk}/")
    # Listing subscriptions failed, and the page still renders around it.
    assert page.locator("p.error", has_text="Cluster unreachable:").is_visible()
    page.evaluate("window.__still_same_page = true")
    page.get_by_role("button", name="Test connection").click()
    page.locator("#connection .badge.bad").wait_for()

    assert page.locator("#connection .badge").inner_text() == "unreachable"
    message = page.locator("#connection .check-message").inner_text()
    assert message.strip()
    # htmx swapped the status in place: no page load happened.
    assert page.evaluate("window.__still_same_page") is True
    screenshot(page, "cluster-detail")
    cluster.refresh_from_db()
    assert cluster.last_check_ok is False and cluster.last_check_message == message

    page.reload()
    assert page.locator("#connection .badge").inner_text() == "unreachable"
    page.goto("/clusters/")
    assert page.locator("tr", has_text=cluster.name).locator(".badge.bad").inner_text() == "unreachable"
    screenshot(page, "clusters")


def test_connection_test_without_javascript_reports_in_a_message(nojs_page, admin_user, make_cluster):
    page = nojs_page
    cluster = make_cluster("rabbitmq", service_url=f"amqp://127.0.0.1:{closed_port()}/%2F")
    log_in(page, admin_user)
    page.goto(f"/clusters/{cluster.pk}/")
    page.get_by_role("button", name="Test connection").click()
    page.wait_for_url(f"**/clusters/{cluster.pk}/")

    assert page.locator(".messages .msg-error").inner_text().startswith("Unreachable: ")
    assert page.locator("#connection .badge").inner_text() == "unreachable"


def test_admin_deletes_a_cluster_only_once_its_archive_is_empty(
    page, admin_user, make_cluster, make_dead_letters
):
    from console.audit.models import AuditEntry

    empty = make_cluster("rabbitmq", name="empty-one", service_url=f"amqp://127.0.0.1:{closed_port()}/%2F")
    busy = make_cluster("rabbitmq", name="busy-one", service_url=f"amqp://127.0.0.1:{closed_port()}/%2F")
    make_dead_letters(busy, 1)
    log_in(page, admin_user)

    page.goto(f"/clusters/{busy.pk}/")
    # Folded away until asked for.
    assert not page.get_by_role("button", name="Delete cluster").is_visible()
    page.get_by_text("Delete this cluster…").click()
    with page.expect_navigation():
        page.get_by_role("button", name="Delete cluster").click()
    assert (
        page.locator(".messages .msg-error")
        .inner_text()
        .startswith("Cluster busy-one still has archived dead letters")
    )
    assert Cluster.objects.filter(pk=busy.pk).exists()

    page.goto(f"/clusters/{empty.pk}/")
    page.get_by_text("Delete this cluster…").click()
    page.get_by_role("button", name="Delete cluster").click()
    page.wait_for_url("**/clusters/")
    assert page.locator(".messages .msg-success").inner_text() == "Cluster empty-one deleted."
    assert page.get_by_role("link", name="empty-one").count() == 0
    assert not Cluster.objects.filter(pk=empty.pk).exists()
    assert AuditEntry.objects.filter(action="cluster.delete", cluster_name="empty-one").count() == 1


def test_broker_failures_on_cluster_pages_show_the_brokers_message(page, admin_user, make_cluster):
    cluster = make_cluster(
        "rabbitmq",
        service_url=f"amqp://127.0.0.1:{closed_port()}/%2F",
        admin_url=f"http://127.0.0.1:{closed_port()}",
    )
    log_in(page, admin_user)

    response = page.goto(f"/clusters/{cluster.pk}/rebuild/?subscription=orders")
    assert response.status == 424
    assert page.get_by_role("heading", name="The broker did not answer as expected").is_visible()
    assert page.locator("main p.error").inner_text().strip()
    assert page.get_by_role("link", name="Back to the clusters").is_visible()
    screenshot(page, "broker-error")

    response = page.goto(f"/clusters/{cluster.pk}/peek/?subscription=orders")
    assert response.status == 200
    assert page.locator("main p.error").inner_text().strip()
    assert page.get_by_role("link", name=f"Back to {cluster.name}").is_visible()
