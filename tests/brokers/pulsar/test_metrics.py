"""Inventory from a broker's Prometheus metrics, in pulsar-lite's and Pulsar's label styles.

The samples below are the shapes both brokers print (trimmed): pulsar-lite labels a
topic by its local name next to a `namespace` label, a Pulsar broker by its full name.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from brokers.base import BrokerError, ClusterConfig
from brokers.pulsar.adapter import PROBLEM_DLQ_UNSUBSCRIBED, PulsarAdapter
from brokers.pulsar.admin import BrokerMetrics, metrics_parse
from brokers.pulsar.embedded import free_port

LITE = """\
# HELP pulsar_subscriptions_count Number of subscriptions
pulsar_subscriptions_count{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="orders"} 1
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="billing",topic="orders"} 7
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="reader-a992b0",topic="orders"} 0
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="bad name",topic="orders"} 0
pulsar_storage_size{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="orders-billing-RETRY"} 0
pulsar_subscriptions_count{cluster="pulsar-lite",namespace="public/default",partition="-1",topic="orders-billing-DLQ"} 0
pulsar_subscription_back_log{cluster="pulsar-lite",namespace="public/default",partition="-1",subscription="redrive",topic="orders-billing-DLQ"} 3
pulsar_broker_msg_backlog 0
"""  # noqa: E501 - sample lines as the broker prints them

PULSAR = """\
pulsar_subscriptions_count{cluster="standalone",namespace="shop/orders",topic="persistent://shop/orders/created"} 1
pulsar_subscription_back_log{cluster="standalone",namespace="shop/orders",topic="persistent://shop/orders/created",subscription="billing"} 12
"""  # noqa: E501 - sample lines as the broker prints them


def test_lite_and_pulsar_label_styles_give_full_topic_names():
    lite = metrics_parse(LITE)
    assert "persistent://public/default/orders-billing-RETRY" in lite.topics
    assert lite.backlogs[("persistent://public/default/orders", "billing")] == 7
    assert lite.subscription_counts["persistent://public/default/orders-billing-DLQ"] == 0
    pulsar = metrics_parse(PULSAR)
    assert pulsar.backlogs == {("persistent://shop/orders/created", "billing"): 12}


@pytest.fixture
def metrics_server():
    body = {"text": LITE}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            raw = body["text"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", body
    server.shutdown()
    server.server_close()


def test_a_dlq_whose_subscription_count_is_zero_is_unsubscribed_despite_a_stale_backlog_line(metrics_server):
    """pulsar-lite keeps a removed subscription's backlog line; the count is current."""
    url, _ = metrics_server
    config = ClusterConfig(kind="pulsar", name="m", service_url="pulsar://127.0.0.1:1",
                           options={"metrics_url": url})
    with PulsarAdapter(config) as adapter:
        listed = adapter.list_subscriptions()
    # Readers, the console's own DLQ subscription and names that cannot form topic
    # names are not listed as consumer subscriptions.
    assert [(s.name, s.source) for s in listed] == [("billing", "persistent://public/default/orders")]
    [billing] = listed
    assert billing.problems == (PROBLEM_DLQ_UNSUBSCRIBED,)
    assert billing.backlog == 7
    assert billing.details["inventory"] == "broker metrics"


def test_unreadable_metrics_are_a_transient_error():
    with pytest.raises(BrokerError) as caught:
        BrokerMetrics(f"http://127.0.0.1:{free_port()}/metrics", timeout=2).snapshot()
    assert not caught.value.permanent


def test_a_metrics_url_that_is_not_http_is_refused():
    with pytest.raises(BrokerError) as caught:
        BrokerMetrics("file:///etc/passwd")
    assert caught.value.permanent
