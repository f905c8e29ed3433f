"""The archive over the API: the page's filters, paging, one letter with its payload,
and discarding a selection."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from console.archive.models import DeadLetter
from console.audit.models import AuditEntry


@pytest.fixture
def viewer_api(api_client_as, viewer):
    return api_client_as(viewer)


@pytest.fixture
def archive(make_cluster, make_dead_letters):
    """Two clusters, two subscriptions, letters in several states and collected at known times."""
    east, west = make_cluster("rabbitmq", name="east"), make_cluster("pulsar", name="west")
    orders = make_dead_letters(east, 3, subscription="orders-sub",
                               properties={"error": "TimeoutException", "tenant": "acme"})
    billing = make_dead_letters(east, 2, subscription="billing-sub", properties={"error": "Refused"})
    remote = make_dead_letters(west, 1, subscription="orders-sub",
                               payload=b'{"needle": "find-me-please"}', properties={"error": "a=b"})
    DeadLetter.objects.filter(pk=billing[0].pk).update(state=DeadLetter.STATE_DISCARDED)
    DeadLetter.objects.filter(pk=orders[0].pk).update(collected_at=datetime(2025, 1, 1, tzinfo=UTC))
    DeadLetter.objects.filter(pk=orders[1].pk).update(collected_at=datetime(2025, 6, 1, tzinfo=UTC))
    return {"east": east, "west": west, "orders": orders, "billing": billing, "remote": remote}


def ids_of(response) -> set[int]:
    assert response.status_code == 200, response.content[:500]
    return {row["id"] for row in response.json()["results"]}


def test_listing_returns_every_letter_newest_first_with_a_count(viewer_api, archive):
    response = viewer_api.get("/api/v1/dead-letters/")
    body = response.json()
    assert body["count"] == 6
    collected = [row["collected_at"] for row in body["results"]]
    assert collected == sorted(collected, reverse=True)
    assert {"payload", "password"}.isdisjoint(body["results"][0])
    assert body["results"][0]["cluster_name"] in ("east", "west")


def test_filters_by_cluster_subscription_and_state(viewer_api, archive):
    east, orders, billing = archive["east"], archive["orders"], archive["billing"]
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"cluster": east.pk})) == {
        x.pk for x in orders + billing}
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"subscription": "orders-sub"})) == {
        x.pk for x in orders + archive["remote"]}
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"state": "discarded"})) == {billing[0].pk}
    assert ids_of(viewer_api.get("/api/v1/dead-letters/",
                                 {"cluster": east.pk, "subscription": "billing-sub", "state": "parked"})
                  ) == {billing[1].pk}


def test_filters_by_text_in_the_payload_or_a_message_id(viewer_api, archive):
    remote, orders = archive["remote"][0], archive["orders"][0]
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"text": "FIND-ME"})) == {remote.pk}
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"text": orders.origin_message_id})) == {orders.pk}
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"text": "nothing like this"})) == set()


def test_filters_by_a_property_key_and_value(viewer_api, archive):
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"property": "error=Refused"})) == {
        x.pk for x in archive["billing"]}
    # Only the first "=" separates key from value.
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"property": "error=a=b"})) == {
        archive["remote"][0].pk}
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"property": "tenant=other"})) == set()
    # A hostile key is data, not SQL.
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"property": "x') OR 1=1 --=y"})) == set()


def test_filters_by_collection_time(viewer_api, archive):
    first, second = archive["orders"][0], archive["orders"][1]
    window = {"since": "2024-12-31T00:00:00Z", "until": "2025-03-01T00:00:00Z"}
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", window)) == {first.pk}
    assert ids_of(viewer_api.get("/api/v1/dead-letters/", {"until": "2025-12-31T00:00:00Z"})) == {
        first.pk, second.pk}
    assert first.pk not in ids_of(viewer_api.get("/api/v1/dead-letters/", {"since": "2025-02-01T00:00:00Z"}))


@pytest.mark.parametrize(("query", "field"), [
    ({"state": "lost"}, "state"),
    ({"property": "no-equals-sign"}, "property"),
    ({"property": "=value-without-key"}, "property"),
    ({"since": "yesterday"}, "since"),
    ({"until": "2025-13-45"}, "until"),
    ({"since": "2025-06-01T00:00:00Z", "until": "2025-01-01T00:00:00Z"}, "non_field_errors"),
    ({"cluster": "east"}, "cluster"),
    ({"cluster": "0"}, "cluster"),
    ({"text": "x" * 501}, "text"),
    ({"text": "a\x00b"}, "text"),
    ({"property": "k\x00=v"}, "property"),
    ({"subscription": "\x00"}, "subscription"),
])
def test_malformed_filters_are_a_400_saying_which(viewer_api, archive, query, field):
    response = viewer_api.get("/api/v1/dead-letters/", query)
    assert response.status_code == 400
    body = response.json()
    assert field in body and body[field] and all(isinstance(m, str) for m in body[field])


def test_pages_through_a_large_selection(viewer_api, make_cluster, make_dead_letters):
    make_dead_letters(make_cluster(), 7)
    first = viewer_api.get("/api/v1/dead-letters/", {"page_size": 3}).json()
    last = viewer_api.get("/api/v1/dead-letters/", {"page_size": 3, "page": 3}).json()
    assert first["count"] == 7 and len(first["results"]) == 3 and first["next"]
    assert len(last["results"]) == 1 and last["next"] is None
    beyond = viewer_api.get("/api/v1/dead-letters/", {"page_size": 3, "page": 9})
    assert beyond.status_code == 404 and beyond.json()["error"]


def test_one_dead_letter_comes_with_everything_the_page_shows(viewer_api, make_cluster, make_dead_letters):
    [letter] = make_dead_letters(make_cluster(name="c1"), 1, payload=b'{"order":42}',
                                 properties={"error": "<img src=x onerror=alert(1)>", "tenant": "acme"},
                                 retry_count=16)
    first_failure = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    DeadLetter.objects.filter(pk=letter.pk).update(first_failure_at=first_failure,
                                                   last_failure_at=first_failure)
    body = viewer_api.get(f"/api/v1/dead-letters/{letter.pk}/").json()
    assert base64.b64decode(body["payload"]) == b'{"order":42}'
    assert body["display"] == {"kind": "json", "text": '{\n  "order": 42\n}', "size": 12, "truncated": False}
    # Hostile strings are returned as data: escaping is the displaying page's job.
    assert body["properties"] == {"error": "<img src=x onerror=alert(1)>", "tenant": "acme"}
    assert body["retry_count"] == 16
    assert body["origin_message_id"] == letter.origin_message_id
    assert body["broker_message_id"] == letter.broker_message_id
    assert body["first_failure_at"] == "2025-03-01T12:00:00Z"
    assert body["state"] == "parked" and body["cluster_name"] == "c1"


def test_a_binary_payload_round_trips_exactly_and_shows_as_hex(viewer_api, make_cluster, make_dead_letters):
    raw = bytes(range(256)) * 3
    [letter] = make_dead_letters(make_cluster(), 1, payload=raw)
    body = viewer_api.get(f"/api/v1/dead-letters/{letter.pk}/").json()
    assert base64.b64decode(body["payload"]) == raw
    assert body["display"]["kind"] == "binary" and body["display"]["size"] == len(raw)
    assert body["display"]["text"].startswith("00000000  00 01 02")


def test_a_huge_payload_is_returned_whole_but_displayed_truncated(viewer_api, make_cluster,
                                                                  make_dead_letters):
    raw = b"x" * (300 * 1024)
    [letter] = make_dead_letters(make_cluster(), 1, payload=raw)
    body = viewer_api.get(f"/api/v1/dead-letters/{letter.pk}/").json()
    assert base64.b64decode(body["payload"]) == raw
    assert body["display"]["truncated"] is True and len(body["display"]["text"]) < len(raw)


@pytest.mark.parametrize("path", ["dead-letters/{missing}/", "dead-letters/abc/",
                                  "dead-letters/99999999999999999999999/"])
def test_unknown_dead_letter_ids_are_a_json_404(viewer_api, make_cluster, make_dead_letters, path):
    [letter] = make_dead_letters(make_cluster(), 1)
    response = viewer_api.get("/api/v1/" + path.format(missing=letter.pk + 1000))
    assert response.status_code == 404
    assert response.json()["error"]


def test_an_operator_discards_a_selection_and_it_is_audited_per_subscription(
        api_client_as, operator, archive):
    chosen = [archive["orders"][0].pk, archive["orders"][1].pk, archive["billing"][1].pk]
    already_discarded = archive["billing"][0].pk
    missing = max(chosen) + 1000
    response = api_client_as(operator).post(
        "/api/v1/dead-letters/discard/",
        {"ids": [*chosen, chosen[0], already_discarded, missing], "reason": "poison messages"},
        format="json")
    assert response.status_code == 200
    assert response.json() == {"requested": 5, "discarded": 3}
    states = dict(DeadLetter.objects.filter(pk__in=chosen).values_list("pk", "state_reason"))
    assert states == dict.fromkeys(chosen, "poison messages")
    assert set(DeadLetter.objects.filter(pk__in=chosen).values_list("state", flat=True)) == {"discarded"}
    archive["orders"][2].refresh_from_db()
    assert archive["orders"][2].state == "parked"
    entries = {e.subscription: e for e in AuditEntry.objects.filter(action="archive.discard")}
    assert set(entries) == {"orders-sub", "billing-sub"}
    assert (entries["orders-sub"].count, entries["billing-sub"].count) == (2, 1)
    assert entries["orders-sub"].actor_name == operator.username
    assert entries["orders-sub"].cluster_name == "east"
    assert entries["orders-sub"].detail == "poison messages"


@pytest.mark.parametrize("body", [{}, {"ids": []}, {"ids": ["one"]}, {"ids": [0]}, {"ids": "1,2"},
                                  {"ids": [1], "reason": "r" * 501}, {"ids": [1], "reason": "a\x00"}])
def test_a_malformed_discard_is_a_400_and_changes_nothing(api_client_as, operator, archive, body):
    response = api_client_as(operator).post("/api/v1/dead-letters/discard/", body, format="json")
    assert response.status_code == 400
    assert DeadLetter.objects.filter(state="discarded").count() == 1
    assert not AuditEntry.objects.exists()
