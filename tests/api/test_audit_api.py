"""The audit log over the API: admin only, filtered like the page, exported as CSV."""

from __future__ import annotations

import csv
import io

import pytest

from console.audit.services import audit_record


@pytest.fixture
def entries(admin_user, operator, make_cluster):
    cluster = make_cluster(name="prod")
    audit_record(actor=operator, action="archive.discard", cluster=cluster, subscription="orders",
                 count=3, detail="poison")
    audit_record(actor=admin_user, action="cluster.create", cluster=cluster)
    audit_record(actor=None, action="archive.collect", cluster=cluster, subscription="orders",
                 count=10, result="error", detail="=HYPERLINK(\"http://evil\")")
    return cluster


def csv_rows(response) -> list[list[str]]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_admin_lists_the_audit_log_newest_first(api_client_as, admin_user, operator, entries):
    body = api_client_as(admin_user).get("/api/v1/audit/").json()
    assert body["count"] == 3
    newest = body["results"][0]
    assert (newest["actor"], newest["action"], newest["cluster"], newest["subscription"],
            newest["count"], newest["result"]) == ("system", "archive.collect", "prod", "orders", 10, "error")
    assert [row["action"] for row in body["results"]] == [
        "archive.collect", "cluster.create", "archive.discard"]


def test_audit_filters_by_action_and_actor(api_client_as, admin_user, operator, entries):
    api = api_client_as(admin_user)
    by_action = api.get("/api/v1/audit/", {"action": "archive.discard"}).json()["results"]
    assert [(row["actor"], row["count"]) for row in by_action] == [(operator.username, 3)]
    by_actor = api.get("/api/v1/audit/", {"actor": admin_user.username}).json()["results"]
    assert [row["action"] for row in by_actor] == ["cluster.create"]
    assert api.get("/api/v1/audit/", {"actor": "nobody"}).json()["count"] == 0


def test_audit_csv_export_has_every_column_and_defuses_formulas(api_client_as, admin_user, entries):
    rows = csv_rows(api_client_as(admin_user).get("/api/v1/audit/export/"))
    assert rows[0] == ["created_at", "actor", "action", "cluster", "subscription", "count", "result",
                       "detail"]
    assert len(rows) == 4
    collect = rows[1]
    assert collect[1:7] == ["system", "archive.collect", "prod", "orders", "10", "error"]
    assert collect[7] == "'=HYPERLINK(\"http://evil\")"


def test_audit_csv_export_keeps_the_filters_and_answers_an_accept_csv(api_client_as, admin_user, entries):
    api = api_client_as(admin_user)
    rows = csv_rows(api.get("/api/v1/audit/export/", {"action": "cluster.create"},
                            HTTP_ACCEPT="text/csv"))
    assert [row[2] for row in rows[1:]] == ["cluster.create"]


@pytest.mark.parametrize("url", ["/api/v1/audit/", "/api/v1/audit/export/"])
def test_an_operator_cannot_read_the_audit_log(api_client_as, operator, entries, url):
    response = api_client_as(operator).get(url)
    assert response.status_code == 403
    assert b"archive.discard" not in response.content


@pytest.mark.parametrize("url", ["/api/v1/audit/", "/api/v1/audit/export/"])
@pytest.mark.parametrize("query", [{"action": "a\x00b"}, {"actor": "\x00"}, {"action": "x" * 65}])
def test_a_malformed_audit_filter_is_a_400(api_client_as, admin_user, entries, url, query):
    response = api_client_as(admin_user).get(url, query)
    assert response.status_code == 400
    assert set(response.json()) <= {"action", "actor"}
