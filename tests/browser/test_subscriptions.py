"""The subscriptions of a real RabbitMQ cluster, collecting its DLQ, and its dead letters.

Runs against the RabbitMQ on 127.0.0.1 through the rabbitmq harness (its own exchange,
removed afterwards), so the page shows what the adapter really reads from the broker.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from brokers.rabbitmq.topology import retry_queue
from console.archive.models import DeadLetter
from tests.browser.conftest import log_in, screenshot
from tests.fixtures.rabbitmq import ADMIN_URL, AMQP_URL

pytestmark = pytest.mark.browser


@pytest.fixture
def rabbit(rabbitmq_harness, make_cluster):
    """A cluster on the local RabbitMQ with one subscription holding two dead letters."""
    subscription = rabbitmq_harness.new_subscription()
    rabbitmq_harness.put_dead_letters(
        subscription,
        [
            (json.dumps({"order": 1}).encode(), {"tenant": "acme"}),
            (json.dumps({"order": 2}).encode(), {"tenant": "globex"}),
        ],
    )
    cluster = make_cluster(
        "rabbitmq",
        name="local-rabbit",
        service_url=AMQP_URL,
        admin_url=ADMIN_URL,
        username="guest",
        password="guest",
        options=rabbitmq_harness.options,
    )
    return cluster, subscription


def subscription_row(page, name: str):
    return page.locator("table.subscriptions tbody tr", has=page.get_by_text(name, exact=True))


def test_operator_collects_a_dlq_and_follows_it_to_the_archive(page, rabbit, rabbitmq_harness, operator):
    cluster, subscription = rabbit
    log_in(page, operator)
    page.goto("/clusters/")
    page.get_by_role("link", name="local-rabbit").click()
    row = subscription_row(page, subscription)
    expect(row).to_have_count(1)
    # Subscription, source, mode, retry queue, DLQ, backlog, retrying, dead, archived.
    # (Backlog and depths are the management API's samples, refreshed every few
    # seconds, so only the archive count is exact here.)
    assert row.locator("td").all_inner_texts()[8] == "0"
    assert row.locator(".badge.ok").inner_text() == "healthy"
    screenshot(page, "subscriptions")

    with page.expect_navigation():
        row.get_by_role("button", name="Collect DLQ").click()
    assert page.locator(".messages .msg-success").inner_text() == (
        f"Collected 2 dead letter(s) from {subscription}."
    )
    row = subscription_row(page, subscription)
    assert row.locator("td").all_inner_texts()[8] == "2"
    assert rabbitmq_harness.dead_letter_depth(subscription) == 0

    row.get_by_role("link", name="2").click()
    page.wait_for_url("**/archive/?*")
    expect(page.locator("#results .count")).to_have_text(re.compile(r"^2 dead letters"))
    page.locator("#results table.letters a").first.click()
    page.wait_for_url("**/archive/*/")
    assert page.locator(".facts").get_by_text(subscription, exact=True).is_visible()
    assert json.loads(page.locator("#payload").inner_text())["order"] in (1, 2)
    assert DeadLetter.objects.filter(cluster=cluster, subscription=subscription).count() == 2


def test_broken_topology_shows_a_rebuild_plan_to_an_admin(page, rabbit, rabbitmq_harness, admin_user):
    cluster, subscription = rabbit
    rabbitmq_harness.break_topology(subscription)
    log_in(page, admin_user)
    page.goto(f"/clusters/{cluster.pk}/")
    row = subscription_row(page, subscription)
    assert row.locator(".badge.bad").count() >= 1
    row.get_by_role("link", name="Rebuild…").click()
    page.wait_for_url(f"**/clusters/{cluster.pk}/rebuild/?*")
    assert page.locator("table tbody tr").count() >= 1
    screenshot(page, "rebuild-plan")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(f"**/clusters/{cluster.pk}/")
    assert page.locator(".messages .msg-success").inner_text().startswith(f"Rebuild of {subscription}:")
    assert subscription_row(page, subscription).locator(".badge.ok").inner_text() == "healthy"


def test_peeking_the_retry_queue_shows_messages_and_leaves_them_there(page, rabbit, rabbitmq_harness, viewer):
    cluster, subscription = rabbit
    rabbitmq_harness.put_retry_messages(
        subscription, [(b'{"order": 7}', {"tenant": "acme"}), (b"<b>not bold</b>", {"tenant": "initech"})]
    )
    log_in(page, viewer)
    page.goto(f"/clusters/{cluster.pk}/")
    subscription_row(page, subscription).get_by_role("link", name="Peek retry").click()
    page.wait_for_url(f"**/clusters/{cluster.pk}/peek/?*")
    rows = page.locator("main table tbody tr")
    expect(rows).to_have_count(2)
    text = " ".join(rows.all_inner_texts())
    assert '{"order": 7}' in text and "<b>not bold</b>" in text and "tenant=initech" in text
    assert page.locator("main b").count() == 0
    # RabbitMQ cannot look without taking: the page says what peeking did.
    assert "puts them straight back (requeue)" in page.locator("#peek-note").inner_text()
    screenshot(page, "peek")
    # Peeking took nothing away.
    assert rabbitmq_harness.depth(retry_queue(subscription)) == 2
    page.get_by_role("link", name=f"Back to {cluster.name}").click()
    page.wait_for_url(f"**/clusters/{cluster.pk}/")
