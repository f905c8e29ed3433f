"""Retry/DLQ topic names per cluster version, overrides and name validation (no broker needed)."""

from __future__ import annotations

import pytest

from brokers.pulsar.naming import InvalidName, retry_topology, topic_parse, topology_from_options

SOURCE = "persistent://shop/orders/created"


@pytest.mark.parametrize(("version", "retry", "dlq"), [
    ("2.9", "persistent://shop/orders/created-billing-RETRY", "persistent://shop/orders/created-billing-DLQ"),
    ("2.10", "persistent://shop/orders/created-billing-RETRY", "persistent://shop/orders/created-billing-DLQ"),
    ("3.3", "persistent://shop/orders/created-billing-RETRY", "persistent://shop/orders/created-billing-DLQ"),
    ("4.0", "persistent://shop/orders/created-billing-RETRY", "persistent://shop/orders/created-billing-DLQ"),
    ("2.7", "persistent://shop/orders/billing-RETRY", "persistent://shop/orders/billing-DLQ"),
    ("2.6", "persistent://shop/orders/billing-retry", "persistent://shop/orders/billing-dlq"),
])
def test_names_follow_the_cluster_version_in_the_source_namespace(version, retry, dlq):
    topology = retry_topology(SOURCE, "billing", naming_version=version)
    assert (topology.retry_topic, topology.dead_letter_topic) == (retry, dlq)


def test_a_short_topic_name_means_public_default():
    topology = retry_topology("orders", "billing")
    assert topology.source == "persistent://public/default/orders"
    assert topology.retry_topic == "persistent://public/default/orders-billing-RETRY"


def test_user_overrides_win_and_short_overrides_stay_in_the_source_namespace():
    topology = retry_topology(SOURCE, "billing", retry_topic="my-retry",
                              dead_letter_topic="persistent://ops/dead/all-DLQ")
    assert topology.retry_topic == "persistent://shop/orders/my-retry"
    assert topology.dead_letter_topic == "persistent://ops/dead/all-DLQ"


def test_cluster_options_carry_version_and_per_subscription_overrides():
    options = {"naming_version": "2.6", "overrides": {"audit": {"dead_letter_topic": "audit-dead"}}}
    assert topology_from_options(SOURCE, "billing", options).dead_letter_topic.endswith("/billing-dlq")
    audit = topology_from_options(SOURCE, "audit", options)
    assert audit.dead_letter_topic == "persistent://shop/orders/audit-dead"
    assert audit.retry_topic == "persistent://shop/orders/audit-retry"


@pytest.mark.parametrize("topic", [
    "", "   ", "persistent://only/two", "http://a/b/c", "persistent://a/b/c/d",
    "persistent://a/b/<script>", "orders topic", "persistent://a/b/c\x00", "ä/b",
])
def test_invalid_topic_names_are_refused_with_a_clear_error(topic):
    with pytest.raises(InvalidName, match="topic"):
        topic_parse(topic)


@pytest.mark.parametrize("subscription", ["", "a/b", "tab\there", "x" * 300])
def test_invalid_subscription_names_are_refused(subscription):
    with pytest.raises(InvalidName):
        retry_topology(SOURCE, subscription)


def test_a_subscription_name_that_cannot_form_a_topic_name_is_refused():
    with pytest.raises(InvalidName, match="not a valid Pulsar topic name"):
        retry_topology(SOURCE, "billing team")


@pytest.mark.parametrize("version", ["2.5", "2.8", "1.0", "latest", "two"])
def test_versions_outside_the_naming_table_are_refused(version):
    with pytest.raises(InvalidName, match="naming_version"):
        retry_topology(SOURCE, "billing", naming_version=version)


def test_retry_and_dead_letter_overrides_must_differ():
    with pytest.raises(InvalidName, match="must differ"):
        retry_topology(SOURCE, "billing", retry_topic="same", dead_letter_topic="same")
