"""The admin REST client and admin-based inventory/rebuild, against recorded responses.

pulsar-lite has no admin REST API, so these tests serve responses recorded from a
Pulsar 3.x/4.x broker (`/admin/v2`) from a small local HTTP server. It keeps the state
those responses describe (topics, subscriptions) so that rebuild's PUTs show up in
later GETs, like on the real broker. What this cannot cover: authorisation rules of a
real broker beyond a 401, partitioned-topic metadata and the broker's own validation
of the PUT bodies.

Shapes (trimmed to the fields the console reads; a real broker sends many more):

    GET  /admin/v2/brokers/version                  200 text: 3.3.2
    GET  /admin/v2/tenants                          200 ["public", "pulsar", "shop"]
    GET  /admin/v2/namespaces/{tenant}              200 ["shop/orders"]
    GET  /admin/v2/persistent/{tenant}/{ns}         200 ["persistent://shop/orders/created", ...]
    GET  /admin/v2/persistent/{t}/{ns}/{topic}/stats
         200 {"msgRateIn": 0.0, ..., "publishers": [], "subscriptions": {
                "billing": {"msgBacklog": 12, "type": "Shared", "isDurable": true,
                            "consumers": [{"consumerName": "c1", ...}], ...},
                "reader-5c1e0a": {"msgBacklog": 0, "type": "Exclusive", "isDurable": false, ...}}}
         404 {"reason": "Topic not found"}
    PUT  /admin/v2/persistent/{t}/{ns}/{topic}      204; 409 {"reason": "This topic already exists"}
    PUT  .../{topic}/subscription/{sub}
         body {"ledgerId": -1, "entryId": -1, "partitionIndex": -1} (the earliest message)
         204; 409 {"reason": "Subscription already exists for topic"}
    any, without a valid token                      401 (Jetty HTML page or {"reason": ...})
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from brokers.base import BrokerError, ClusterConfig, KnownSubscription
from brokers.pulsar.adapter import (
    PROBLEM_DLQ_MISSING,
    PROBLEM_DLQ_UNSUBSCRIBED,
    PROBLEM_RETRY_MISSING,
    PulsarAdapter,
)
from brokers.pulsar.admin import PulsarAdmin
from brokers.pulsar.embedded import free_port

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXJvbGU.s3cr3t"
SOURCE = "persistent://shop/orders/created"
RETRY = "persistent://shop/orders/created-billing-RETRY"
DLQ = "persistent://shop/orders/created-billing-DLQ"


def subscription_stats(backlog: int, *, durable: bool = True, type_: str = "Shared", consumers: int = 1):
    return {
        "msgRateOut": 0.0, "msgThroughputOut": 0.0, "bytesOutCounter": 0, "msgOutCounter": 0,
        "msgRateRedeliver": 0.0, "messageAckRate": 0.0, "chunkedMessageRate": 0,
        "msgBacklog": backlog, "backlogSize": 0, "earliestMsgPublishTimeInBacklog": 0,
        "msgBacklogNoDelayed": backlog, "blockedSubscriptionOnUnackedMsgs": False, "msgDelayed": 0,
        "unackedMessages": 0, "type": type_, "msgRateExpired": 0.0, "totalMsgExpired": 0,
        "lastExpireTimestamp": 0, "lastConsumedFlowTimestamp": 0, "lastConsumedTimestamp": 0,
        "lastAckedTimestamp": 0, "lastMarkDeleteAdvancedTimestamp": 0,
        "consumers": [{"msgRateOut": 0.0, "consumerName": f"c{i}", "availablePermits": 1000,
                       "unackedMessages": 0, "address": "/10.0.0.7:51234",
                       "connectedSince": "2025-03-01T10:00:00.000Z",
                       "clientVersion": "Pulsar-CPP-v3.7.0"} for i in range(consumers)],
        "isDurable": durable, "isReplicated": False, "allowOutOfOrderDelivery": False,
        "consumersAfterMarkDeletePosition": {}, "nonContiguousDeletedMessagesRanges": 0,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0, "delayedMessageIndexSizeInBytes": 0,
        "subscriptionProperties": {}, "filterProcessedMsgCount": 0,
    }


def topic_stats(subscriptions: dict) -> dict:
    return {
        "msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": 0.0, "msgThroughputOut": 0.0,
        "bytesInCounter": 2048, "msgInCounter": 20, "bytesOutCounter": 0, "msgOutCounter": 0,
        "averageMsgSize": 0.0, "msgChunkPublished": False, "storageSize": 2048, "backlogSize": 1024,
        "publishRateLimitedTimes": 0, "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": 0, "waitingPublishers": 0, "publishers": [],
        "subscriptions": subscriptions, "replication": {}, "deduplicationStatus": "Disabled",
        "nonContiguousDeletedMessagesRanges": 0, "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "delayedMessageIndexSizeInBytes": 0, "compaction": {"lastCompactionRemovedEventCount": 0},
        "ownerBroker": "broker-0.pulsar:8080",
    }


class RecordedAdmin:
    """The state behind the recorded responses, and the requests seen."""

    def __init__(self) -> None:
        self.topics: dict[str, dict] = {
            SOURCE: {"billing": subscription_stats(12, consumers=2),
                     "reader-5c1e0a": subscription_stats(0, durable=False, type_="Exclusive")},
            RETRY: {"billing": subscription_stats(3)},
            DLQ: {"redrive": subscription_stats(5, consumers=0)},
            "persistent://shop/orders/paid": {"shipping": subscription_stats(0, type_="Key_Shared")},
        }
        self.requests: list[tuple[str, str, object]] = []
        self.mode = "ok"  # or "html", "unauthorized"


@pytest.fixture
def recorded():
    state = RecordedAdmin()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code: int, body: object = None, content_type: str = "application/json"):
            raw = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
            self.send_response(code)
            if raw:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _answer(self, method: str):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            path = urllib.parse.unquote(self.path)
            state.requests.append((method, path, body))
            if state.mode == "html":
                return self._send(200, b"<!DOCTYPE html><html><body>Sign in</body></html>", "text/html")
            if state.mode == "unauthorized" or self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._send(401, b"<html><body><h2>HTTP ERROR 401 Authentication required</h2>"
                                       b"</body></html>", "text/html;charset=iso-8859-1")
            parts = path.split("/")[3:]  # after /admin/v2/
            if method == "GET" and parts == ["brokers", "version"]:
                return self._send(200, b"3.3.2", "application/json")
            if method == "GET" and parts == ["tenants"]:
                return self._send(200, ["public", "pulsar", "shop"])
            if method == "GET" and parts[0] == "namespaces" and len(parts) == 2:
                namespaces = {"shop": ["shop/orders"], "public": ["public/default"]}
                return self._send(200, namespaces.get(parts[1], []))
            if parts[0] != "persistent":
                return self._send(404, {"reason": "Not found"})
            if method == "GET" and len(parts) == 3:
                prefix = f"persistent://{parts[1]}/{parts[2]}/"
                return self._send(200, sorted(t for t in state.topics if t.startswith(prefix)))
            topic = "persistent://" + "/".join(parts[1:4])
            if method == "GET" and parts[4:] == ["stats"]:
                if topic not in state.topics:
                    return self._send(404, {"reason": "Topic not found"})
                return self._send(200, topic_stats(state.topics[topic]))
            if method == "PUT" and len(parts) == 4:
                if topic in state.topics:
                    return self._send(409, {"reason": "This topic already exists"})
                state.topics[topic] = {}
                return self._send(204)
            if method == "PUT" and parts[4] == "subscription":
                if topic not in state.topics:
                    state.topics[topic] = {}  # the broker auto-creates the topic here
                if parts[5] in state.topics[topic]:
                    return self._send(409, {"reason": "Subscription already exists for topic"})
                state.topics[topic][parts[5]] = subscription_stats(0, consumers=0)
                return self._send(204)
            return self._send(405, {"reason": "Method not allowed"})

        def do_GET(self):
            self._answer("GET")

        def do_PUT(self):
            self._answer("PUT")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def adapter_for_recorded(recorded, pulsar_broker, *, token=TOKEN, known=(), **options):
    return PulsarAdapter(ClusterConfig(
        kind="pulsar", name="recorded", service_url=pulsar_broker.service_url, admin_url=recorded.url,
        token=token, options=options, known_subscriptions=known, timeout_seconds=5))


def by_name(adapter):
    return {(s.name, s.source): s for s in adapter.list_subscriptions()}


def test_inventory_lists_subscriptions_with_type_backlogs_and_consumers(recorded, pulsar_broker):
    listed = by_name(adapter_for_recorded(recorded, pulsar_broker))
    billing = listed[("billing", SOURCE)]
    assert (billing.mode, billing.retry_queue, billing.dead_letter_queue) == ("Shared", RETRY, DLQ)
    assert (billing.backlog, billing.retry_depth, billing.dead_letter_depth) == (12, 3, 5)
    assert billing.consumers == 2
    assert billing.healthy
    assert billing.details["inventory"] == "admin API"


def test_readers_and_the_consoles_dlq_subscription_are_not_listed_as_subscriptions(recorded, pulsar_broker):
    names = {name for name, _ in by_name(adapter_for_recorded(recorded, pulsar_broker))}
    assert names == {"billing", "shipping"}


def test_missing_retry_topic_dlq_and_dlq_subscription_are_reported(recorded, pulsar_broker):
    listed = by_name(adapter_for_recorded(recorded, pulsar_broker))
    shipping = listed[("shipping", "persistent://shop/orders/paid")]
    assert shipping.mode == "Key_Shared"
    assert set(shipping.problems) == {PROBLEM_RETRY_MISSING, PROBLEM_DLQ_MISSING, PROBLEM_DLQ_UNSUBSCRIBED}

    del recorded.topics[DLQ]["redrive"]
    billing = by_name(adapter_for_recorded(recorded, pulsar_broker))[("billing", SOURCE)]
    assert billing.problems == (PROBLEM_DLQ_UNSUBSCRIBED,)


def test_rebuild_plans_per_naming_version_then_creates_and_is_idempotent(recorded, pulsar_broker):
    adapter = adapter_for_recorded(recorded, pulsar_broker, naming_version="2.6")
    plan = adapter.plan_rebuild("shipping")
    targets = [(s.action, s.target) for s in plan.steps]
    assert targets == [("create topic", "persistent://shop/orders/shipping-retry"),
                       ("create topic", "persistent://shop/orders/shipping-dlq"),
                       ("create subscription", "persistent://shop/orders/shipping-dlq")]
    assert not any(method == "PUT" for method, _, _ in recorded.requests)  # planning changes nothing

    done = adapter.apply_rebuild(plan)
    assert done.steps == plan.steps
    puts = [(path, body) for method, path, body in recorded.requests if method == "PUT"]
    assert puts == [
        ("/admin/v2/persistent/shop/orders/shipping-retry", None),
        ("/admin/v2/persistent/shop/orders/shipping-dlq", None),
        ("/admin/v2/persistent/shop/orders/shipping-dlq/subscription/redrive",
         {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}),
    ]
    assert adapter.plan_rebuild("shipping").steps == ()
    recorded.requests.clear()
    assert adapter.apply_rebuild(plan).steps == ()
    assert not any(method == "PUT" for method, _, _ in recorded.requests)
    assert by_name(adapter)[("shipping", "persistent://shop/orders/paid")].healthy


def test_a_registered_subscription_the_broker_does_not_have_is_flagged(recorded, pulsar_broker):
    known = (KnownSubscription("audit", "persistent://shop/orders/created", "Shared"),)
    listed = by_name(adapter_for_recorded(recorded, pulsar_broker, known=known))
    assert "subscription not found on the broker" in listed[("audit", SOURCE)].problems


def test_check_connection_names_the_admin_version(recorded, pulsar_broker):
    assert "3.3.2" in adapter_for_recorded(recorded, pulsar_broker).check_connection()


def test_an_admin_url_answering_html_is_a_clear_permanent_error(recorded, pulsar_broker):
    recorded.mode = "html"
    with pytest.raises(BrokerError) as caught:
        adapter_for_recorded(recorded, pulsar_broker).list_subscriptions()
    assert caught.value.permanent
    assert "HTML" in caught.value.message and "admin URL" in caught.value.message


def test_a_401_is_a_permanent_credentials_error_that_does_not_show_the_token(recorded, pulsar_broker):
    with pytest.raises(BrokerError) as caught:
        adapter_for_recorded(recorded, pulsar_broker, token="wrong-token").list_subscriptions()
    assert caught.value.permanent
    assert "401" in caught.value.message
    assert "wrong-token" not in caught.value.message and TOKEN not in caught.value.message


def test_an_unreachable_admin_url_is_a_transient_error():
    admin = PulsarAdmin(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(BrokerError) as caught:
        admin.tenants()
    assert not caught.value.permanent


@pytest.mark.parametrize("url", ["ftp://broker/admin", "file:///etc/passwd", "broker:8080"])
def test_an_admin_url_that_is_not_http_is_refused(url):
    with pytest.raises(BrokerError) as caught:
        PulsarAdmin(url)
    assert caught.value.permanent


def test_rebuild_of_an_unknown_subscription_is_a_permanent_error(recorded, pulsar_broker):
    with pytest.raises(BrokerError) as caught:
        adapter_for_recorded(recorded, pulsar_broker).plan_rebuild("nobody")
    assert caught.value.permanent


def test_credentials_written_into_the_admin_url_are_sent_as_basic_auth_and_never_shown():
    admin = PulsarAdmin(f"http://ops:hunter2@127.0.0.1:{free_port()}", timeout=2)
    assert admin.base_url.startswith("http://127.0.0.1:")
    with pytest.raises(BrokerError) as caught:
        admin.tenants()
    assert "hunter2" not in caught.value.message and "ops:" not in caught.value.message
    with pytest.raises(BrokerError) as refused:
        PulsarAdmin("ftp://ops:hunter2@host/admin")
    assert "hunter2" not in refused.value.message
