"""`manage.py rocketmq_scheduler`: runs the delay scheduler for the configured clusters."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from brokers.rocketmq.delay import delay_store
from brokers.rocketmq.message import Message, decode, now_ms, prepared
from tests.fixtures.rocketmq import LIBRARY_DB, SHARED_URL, free_port


def test_once_moves_what_is_due_on_each_rocketmq_cluster(make_cluster, rocketmq_connection):
    make_cluster("rocketmq", name="r1", service_url=SHARED_URL.format(db=LIBRARY_DB),
                 options={"key_prefix": rocketmq_connection.keys.prefix})
    due = prepared(Message(topic="later", body=b"due"))
    later = prepared(Message(topic="later", body=b"not yet"))
    delay_store(rocketmq_connection, due, now_ms() - 1)
    delay_store(rocketmq_connection, later, now_ms() + 600_000)
    out = io.StringIO()

    call_command("rocketmq_scheduler", "--once", "--cluster", "r1", stdout=out)

    assert "r1: moved 1" in out.getvalue()
    entries = rocketmq_connection.client.xrange(rocketmq_connection.keys.stream("later"))
    assert [decode(fields).message_id for _id, fields in entries] == [due.message_id]


def test_a_loop_run_moves_messages_until_its_time_is_up(make_cluster, rocketmq_connection):
    make_cluster("rocketmq", name="r2", service_url=SHARED_URL.format(db=LIBRARY_DB),
                 options={"key_prefix": rocketmq_connection.keys.prefix})
    message = prepared(Message(topic="later", body=b"soon"))
    delay_store(rocketmq_connection, message, now_ms() + 300)
    call_command("rocketmq_scheduler", "--cluster", "r2", "--seconds", "1.5", stdout=io.StringIO())
    assert rocketmq_connection.client.xlen(rocketmq_connection.keys.stream("later")) == 1


def test_an_unreachable_cluster_is_reported_not_fatal(make_cluster):
    make_cluster("rocketmq", name="gone", service_url=f"redis://127.0.0.1:{free_port()}/6")
    err = io.StringIO()
    call_command("rocketmq_scheduler", "--once", "--cluster", "gone", stdout=io.StringIO(), stderr=err)
    assert "gone:" in err.getvalue() and "unreachable" in err.getvalue()


def test_an_unknown_cluster_name_is_a_clear_error(db):
    with pytest.raises(CommandError, match="no RocketMQ-style cluster named nope"):
        call_command("rocketmq_scheduler", "--once", "--cluster", "nope")
