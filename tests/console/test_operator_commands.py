"""The management commands operators script: collect a DLQ, rebuild a topology.

Run against the real RocketMQ-style broker on Redis through its contract harness.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from console.archive.models import DeadLetter
from console.audit.models import AuditEntry


@pytest.fixture
def rocketmq_cluster(make_cluster, rocketmq_harness):
    config = rocketmq_harness.cluster_config()
    return make_cluster("rocketmq", name="ops-rocketmq", service_url=config.service_url,
                        options=dict(config.options))


def test_collect_command_moves_the_dlq_into_the_archive(rocketmq_cluster, rocketmq_harness):
    group = rocketmq_harness.new_subscription()
    rocketmq_harness.put_dead_letters(group, [(b"a", {"k": "1"}), (b"b", {"k": "2"})])
    out = StringIO()
    call_command("collect", "--cluster", "ops-rocketmq", "--subscription", group, stdout=out)
    assert "collected 2 dead letter(s)" in out.getvalue()
    assert sorted(bytes(p) for p in DeadLetter.objects.values_list("payload", flat=True)) == [b"a", b"b"]
    assert rocketmq_harness.dead_letter_depth(group) == 0
    entry = AuditEntry.objects.get(action="archive.collect")
    assert (entry.actor_name, entry.count) == ("system", 2)


def test_collect_command_refuses_unknown_clusters_and_bad_limits(db):
    with pytest.raises(CommandError, match="no cluster named"):
        call_command("collect", "--cluster", "nope", "--subscription", "s")
    with pytest.raises(CommandError, match="at least 1"):
        call_command("collect", "--cluster", "nope", "--subscription", "s", "--limit", "0")


def test_rebuild_command_plans_then_applies(rocketmq_cluster, rocketmq_harness):
    group = rocketmq_harness.new_subscription()
    rocketmq_harness.break_topology(group)
    plan = StringIO()
    call_command("rebuild", "--cluster", "ops-rocketmq", "--subscription", group, stdout=plan)
    assert "would create" in plan.getvalue()
    assert not AuditEntry.objects.exists()

    applied = StringIO()
    call_command("rebuild", "--cluster", "ops-rocketmq", "--subscription", group, "--apply", stdout=applied)
    assert "created" in applied.getvalue()
    assert AuditEntry.objects.filter(action="topology.rebuild", actor_name="system").exists()

    again = StringIO()
    call_command("rebuild", "--cluster", "ops-rocketmq", "--subscription", group, stdout=again)
    assert again.getvalue().strip() == "nothing is missing"


def test_rebuild_command_reports_an_unreachable_broker(make_cluster):
    make_cluster("rocketmq", name="gone", service_url="redis://127.0.0.1:1/5")
    with pytest.raises(CommandError, match="rebuild failed"):
        call_command("rebuild", "--cluster", "gone", "--subscription", "g")
