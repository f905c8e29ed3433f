"""The demo framework: drivers per broker kind, skipping what cannot run, collecting."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from brokers.pulsar.embedded import free_port

DEMO_DIR = Path(__file__).resolve().parents[2] / "console" / "runner" / "demo"
DRIVERS = sorted(p for p in DEMO_DIR.glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("driver", DRIVERS, ids=[p.stem for p in DRIVERS])
def test_demo_drivers_follow_the_interface_without_django(driver):
    tree = ast.parse(driver.read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] in ("django", "console", "rest_framework")]
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert [a.arg for a in functions["subscriptions"].args.args] == ["config"]
    assert [a.arg for a in functions["drive"].args.args] == ["config", "stop", "log"]


@pytest.fixture
def demo_lines():
    return []


def test_kinds_without_a_driver_and_unreachable_brokers_are_skipped(transactional_db, make_cluster,
                                                                   demo_lines):
    from console.clusters.models import RegisteredSubscription
    from console.runner.demo import DemoRunner

    nobody = make_cluster("pulsar", name="demo-down", service_url=f"pulsar://127.0.0.1:{free_port()}")
    odd = make_cluster("pulsar", name="demo-odd")
    odd.kind = "nosuchkind"
    runner = DemoRunner(clusters=[nobody, odd], log=demo_lines.append)
    try:
        assert runner.start() == []
    finally:
        runner.stop()
    assert any("demo-down" in line and "unreachable" in line for line in demo_lines)
    assert not RegisteredSubscription.objects.exists()


def test_the_pulsar_demo_registers_its_subscription_and_its_dead_letters_reach_the_archive(
        transactional_db, make_cluster, pulsar_broker, demo_lines):
    from console.archive.models import DeadLetter
    from console.audit.models import AuditEntry
    from console.clusters.models import RegisteredSubscription
    from console.runner.demo import DemoRunner
    from console.runner.demo import pulsar as pulsar_demo

    cluster = make_cluster("pulsar", name="demo-pulsar", service_url=pulsar_broker.service_url,
                           options={"metrics_url": pulsar_broker.metrics_url})
    runner = DemoRunner(clusters=[cluster], log=demo_lines.append, collect_interval=1)
    try:
        assert runner.start() == ["demo-pulsar"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not DeadLetter.objects.filter(cluster=cluster).exists():
            time.sleep(0.5)
    finally:
        runner.stop()
    assert all(not t.is_alive() for t in runner.threads)

    registered = RegisteredSubscription.objects.get(cluster=cluster)
    assert (registered.name, registered.source) == (pulsar_demo.SUBSCRIPTION, pulsar_demo.SOURCE)
    letter = DeadLetter.objects.filter(cluster=cluster).first()
    assert letter is not None, demo_lines
    assert letter.subscription == pulsar_demo.SUBSCRIPTION
    assert letter.retry_count == pulsar_demo.MAX_RETRIES
    assert letter.properties["error"].startswith("CardDeclined")
    assert letter.properties["REAL_TOPIC"] == pulsar_demo.SOURCE
    assert AuditEntry.objects.filter(action="archive.collect", actor_name="system").exists()


def test_the_demo_command_drives_the_reachable_default_clusters_and_stops(transactional_db, pulsar_broker):
    from io import StringIO

    from django.core.management import call_command

    from console.clusters.models import RegisteredSubscription
    from console.runner.services import embedded_pulsar_cluster_ensure

    cluster = embedded_pulsar_cluster_ensure(service_url=pulsar_broker.service_url,
                                             metrics_url=pulsar_broker.metrics_url)
    out = StringIO()
    call_command("demo", "--seconds", "3", stdout=out, stderr=StringIO())
    assert "Demo traffic on:" in out.getvalue() and "embedded-pulsar" in out.getvalue()
    assert RegisteredSubscription.objects.filter(cluster=cluster, name="demo-billing").exists()


def test_the_demo_command_says_so_when_nothing_is_reachable(transactional_db):
    from io import StringIO

    from django.core.management import call_command

    err = StringIO()
    call_command("demo", "--seconds", "1", stdout=StringIO(), stderr=err)
    assert "No default cluster" in err.getvalue()
