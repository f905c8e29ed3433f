"""The broker contract (brokers/base.py), run over every adapter against its real broker."""

from __future__ import annotations

import pytest

from brokers import adapter_for
from brokers.base import BrokerError, ReplayMessage

KINDS = ["pulsar", "rabbitmq", "rocketmq"]

HOSTILE = '<script>alert("x")</script> \'; DROP TABLE x; -- ä 日本 \u202e'
BINARY = bytes(range(256)) + b"\xff\xfe\x00"


@pytest.fixture(params=KINDS)
def harness(request):
    return request.getfixturevalue(f"{request.param}_harness")


@pytest.fixture
def adapter(harness):
    with adapter_for(harness.cluster_config()) as broker:
        yield broker


def collect_all(adapter, subscription, *, limit=None, batch_size=500):
    batches = []
    moved = adapter.collect_dead_letters(subscription, batches.append, limit=limit,
                                         batch_size=batch_size)
    letters = [letter for batch in batches for letter in batch]
    assert moved == len(letters)
    return letters


def test_check_connection_describes_the_cluster(adapter):
    assert adapter.check_connection().strip()


def test_unreachable_cluster_raises_broker_error(harness):
    with adapter_for(harness.unreachable_config()) as broker, pytest.raises(BrokerError):
        broker.check_connection()


def test_inventory_lists_a_healthy_subscription_with_its_retry_queue_and_dlq(harness, adapter):
    name = harness.new_subscription()
    listed = {s.name: s for s in adapter.list_subscriptions()}
    assert name in listed
    info = listed[name]
    assert info.retry_queue and info.dead_letter_queue
    assert info.retry_queue != info.dead_letter_queue
    assert info.healthy, info.problems


def test_broken_topology_is_reported_and_rebuild_repairs_it_idempotently(harness, adapter):
    name = harness.new_subscription()
    harness.break_topology(name)
    info = {s.name: s for s in adapter.list_subscriptions()}[name]
    assert not info.healthy

    plan = adapter.plan_rebuild(name)
    assert plan.steps
    done = adapter.apply_rebuild(plan)
    assert done.steps

    assert adapter.plan_rebuild(name).steps == ()
    assert not adapter.apply_rebuild(adapter.plan_rebuild(name)).steps
    assert {s.name: s for s in adapter.list_subscriptions()}[name].healthy


def test_collect_hands_every_dead_letter_to_the_sink_and_empties_the_dlq(harness, adapter):
    name = harness.new_subscription()
    sent = [(f'{{"order": {i}}}'.encode(), {"error": f"Timeout {i}", "tenant": "acme"})
            for i in range(25)]
    harness.put_dead_letters(name, sent, retry_count=3)
    assert harness.dead_letter_depth(name) == 25

    letters = collect_all(adapter, name, batch_size=10)

    assert sorted(x.payload for x in letters) == sorted(p for p, _ in sent)
    assert len({x.broker_message_id for x in letters}) == 25
    for letter in letters:
        assert letter.subscription == name
        assert letter.source
        assert letter.properties["tenant"] == "acme"
        assert letter.properties["error"].startswith("Timeout")
        assert letter.retry_count == 3
    assert harness.dead_letter_depth(name) == 0
    assert collect_all(adapter, name) == []


def test_collect_acknowledges_nothing_when_the_archive_commit_fails(harness, adapter):
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(b"keep me", {"k": "v"}), (b"and me", {})])

    def failing_sink(batch):
        raise RuntimeError("database went away")

    with pytest.raises(RuntimeError):
        adapter.collect_dead_letters(name, failing_sink)

    letters = collect_all(adapter, name)
    assert sorted(x.payload for x in letters) == [b"and me", b"keep me"]


def test_collect_respects_the_limit(harness, adapter):
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(f"m{i}".encode(), {}) for i in range(7)])
    first = collect_all(adapter, name, limit=3)
    assert len(first) == 3
    rest = collect_all(adapter, name)
    assert len(rest) == 4
    assert {x.payload for x in first}.isdisjoint({x.payload for x in rest})


def test_binary_payloads_and_hostile_properties_survive_collect_unchanged(harness, adapter):
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(BINARY, {"note": HOSTILE})])
    [letter] = collect_all(adapter, name)
    assert letter.payload == BINARY
    assert letter.properties["note"] == HOSTILE


def test_peek_shows_retry_messages_without_consuming_them(harness, adapter):
    name = harness.new_subscription()
    harness.put_retry_messages(name, [(b"retry-1", {"a": "1"}), (b"retry-2", {"a": "2"})])
    first = adapter.peek_retry_queue(name, limit=10)
    second = adapter.peek_retry_queue(name, limit=10)
    assert sorted(m.payload for m in first) == [b"retry-1", b"retry-2"]
    assert sorted(m.payload for m in second) == [b"retry-1", b"retry-2"]


def test_republish_puts_letters_back_with_properties_kept_and_retry_count_reset(harness, adapter):
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(b'{"order": 1}', {"tenant": "acme"}), (BINARY, {"note": HOSTILE})],
                             retry_count=5)
    letters = collect_all(adapter, name)
    replays = [
        ReplayMessage(key=str(i), subscription=x.subscription, source=x.source, payload=x.payload,
                      properties=x.properties, origin_message_id=x.origin_message_id or x.broker_message_id)
        for i, x in enumerate(letters)
    ]
    outcomes = adapter.republish(replays)

    assert [o.key for o in outcomes] == [r.key for r in replays]
    assert all(o.confirmed for o in outcomes), outcomes
    received = harness.receive_from_source(name, 2)
    assert sorted(p for p, _ in received) == sorted([b'{"order": 1}', BINARY])
    by_payload = {p: props for p, props in received}
    assert by_payload[b'{"order": 1}']["tenant"] == "acme"
    assert by_payload[BINARY]["note"] == HOSTILE
    for props in by_payload.values():
        assert harness.retry_count_of(props) == 0


def test_discard_drops_what_waits_in_the_dlq(harness, adapter):
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(b"x", {}), (b"y", {}), (b"z", {})])
    assert adapter.discard_dead_letters(name) == 3
    assert harness.dead_letter_depth(name) == 0


def test_replay_destinations_offer_the_origin_first(harness, adapter):
    name = harness.new_subscription()
    destinations = adapter.replay_destinations(name)
    assert destinations and all(len(d) == 2 for d in destinations)
