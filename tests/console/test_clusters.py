"""Clusters: adding, editing, secrets at rest, connection test, bad input."""

from __future__ import annotations

import logging

from django.db import connection

from console.audit.models import AuditEntry
from console.clusters.models import Cluster
from console.clusters.services import cluster_config, cluster_test_connection

SECRET = "pa$$-w0rd-that-must-never-show"


def add_cluster(client, **overrides):
    data = {"name": "prod-rabbit", "kind": "rabbitmq", "service_url": "amqp://127.0.0.1:1/%2F",
            "admin_url": "http://127.0.0.1:1", "username": "ops", "password": SECRET, "token": "",
            "options": "{}", "collect_interval_seconds": "300", **overrides}
    return client.post("/clusters/add/", data)


def test_admin_adds_a_cluster_and_the_password_is_encrypted_at_rest(client_as, admin_user):
    client = client_as(admin_user)
    response = add_cluster(client)
    cluster = Cluster.objects.get(name="prod-rabbit")
    assert response.status_code == 302
    assert response["Location"] == f"/clusters/{cluster.pk}/"
    with connection.cursor() as cursor:
        cursor.execute("SELECT password_encrypted FROM clusters_cluster WHERE id = %s", [cluster.pk])
        [stored] = cursor.fetchone()
    assert SECRET not in stored and stored
    assert cluster.password == SECRET
    assert cluster_config(cluster).password == SECRET
    assert SECRET not in repr(cluster_config(cluster))
    entry = AuditEntry.objects.get(action="cluster.create")
    assert entry.actor_name == admin_user.username and entry.cluster_name == "prod-rabbit"
    assert SECRET not in entry.detail


def test_secrets_are_never_shown_back_on_any_page(client_as, admin_user):
    client = client_as(admin_user)
    add_cluster(client)
    cluster = Cluster.objects.get(name="prod-rabbit")
    for url in ("/clusters/", f"/clusters/{cluster.pk}/", f"/clusters/{cluster.pk}/edit/", "/audit/"):
        body = client.get(url).content.decode()
        assert SECRET not in body, url
        assert cluster.password_encrypted not in body, url
    assert "A password is stored." in client.get(f"/clusters/{cluster.pk}/edit/").content.decode()


def test_editing_without_retyping_the_password_keeps_it(client_as, admin_user):
    client = client_as(admin_user)
    add_cluster(client)
    cluster = Cluster.objects.get(name="prod-rabbit")
    client.post(f"/clusters/{cluster.pk}/edit/", {
        "name": "prod-rabbit", "kind": "rabbitmq", "service_url": "amqp://127.0.0.1:2/%2F",
        "admin_url": "", "username": "ops", "password": "", "token": "", "options": "{}",
        "collect_interval_seconds": "60"})
    cluster.refresh_from_db()
    assert cluster.service_url == "amqp://127.0.0.1:2/%2F"
    assert cluster.password == SECRET
    assert "password" not in AuditEntry.objects.get(action="cluster.update").detail


def test_invalid_cluster_form_changes_nothing(client_as, admin_user):
    client = client_as(admin_user)
    response = add_cluster(client, kind="kafka", options="[not json")
    assert response.status_code == 200
    assert not Cluster.objects.exists()
    assert not AuditEntry.objects.exists()
    assert b"Select a valid choice" in response.content


def test_connection_test_of_an_unresolvable_host_reports_unreachable(
        client_as, admin_user, make_cluster, caplog):
    cluster = make_cluster("rabbitmq", service_url="amqp://no-such-host.invalid:5672/%2F",
                           admin_url="http://no-such-host.invalid:15672", username="u", password=SECRET)
    client = client_as(admin_user)
    with caplog.at_level(logging.DEBUG):
        response = client.post(f"/clusters/{cluster.pk}/test/", follow=True)
    assert response.status_code == 200
    assert b"Unreachable" in response.content
    cluster.refresh_from_db()
    assert cluster.last_check_ok is False and cluster.last_check_message
    assert SECRET not in caplog.text


def test_connection_test_over_htmx_returns_the_status_fragment(client_as, viewer, make_cluster):
    cluster = make_cluster("rocketmq", service_url="redis://127.0.0.1:1/5")
    response = client_as(viewer).post(f"/clusters/{cluster.pk}/test/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith('<div id="connection"')
    assert "unreachable" in body


def test_cluster_page_of_an_unreachable_broker_still_renders(client_as, viewer, make_cluster):
    cluster = make_cluster("rabbitmq", service_url="amqp://127.0.0.1:1/%2F",
                           admin_url="http://127.0.0.1:1")
    response = client_as(viewer).get(f"/clusters/{cluster.pk}/")
    assert response.status_code == 200
    assert b"Cluster unreachable" in response.content


def test_unknown_kind_in_the_database_is_a_clear_error_not_a_crash(make_cluster):
    cluster = make_cluster("rabbitmq")
    Cluster.objects.filter(pk=cluster.pk).update(kind="kafka")
    cluster.refresh_from_db()
    ok, message = cluster_test_connection(cluster=cluster)
    assert not ok and "unknown cluster kind" in message


def test_unknown_cluster_id_is_a_404_page(client_as, viewer):
    response = client_as(viewer).get("/clusters/999999/")
    assert response.status_code == 404
    assert b"There is nothing here" in response.content


def test_a_cluster_with_archived_letters_cannot_be_deleted(client_as, admin_user, make_cluster,
                                                           make_dead_letters):
    cluster = make_cluster()
    make_dead_letters(cluster, 2)
    response = client_as(admin_user).post(f"/clusters/{cluster.pk}/delete/", follow=True)
    assert b"still has archived dead letters" in response.content
    assert Cluster.objects.filter(pk=cluster.pk).exists()


def test_deleting_an_empty_cluster_is_audited(client_as, admin_user, make_cluster):
    cluster = make_cluster(name="old")
    client_as(admin_user).post(f"/clusters/{cluster.pk}/delete/")
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    assert AuditEntry.objects.filter(action="cluster.delete", cluster_name="old").exists()


def test_a_password_written_under_another_key_reads_as_empty(settings, make_cluster):
    cluster = make_cluster(password=SECRET)
    settings.CREDENTIALS_KEY = b"6LnnX5Df3JHOBdL4h0mt9o7hxM7tU0kx3sJ8o0Q2Jf0="
    assert Cluster.objects.get(pk=cluster.pk).password == ""
