"""The dead-letter archive: storing, filtering, showing, discarding."""

from __future__ import annotations

import json
from datetime import timedelta

from django.utils import timezone

from brokers.base import DeadLetter as BrokerDeadLetter
from console.archive.models import DeadLetter
from console.archive.payloads import payload_view
from console.archive.selectors import dead_letter_list
from console.archive.services import archive_store, dead_letters_discard
from console.audit.models import AuditEntry

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="alert(1)">'


def letter(i: int, **overrides) -> BrokerDeadLetter:
    fields = {"broker_message_id": f"b-{i}", "subscription": "orders-sub", "source": "orders",
              "payload": f'{{"n": {i}}}'.encode(), "properties": {"error": "Timeout"}, "retry_count": 16}
    return BrokerDeadLetter(**{**fields, **overrides})


def test_storing_the_same_messages_twice_keeps_one_row_each(make_cluster):
    cluster = make_cluster()
    assert archive_store(cluster=cluster, letters=[letter(1), letter(2)]) == 2
    # A crash between commit and ack makes the broker deliver these again.
    assert archive_store(cluster=cluster, letters=[letter(1), letter(2), letter(3)]) == 1
    assert DeadLetter.objects.filter(cluster=cluster).count() == 3


def test_the_same_broker_id_on_two_clusters_is_two_letters(make_cluster):
    first, second = make_cluster(), make_cluster()
    archive_store(cluster=first, letters=[letter(1)])
    archive_store(cluster=second, letters=[letter(1)])
    assert DeadLetter.objects.count() == 2


def test_store_keeps_every_field(make_cluster):
    cluster = make_cluster()
    failed = timezone.now() - timedelta(hours=1)
    archive_store(cluster=cluster, letters=[letter(
        7, payload=b"\x00\xffbinary", properties={"k": HOSTILE}, retry_count=5,
        origin_message_id="origin-7", first_failure_at=failed, last_failure_at=failed)])
    row = DeadLetter.objects.get()
    assert bytes(row.payload) == b"\x00\xffbinary"
    assert row.payload_size == 8
    assert row.properties == {"k": HOSTILE}
    assert (row.retry_count, row.origin_message_id, row.state) == (5, "origin-7", "parked")
    assert row.first_failure_at == failed


def test_filters_combine(make_cluster, make_dead_letters):
    cluster, other = make_cluster(), make_cluster()
    make_dead_letters(cluster, 3, subscription="orders-sub", properties={"error": "Timeout"})
    make_dead_letters(cluster, 2, subscription="billing", properties={"error": "Refused"})
    make_dead_letters(other, 4, subscription="orders-sub")
    assert dead_letter_list(cluster=cluster.pk).count() == 5
    assert dead_letter_list(cluster=cluster.pk, subscription="orders-sub").count() == 3
    assert dead_letter_list(property=("error", "Refused")).count() == 2
    assert dead_letter_list(property=("error", "nope")).count() == 0
    assert dead_letter_list(property=("'; DROP TABLE x; --", "v")).count() == 0
    assert dead_letter_list(state="replayed").count() == 0
    assert dead_letter_list(since=timezone.now() + timedelta(minutes=1)).count() == 0


def test_text_filter_searches_payloads_and_ids(make_cluster, make_dead_letters):
    cluster = make_cluster()
    make_dead_letters(cluster, 2, payload=b'{"customer": "ACME corp"}')
    [plain] = make_dead_letters(cluster, 1, payload=b"other")
    assert dead_letter_list(text="acme").count() == 2
    assert list(dead_letter_list(text=plain.broker_message_id)) == [plain]


def test_archive_page_filters_and_pages(client_as, viewer, make_cluster, make_dead_letters, settings):
    settings.ARCHIVE_PAGE_SIZE = 5
    cluster = make_cluster()
    make_dead_letters(cluster, 12, subscription="orders-sub")
    make_dead_letters(cluster, 3, subscription="billing")
    client = client_as(viewer)
    page = client.get("/archive/", {"cluster": cluster.pk, "subscription": "orders-sub"})
    assert b"12 dead letters" in page.content
    assert b"page 1 of 3" in page.content
    second = client.get("/archive/", {"cluster": cluster.pk, "subscription": "orders-sub", "page": 2})
    assert b"page 2 of 3" in second.content


def test_archive_htmx_request_gets_only_the_results_fragment(client_as, viewer, make_cluster,
                                                             make_dead_letters):
    make_dead_letters(make_cluster(), 2)
    response = client_as(viewer).get("/archive/", {"state": "parked"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.strip().startswith('<div id="results">')
    assert "<html" not in body


def test_malformed_filters_get_a_clear_message_not_an_error(client_as, viewer):
    client = client_as(viewer)
    for query in ({"property": "no-equals-sign"}, {"state": "exploded"}, {"since": "yesterday-ish"},
                  {"cluster": "abc"}, {"page": "-3"}):
        response = client.get("/archive/", query)
        assert response.status_code == 200, query
    body = client.get("/archive/", {"property": "no-equals-sign"}).content
    assert b"key=value" in body


def test_dead_letter_page_escapes_hostile_strings(client_as, viewer, make_cluster):
    cluster = make_cluster()
    archive_store(cluster=cluster, letters=[letter(1, payload=HOSTILE.encode(),
                                                   properties={HOSTILE: HOSTILE})])
    row = DeadLetter.objects.get()
    body = client_as(viewer).get(f"/archive/{row.pk}/").content.decode()
    assert HOSTILE not in body
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in body


def test_dead_letter_page_shows_json_pretty_and_every_property(client_as, viewer, make_cluster):
    cluster = make_cluster()
    archive_store(cluster=cluster, letters=[letter(1, payload=b'{"order":{"id":42}}',
                                                   properties={"REAL_TOPIC": "orders", "x": "1"})])
    row = DeadLetter.objects.get()
    body = client_as(viewer).get(f"/archive/{row.pk}/").content.decode()
    assert '&quot;order&quot;: {\n    &quot;id&quot;: 42' in body
    assert "REAL_TOPIC" in body and "16" in body


def test_payload_view_picks_json_text_or_hex():
    assert payload_view(b'{"a": 1}').kind == "json"
    assert json.loads(payload_view(b'{"a": 1}').text) == {"a": 1}
    assert payload_view("héllo wörld".encode()).kind == "text"
    binary = payload_view(bytes(range(256)))
    assert binary.kind == "binary"
    assert binary.text.startswith("00000000  00 01 02")
    assert payload_view(b"\xff\xfe\xfa").kind == "binary"


def test_huge_payload_is_shown_in_part(make_cluster, client_as, viewer):
    cluster = make_cluster()
    archive_store(cluster=cluster, letters=[letter(1, payload=b"x" * (5 * 1024 * 1024))])
    row = DeadLetter.objects.get()
    assert row.payload_size == 5 * 1024 * 1024
    assert len(row.payload_preview) == DeadLetter.PREVIEW_CHARS
    response = client_as(viewer).get(f"/archive/{row.pk}/")
    assert response.status_code == 200
    assert b"shown in part" in response.content
    assert len(response.content) < 1024 * 1024


def test_unknown_dead_letter_is_404(client_as, viewer):
    assert client_as(viewer).get("/archive/424242/").status_code == 404


def test_operator_discards_a_selection_and_it_is_audited(client_as, operator, make_cluster,
                                                         make_dead_letters):
    cluster = make_cluster(name="east")
    letters = make_dead_letters(cluster, 3)
    response = client_as(operator).post("/archive/discard/", {
        "ids": [letters[0].pk, letters[1].pk], "reason": "known bad data", "next": "/archive/"})
    assert response.status_code == 302
    states = dict(DeadLetter.objects.values_list("pk", "state"))
    assert states[letters[0].pk] == states[letters[1].pk] == "discarded"
    assert states[letters[2].pk] == "parked"
    entry = AuditEntry.objects.get(action="archive.discard")
    assert (entry.actor_name, entry.cluster_name, entry.subscription, entry.count) == (
        operator.username, "east", "orders-sub", 2)
    assert entry.detail == "known bad data"


def test_discard_redirect_never_leaves_the_site(client_as, operator, make_cluster, make_dead_letters):
    [row] = make_dead_letters(make_cluster(), 1)
    response = client_as(operator).post("/archive/discard/", {"ids": [row.pk],
                                                              "next": "https://evil.example/"})
    assert response["Location"] == "/archive/"


def test_discard_ignores_letters_already_replayed(make_cluster, make_dead_letters, operator):
    [row] = make_dead_letters(make_cluster(), 1)
    DeadLetter.objects.filter(pk=row.pk).update(state="replayed")
    assert dead_letters_discard(letter_ids=[row.pk, 99999], actor=operator) == 0
    assert DeadLetter.objects.get(pk=row.pk).state == "replayed"


def test_nul_characters_in_properties_do_not_block_the_archive(make_cluster):
    """PostgreSQL text cannot hold NUL: it is stored as U+FFFD, the payload keeps its bytes."""
    cluster = make_cluster()
    archive_store(cluster=cluster, letters=[letter(1, payload=b"a\x00b", properties={"k\x00": "v\x00"})])
    row = DeadLetter.objects.get()
    assert bytes(row.payload) == b"a\x00b"
    assert row.properties == {"k\ufffd": "v\ufffd"}


def test_rocketmq_dead_letter_page_shows_the_retry_schedule_it_followed(client_as, viewer, make_cluster):
    """Levels 3.. of the 18-level table: retry 1 waited 10 s, retry 2 30 s, then the DLQ."""
    cluster = make_cluster("rocketmq", service_url="redis://127.0.0.1:6379/5")
    first_failure_ms = 1_763_700_000_000  # 2025-11-21 04:40:00 UTC
    archive_store(cluster=cluster, letters=[letter(
        1, properties={"FIRST_FAILURE_AT": str(first_failure_ms), "RECONSUME_TIMES": "3"})])
    row = DeadLetter.objects.get()
    body = client_as(viewer).get(f"/archive/{row.pk}/").content.decode()
    table = body[body.index('id="retry-schedule"'):body.index("</table>", body.index('id="retry-schedule"'))]
    assert table.count("<tr>") == 4  # header + two retries + the DLQ
    assert "10 s" in table and "30 s" in table
    assert "2025-11-21 04:40:10" in table and "2025-11-21 04:40:40" in table
    assert "the DLQ" in table and "waits for an operator" in table


def test_other_brokers_dead_letters_show_no_rocketmq_schedule(client_as, viewer, make_cluster):
    cluster = make_cluster("rabbitmq")
    properties = {"FIRST_FAILURE_AT": "1", "RECONSUME_TIMES": "3"}
    archive_store(cluster=cluster, letters=[letter(1, properties=properties)])
    row = DeadLetter.objects.get()
    assert b"retry-schedule" not in client_as(viewer).get(f"/archive/{row.pk}/").content
