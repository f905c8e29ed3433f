"""Login everywhere, three roles, the create_user command, CSRF on forms."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authtoken.models import Token

from console.accounts.roles import ROLES, role_permissions, user_role

# Pages that must answer without a login.
PUBLIC = {"login", "health"}


def page_urls() -> list[str]:
    """Every page route with sample ids, so a new page cannot be left unprotected."""
    urls = []

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if str(pattern.pattern).startswith(("api/", "django-admin/")):
                    continue
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern) and pattern.name not in PUBLIC:
                route = prefix + str(pattern.pattern)
                for converter in ("<int:cluster_id>", "<int:letter_id>", "<int:job_id>",
                                  "<int:pk>", "<int:policy_id>", "<int:run_id>"):
                    route = route.replace(converter, "1")
                urls.append("/" + route.lstrip("^").rstrip("$"))

    walk(get_resolver().url_patterns)
    return urls


def test_role_groups_hold_nested_permissions(db):
    for lower, higher in zip(ROLES, ROLES[1:], strict=False):
        assert set(role_permissions(lower)) < set(role_permissions(higher))
    viewer = set(Group.objects.get(name="viewer").permissions.values_list("codename", flat=True))
    operator = set(Group.objects.get(name="operator").permissions.values_list("codename", flat=True))
    assert "view_deadletter" in viewer and "replay_deadletter" not in viewer
    assert {"replay_deadletter", "discard_deadletter", "rebuild_cluster"} <= operator
    assert "add_cluster" not in operator


def test_every_page_refuses_an_anonymous_request(db):
    client = Client()
    urls = page_urls()
    assert len(urls) > 10
    for url in urls:
        for method in (client.get, client.post):
            response = method(url)
            assert response.status_code in (302, 405), (url, response.status_code)
            if response.status_code == 302:
                assert response["Location"].startswith("/login/"), url


def test_health_needs_no_login_and_says_nothing_more(db):
    response = Client().get("/health/")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_login_with_wrong_password_is_refused(db, viewer):
    client = Client()
    response = client.post("/login/", {"username": viewer.username, "password": "wrong"})
    assert response.status_code == 200
    assert b"didn't match" in response.content
    assert client.get("/clusters/").status_code == 302


def test_forms_are_protected_by_csrf(db, admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    response = client.post("/clusters/add/", {"name": "x", "kind": "rabbitmq", "service_url": "amqp://h"})
    assert response.status_code == 403
    page = client.get("/clusters/add/")
    assert b"csrfmiddlewaretoken" in page.content


def test_create_user_command_gives_the_role_and_a_token(db):
    out = StringIO()
    call_command("create_user", "ops1", "--role", "operator", "--password", "s3cret-pass!", "--token",
                 stdout=out)
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username="ops1")
    assert user_role(user) == "operator"
    assert user.check_password("s3cret-pass!")
    token = Token.objects.get(user=user).key
    assert f"token {token}" in out.getvalue()


def test_create_user_command_refuses_an_unknown_role(db):
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("create_user", "x", "--role", "superhero", "--password", "p")


def test_account_page_issues_a_token_shown_once(client_as, viewer):
    client = client_as(viewer)
    response = client.post("/account/")
    token = Token.objects.get(user=viewer).key
    assert token.encode() in response.content
    assert token.encode() not in client.get("/account/").content


# POSTs a viewer may make: they change nothing on a broker or the archive.
VIEWER_MAY_POST = {"/", "/logout/", "/account/", "/clusters/1/test/"}


def test_a_viewer_gets_403_on_every_changing_page_action(client_as, viewer, make_cluster,
                                                         make_dead_letters):
    cluster = make_cluster(name="c1", service_url="amqp://127.0.0.1:1/%2F")
    [letter] = make_dead_letters(cluster, 1)
    client = client_as(viewer)
    checked = 0
    for url in page_urls():
        url = url.replace("/1/", f"/{cluster.pk}/") if url.startswith("/clusters/") else url
        if url in VIEWER_MAY_POST or url.replace(f"/{cluster.pk}/", "/1/") in VIEWER_MAY_POST:
            continue
        response = client.post(url, {"subscription": "orders-sub", "ids": [letter.pk],
                                      "name": "x", "source": "y"})
        assert response.status_code in (403, 405), (url, response.status_code)
        checked += response.status_code == 403
    assert checked >= 7
    letter.refresh_from_db()
    assert letter.state == "parked"
    from console.audit.models import AuditEntry

    assert not AuditEntry.objects.exists()
