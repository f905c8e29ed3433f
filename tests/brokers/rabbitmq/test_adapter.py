"""The console's RabbitMQ adapter against the real broker and its management API:
health and rebuild, collect into the archive, peek, replay destinations, bad input."""

from __future__ import annotations

import threading
import time
from urllib.parse import quote

import pika
import pytest
import requests

from brokers import adapter_for
from brokers.base import BrokerError, ReplayMessage
from brokers.rabbitmq.adapter import PEEK_EXPLANATION, RabbitMQAdapter
from brokers.rabbitmq.consumer import RetryingConsumer
from brokers.rabbitmq.topology import declare_queue, failed_queue, retry_queue

MANAGEMENT = "http://127.0.0.1:15672/api"


def info_of(adapter, name):
    return {s.name: s for s in adapter.list_subscriptions()}[name]


def collect_all(adapter, name, **kwargs):
    batches = []
    adapter.collect_dead_letters(name, batches.append, **kwargs)
    return [letter for batch in batches for letter in batch]


def replays_of(letters, destination=None):
    return [ReplayMessage(key=f"row-{i}", subscription=x.subscription, source=x.source, payload=x.payload,
                          properties=x.properties, origin_message_id=x.origin_message_id,
                          destination=destination)
            for i, x in enumerate(letters)]


@pytest.fixture
def adapter(rabbitmq_harness):
    with adapter_for(rabbitmq_harness.cluster_config()) as broker:
        yield broker


def test_a_missing_binding_back_from_retry_is_reported_and_rebuilt(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    harness.channel().queue_unbind(queue=name, exchange=harness.topology.exchange, routing_key=name)

    info = info_of(adapter, name)
    assert any("not bound to" in p and "would be dropped" in p for p in info.problems)
    plan = adapter.plan_rebuild(name)
    assert [(s.action, s.target) for s in plan.steps] == [("bind queue", name)]
    assert adapter.apply_rebuild(plan).steps == plan.steps
    assert adapter.apply_rebuild(plan).steps == ()
    assert info_of(adapter, name).healthy


def test_an_empty_retry_queue_without_ttl_is_recreated_by_rebuild(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    channel = harness.channel()
    channel.queue_delete(queue=retry_queue(name))
    declare_queue(channel, retry_queue(name))  # no TTL, no dead-letter target
    channel.queue_bind(queue=retry_queue(name), exchange=harness.topology.retry_exchange, routing_key=name)

    problems = " ".join(info_of(adapter, name).problems)
    assert "has no TTL" in problems and "dead-letters to 'nowhere'" in problems
    plan = adapter.plan_rebuild(name)
    assert [s.action for s in plan.steps] == ["recreate empty queue"]
    adapter.apply_rebuild(plan)

    assert info_of(adapter, name).healthy
    assert adapter.plan_rebuild(name).steps == ()


def test_rebuild_never_deletes_a_misconfigured_retry_queue_holding_messages(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    channel = harness.channel()
    channel.queue_delete(queue=retry_queue(name))
    declare_queue(channel, retry_queue(name), {"x-dead-letter-exchange": "elsewhere",
                                               "x-message-ttl": 60_000})
    channel.queue_bind(queue=retry_queue(name), exchange=harness.topology.retry_exchange, routing_key=name)
    harness.put_retry_messages(name, [(b"precious", {})])

    info = info_of(adapter, name)
    assert any("dead-letters to 'elsewhere'" in p and "never deletes" in p for p in info.problems)
    assert adapter.plan_rebuild(name).steps == ()
    adapter.apply_rebuild(adapter.plan_rebuild(name))
    assert harness.depth(retry_queue(name)) == 1


def test_a_queue_catching_other_queues_retries_is_reported(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    greedy = harness.new_subscription(routing_keys=("#",))
    assert any(greedy in p and "would also receive" in p for p in info_of(adapter, name).problems)


def test_rebuild_restores_a_whole_missing_topology_of_a_registered_queue(rabbitmq_harness):
    harness = rabbitmq_harness
    from brokers.base import KnownSubscription

    harness.new_subscription()  # declares the exchanges
    name = "reports @ü.weekly"
    harness.queues.append(name)
    config = harness.cluster_config(known_subscriptions=(KnownSubscription(name=name, source="reports"),))
    with adapter_for(config) as adapter:
        info = info_of(adapter, name)
        assert f"queue {name} is missing" in info.problems
        adapter.apply_rebuild(adapter.plan_rebuild(name))
        assert info_of(adapter, name).healthy


def test_inventory_shows_depths_consumers_and_rates(make_rabbitmq_harness):
    harness = make_rabbitmq_harness()
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(b"a", {}), (b"b", {}), (b"c", {})])
    harness.put_retry_messages(name, [(b"r", {})])
    stop = threading.Event()
    consumer = threading.Thread(target=RetryingConsumer(harness.cluster_config(), name, lambda m: None,
                                                        declare=False).run, kwargs={"stop": stop})
    consumer.start()
    try:
        with adapter_for(harness.cluster_config()) as adapter:
            # The management API samples queue figures every few seconds: wait for them.
            deadline = time.monotonic() + 30
            info = info_of(adapter, name)
            while (info.dead_letter_depth, info.retry_depth, info.consumers) != (3, 1, 1) \
                    and time.monotonic() < deadline:
                time.sleep(0.5)
                info = info_of(adapter, name)
    finally:
        stop.set()
        consumer.join()
    assert (info.dead_letter_depth, info.retry_depth, info.consumers, info.backlog) == (3, 1, 1, 0)
    assert info.details["retry_ttl_ms"] == 600_000
    assert info.details["max_retries"] == 3
    assert info.source == f"orders.{harness.tag}.#"
    assert {"publish_rate", "retry_rate", "dead_letter_rate"} <= set(info.details)
    assert info.details["peek_note"] == PEEK_EXPLANATION  # what the page says peeking does


def test_collect_after_a_crash_between_commit_and_ack_archives_each_letter_once(
        rabbitmq_harness, adapter, make_cluster):
    from console.archive.models import DeadLetter
    from console.archive.services import archive_store

    harness = rabbitmq_harness
    cluster = make_cluster("rabbitmq")
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(f'{{"order": {i}}}'.encode(), {"i": str(i)}) for i in range(6)])

    def commit_then_crash(batch):
        archive_store(cluster=cluster, letters=batch)
        raise ConnectionResetError("killed after the commit, before the ack")

    with pytest.raises(ConnectionResetError):
        adapter.collect_dead_letters(name, commit_then_crash, batch_size=4)
    assert harness.dead_letter_depth(name) == 6  # nothing acknowledged

    moved = adapter.collect_dead_letters(name, lambda batch: archive_store(cluster=cluster, letters=batch),
                                         batch_size=4)
    assert moved == 6
    assert harness.dead_letter_depth(name) == 0
    rows = DeadLetter.objects.filter(cluster=cluster, subscription=name)
    assert rows.count() == 6
    assert sorted(rows.values_list("properties__i", flat=True)) == [str(i) for i in range(6)]


def test_foreign_dead_letters_get_an_id_that_survives_redelivery(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    channel = harness.channel()
    # Dead-lettered by something else: no Redrive id header, two byte-identical copies.
    for _ in range(2):
        channel.basic_publish("", failed_queue(name), b"same", pika.BasicProperties(delivery_mode=2))

    def refuse(batch):
        raise RuntimeError("archive down")

    with pytest.raises(RuntimeError):
        adapter.collect_dead_letters(name, refuse)
    first_try = []
    with pytest.raises(RuntimeError):
        adapter.collect_dead_letters(name, lambda b: (first_try.extend(b), refuse(b)))
    second_try = collect_all(adapter, name)
    assert [x.broker_message_id for x in first_try] == [x.broker_message_id for x in second_try]
    assert len({x.broker_message_id for x in second_try}) == 2


def test_replay_by_default_reaches_only_the_failing_queue(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    failing = harness.new_subscription()
    other = harness.new_subscription()  # same routing keys as `failing`
    harness.put_dead_letters(failing, [(b'{"order": 1}', {"tenant": "acme"})])
    letters = collect_all(adapter, failing)

    [outcome] = adapter.republish(replays_of(letters))

    assert outcome.confirmed and outcome.broker_message_id
    [(body, props)] = harness.receive(failing, 1)
    assert body == b'{"order": 1}'
    assert harness.depth(other) == 0
    assert props["x-retry-count"] == "0"
    assert props["x-redrive-replay-of"] == letters[0].origin_message_id
    assert props["x-redrive-replay-key"] == "row-0"
    assert props["x-orig-routing-key"] == f"orders.{harness.tag}.created"
    assert "x-redrive-dead-letter-id" not in props and "x-death" not in props


def test_replay_to_the_original_routing_key_reaches_every_subscriber(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    failing = harness.new_subscription()
    other = harness.new_subscription()
    harness.put_dead_letters(failing, [(b"again", {})])
    letters = collect_all(adapter, failing)
    destinations = [value for value, _label in adapter.replay_destinations(failing)]
    assert destinations == ["queue", "original"]

    [outcome] = adapter.republish(replays_of(letters, destination="original"))

    assert outcome.confirmed
    assert [b for b, _ in harness.receive(failing, 1)] == [b"again"]
    assert [b for b, _ in harness.receive(other, 1)] == [b"again"]


def test_replay_that_no_queue_would_take_is_not_confirmed(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    name = harness.new_subscription(routing_keys=())
    harness.put_dead_letters(name, [(b"x", {})])
    letters = collect_all(adapter, name)
    # The original routing key reaches no queue now (the queue only has its own key).
    [outcome] = adapter.republish(replays_of(letters, destination="original"))
    assert not outcome.confirmed and outcome.permanent
    assert "no queue is bound" in outcome.error


def test_replay_to_a_missing_exchange_is_refused_for_every_message(rabbitmq_harness):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(b"x", {}), (b"y", {})])
    with adapter_for(harness.cluster_config()) as adapter:
        letters = collect_all(adapter, name)
    harness.channel().exchange_delete(harness.topology.exchange)
    with adapter_for(harness.cluster_config()) as adapter:
        outcomes = adapter.republish(replays_of(letters) + [
            ReplayMessage(key="bad", subscription="a.*.b", source="s", payload=b"z"),
            ReplayMessage(key="odd", subscription=name, source="s", payload=b"z", destination="nowhere"),
        ])
    assert [o.confirmed for o in outcomes] == [False] * 4
    assert "NOT_FOUND" in outcomes[0].error and "wildcard" in outcomes[2].error
    assert "unknown replay destination" in outcomes[3].error


def test_a_replay_connection_killed_mid_way_confirms_only_what_arrived(rabbitmq_harness):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    # A small window keeps the replay going long enough for the connection to be killed.
    config = harness.cluster_config(options={**harness.options, "replay_window": 1})
    adapter = adapter_for(config)
    messages = [ReplayMessage(key=f"k{i}", subscription=name, source="orders", payload=b"p" * 2000)
                for i in range(20_000)]
    killed = threading.Event()

    def kill_replay_connection():
        wanted = f"redrive replay ({config.name})"
        deadline = time.monotonic() + 30
        while not killed.is_set() and time.monotonic() < deadline:
            connections = requests.get(f"{MANAGEMENT}/connections", auth=("guest", "guest"), timeout=5).json()
            for connection in connections:
                if (connection.get("client_properties") or {}).get("connection_name") == wanted:
                    requests.delete(f"{MANAGEMENT}/connections/{quote(connection['name'], safe='')}",
                                    auth=("guest", "guest"), timeout=5)
                    killed.set()
            time.sleep(0.05)

    killer = threading.Thread(target=kill_replay_connection)
    killer.start()
    outcomes = adapter.republish(messages)
    killed.set()
    killer.join()

    confirmed = {o.key for o in outcomes if o.confirmed}
    assert 0 < len(confirmed) < len(messages), "the connection should have died part-way"
    assert all(o.error for o in outcomes if not o.confirmed)
    received = {props["x-redrive-replay-key"] for _, props in harness.drain(name)}
    # Every confirmed copy is on the broker; the others stay parked in the archive.
    assert confirmed <= received


def test_peek_puts_every_message_back_in_order(rabbitmq_harness, adapter):
    harness = rabbitmq_harness
    name = harness.new_subscription()
    harness.put_retry_messages(name, [(f"m{i}".encode(), {}) for i in range(5)])

    first = adapter.peek_retry_queue(name, limit=3)
    everything = adapter.peek_retry_queue(name, limit=10)

    assert [m.payload for m in first] == [b"m0", b"m1", b"m2"]
    assert [m.payload for m in everything] == [f"m{i}".encode() for i in range(5)]
    assert all(m.retry_count == 1 and m.due_at is not None for m in everything)
    # Due = last failure + the queue's own TTL (600 s), even if the cluster's option says otherwise.
    other_option = rabbitmq_harness.cluster_config(options={**harness.options, "retry_ttl_ms": 1000})
    with adapter_for(other_option) as misinformed:
        [oldest] = misinformed.peek_retry_queue(name, limit=1)
    last = int(oldest.properties["x-redrive-last-failure-at"])
    assert oldest.due_at.timestamp() * 1000 == pytest.approx(last + 600_000, abs=1)
    assert harness.depth(retry_queue(name)) == 5
    assert "requeue" in PEEK_EXPLANATION


def test_peek_at_an_empty_retry_queue_shows_nothing(rabbitmq_harness, adapter):
    name = rabbitmq_harness.new_subscription()
    assert adapter.peek_retry_queue(name) == []


def test_wrong_credentials_are_a_clear_permanent_error(rabbitmq_harness):
    config = rabbitmq_harness.cluster_config(password="not-the-password")
    with RabbitMQAdapter(config) as adapter:
        with pytest.raises(BrokerError, match="refused the credentials") as amqp:
            adapter.check_connection()
        with pytest.raises(BrokerError, match="management API refused the credentials") as http:
            adapter.list_subscriptions()
    assert amqp.value.permanent and http.value.permanent
    assert "not-the-password" not in str(amqp.value) + str(http.value)


def test_a_vhost_that_does_not_exist_is_a_clear_error(rabbitmq_harness):
    config = rabbitmq_harness.cluster_config(service_url="amqp://127.0.0.1:5672/no-such-vhost")
    with RabbitMQAdapter(config) as adapter:
        with pytest.raises(BrokerError, match="no-such-vhost") as caught:
            adapter.check_connection()
        assert caught.value.permanent
        with pytest.raises(BrokerError, match="vhost 'no-such-vhost' does not exist"):
            adapter.list_subscriptions()
        with pytest.raises(BrokerError, match="no-such-vhost"):
            adapter.collect_dead_letters("orders", lambda batch: None)


def test_operations_on_a_queue_without_topology_or_with_a_bad_name_are_refused(rabbitmq_harness, adapter):
    with pytest.raises(BrokerError, match="does not exist") as missing:
        adapter.discard_dead_letters("never declared ü")
    assert missing.value.permanent
    for bad in ("orders.#", "x@failed", ""):
        with pytest.raises(BrokerError):
            adapter.collect_dead_letters(bad, lambda batch: None)
        with pytest.raises(BrokerError):
            adapter.peek_retry_queue(bad)


def test_bad_options_are_a_clear_error(rabbitmq_harness):
    with pytest.raises(BrokerError, match="integers"):
        adapter_for(rabbitmq_harness.cluster_config(options={"retry_ttl_ms": "soon"}))
    with pytest.raises(BrokerError, match="amqp://"):
        adapter_for(rabbitmq_harness.cluster_config(service_url="http://x")).check_connection()


def test_an_unreachable_broker_is_a_temporary_error_for_every_operation(rabbitmq_harness):
    with adapter_for(rabbitmq_harness.unreachable_config()) as adapter:
        calls = [
            adapter.list_subscriptions,
            lambda: adapter.collect_dead_letters("orders", lambda batch: None),
            lambda: adapter.peek_retry_queue("orders"),
            lambda: adapter.republish([ReplayMessage(key="1", subscription="orders", source="o",
                                                     payload=b"x")]),
            lambda: adapter.discard_dead_letters("orders"),
        ]
        for call in calls:
            with pytest.raises(BrokerError) as caught:
                call()
            assert not caught.value.permanent
            assert "cannot reach" in str(caught.value)


def test_a_collector_process_killed_after_a_commit_loses_nothing(rabbitmq_harness, tmp_path):
    import json
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    harness = rabbitmq_harness
    name = harness.new_subscription()
    harness.put_dead_letters(name, [(f"m{i}".encode(), {}) for i in range(25)])
    archive = tmp_path / "archive.jsonl"
    config = harness.cluster_config()
    # The child "commits" each batch to a file (flushed and fsynced), and dies for good
    # right after committing the second batch, before that batch's ack.
    script = textwrap.dedent(f"""
        import json, os
        from brokers.base import ClusterConfig
        from brokers.rabbitmq.adapter import RabbitMQAdapter
        config = ClusterConfig(kind="rabbitmq", name="crash", service_url={config.service_url!r},
                               admin_url={config.admin_url!r}, username="guest", password="guest",
                               options={dict(config.options)!r})
        batches = 0
        def sink(batch):
            global batches
            with open({str(archive)!r}, "a") as f:
                for letter in batch:
                    f.write(json.dumps([letter.broker_message_id, letter.payload.decode()]) + "\\n")
                f.flush()
                os.fsync(f.fileno())
            batches += 1
            if batches == 2:
                os._exit(9)
        RabbitMQAdapter(config).collect_dead_letters({name!r}, sink, batch_size=10)
    """)
    root = Path(__file__).resolve().parents[3]
    assert subprocess.run([sys.executable, "-c", script], cwd=root, timeout=60).returncode == 9

    before = [json.loads(line) for line in archive.read_text().splitlines()]
    assert len(before) == 20
    assert harness.dead_letter_depth(name) == 15  # the second batch was never acknowledged

    with adapter_for(config) as adapter:
        after = collect_all(adapter, name)
    archived = {message_id: payload for message_id, payload in before}
    new = {x.broker_message_id: x.payload.decode() for x in after}
    # The 10 committed-but-unacked letters come back with the same ids: no duplicate rows.
    assert len(set(archived) & set(new)) == 10
    assert sorted({**archived, **new}.values()) == sorted(f"m{i}" for i in range(25))


def test_credentials_written_into_the_urls_are_used_and_never_shown(rabbitmq_harness):
    config = rabbitmq_harness.cluster_config(username="", password="",
                                             service_url="amqp://guest:guest@127.0.0.1:5672/%2F",
                                             admin_url="http://guest:guest@127.0.0.1:15672")
    with adapter_for(config) as adapter:
        assert "RabbitMQ" in adapter.check_connection()
        name = rabbitmq_harness.new_subscription()
        assert name in {s.name for s in adapter.list_subscriptions()}
    wrong = rabbitmq_harness.cluster_config(username="", password="",
                                            admin_url="http://guest:s3cret-pw@127.0.0.1:15672")
    with adapter_for(wrong) as adapter, pytest.raises(BrokerError) as caught:
        adapter.list_subscriptions()
    assert "refused the credentials" in str(caught.value) and "s3cret-pw" not in str(caught.value)
    with pytest.raises(BrokerError) as bad_url:
        adapter_for(rabbitmq_harness.cluster_config(service_url="http://u:s3cret-pw@x")).check_connection()
    assert "s3cret-pw" not in str(bad_url.value)


@pytest.mark.parametrize(("service_url", "admin_url"), [
    ("amqp://127.0.0.1:abc/", ""),
    ("amqp://[::1", ""),
    ("", ""),
    ("amqp://127.0.0.1:5672/%2F", "http://127.0.0.1:xx"),
    ("amqp://127.0.0.1:5672/%2F", "http://[::1"),
    ("amqp://127.0.0.1:5672/%2F", "ftp://127.0.0.1"),
])
def test_unreadable_urls_are_a_clear_permanent_error(rabbitmq_harness, service_url, admin_url):
    config = rabbitmq_harness.cluster_config(service_url=service_url, admin_url=admin_url)
    with pytest.raises(BrokerError) as caught, adapter_for(config) as adapter:
        adapter.list_subscriptions() if admin_url else adapter.check_connection()
    assert caught.value.permanent
    assert "URL" in str(caught.value)
