"""The pure rule behind reconsume_later: counts, delays, properties (no broker needed)."""

from __future__ import annotations

import datetime as dt

import pytest

from brokers.pulsar.naming import retry_topology
from brokers.pulsar.retry import (
    DEFAULT_DELAY_LEVEL_SECONDS,
    delay_levels_parse,
    retry_count_of,
    retry_decide,
    user_properties,
)

TOPOLOGY = retry_topology("persistent://shop/orders/created", "billing")


def decide(properties=None, topic=TOPOLOGY.source, **choice):
    return retry_decide(topology=TOPOLOGY, properties=properties or {}, message_topic=topic,
                        message_id="(1,2,-1,-1)", **choice)


def test_the_default_levels_are_the_eighteen_of_the_spec():
    assert DEFAULT_DELAY_LEVEL_SECONDS == (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540,
                                           600, 1200, 1800, 3600, 7200)


def test_an_operator_may_configure_other_levels():
    assert delay_levels_parse("2s 1m 1.5h 1d") == (2, 60, 5400, 86400)
    assert delay_levels_parse([3, "4s"]) == (3, 4)
    assert decide(delay_levels=delay_levels_parse("2s 1m")).delay_seconds == 2


@pytest.mark.parametrize("levels", ["", "1x", "0s", "11d", "fast"])
def test_bad_level_lists_are_refused(levels):
    with pytest.raises(ValueError):
        delay_levels_parse(levels)


def test_later_hops_keep_the_real_topic_and_origin_and_count_up():
    first = decide({"tenant": "acme"})
    second = decide(dict(first.properties), topic=TOPOLOGY.retry_topic)
    assert second.properties["REAL_TOPIC"] == TOPOLOGY.source
    assert second.properties["ORIGIN_MESSAGE_ID"] == "(1,2,-1,-1)"
    assert second.properties["RECONSUMETIMES"] == "2"
    assert second.retry_count == 2
    assert user_properties(second.properties) == {"tenant": "acme"}


def test_a_timedelta_delay_is_accepted_and_recorded_in_milliseconds():
    decision = decide(delay=dt.timedelta(minutes=2))
    assert decision.properties["DELAY_TIME"] == "120000"


def test_the_sixteenth_retry_is_still_a_retry_and_the_seventeenth_failure_is_dead():
    assert not decide({"RECONSUMETIMES": "15"}).dead_letter
    dead = decide({"RECONSUMETIMES": "16"})
    assert dead.dead_letter and dead.topic == TOPOLOGY.dead_letter_topic
    assert dead.properties["RECONSUMETIMES"] == "16"


def test_a_garbled_retry_count_counts_as_zero_rather_than_crashing():
    assert retry_count_of({"RECONSUMETIMES": "lots"}) == 0
    assert decide({"RECONSUMETIMES": "-4"}).retry_count == 1


def test_zero_max_sends_the_first_failure_to_the_dlq():
    assert decide(max_redeliver_count=0).dead_letter
