"""Tokens for automation and users with roles."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from console.accounts.roles import user_role
from console.audit.models import AuditEntry
from tests.conftest import PASSWORD


def get_token(client, username: str, password: str):
    return client.post("/api/v1/auth/token/", {"username": username, "password": password}, format="json")


def test_a_script_gets_a_token_with_its_password_and_uses_it(operator):
    client = APIClient()
    response = get_token(client, operator.username, PASSWORD)
    assert response.status_code == 200
    token = response.json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/dead-letters/").status_code == 200


def test_a_new_token_revokes_the_previous_one(operator):
    first = get_token(APIClient(), operator.username, PASSWORD).json()["token"]
    second = get_token(APIClient(), operator.username, PASSWORD).json()["token"]
    assert first != second
    old = APIClient()
    old.credentials(HTTP_AUTHORIZATION=f"Token {first}")
    response = old.get("/api/v1/clusters/")
    assert response.status_code == 401 and response.json()["error"]


def test_the_token_from_the_account_page_works_on_the_api(client_as, viewer):
    page = client_as(viewer).post("/account/")
    assert page.status_code == 200
    token = Token.objects.get(user=viewer).key
    assert token in page.content.decode()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/v1/clusters/").status_code == 200


@pytest.mark.parametrize("body", [
    {"username": "{user}", "password": "wrong-password"},
    {"username": "nobody-at-all", "password": PASSWORD},
    {"username": "{user}"},
    {},
])
def test_wrong_credentials_get_a_400_and_no_token(operator, body):
    body = {key: value.format(user=operator.username) for key, value in body.items()}
    response = APIClient().post("/api/v1/auth/token/", body, format="json")
    assert response.status_code == 400
    assert response.json()
    assert not Token.objects.exists()


def test_an_inactive_user_gets_no_token(operator):
    operator.is_active = False
    operator.save()
    assert get_token(APIClient(), operator.username, PASSWORD).status_code == 400
    assert not Token.objects.exists()


def test_password_guessing_is_slowed_down(operator):
    client = APIClient()
    answers = [get_token(client, operator.username, f"guess-{n}").status_code for n in range(25)]
    assert answers[0] == 400 and answers[-1] == 429
    assert get_token(client, operator.username, PASSWORD).status_code == 429


def test_a_session_login_needs_the_csrf_token_to_change_anything(admin_user):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(admin_user)
    assert browser.get("/api/v1/clusters/").status_code == 200
    response = browser.post("/api/v1/clusters/", {"name": "x", "kind": "rabbitmq",
                                                  "service_url": "amqp://h/"}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]


def test_admin_creates_a_user_with_a_role_who_can_then_work(api_client_as, admin_user):
    response = api_client_as(admin_user).post(
        "/api/v1/users/",
        {"username": "ci-bot", "password": "a-long-enough-pass-9", "role": "operator",
         "email": "ci@example.com"},
        format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["username"] == "ci-bot" and body["role"] == "operator"
    assert "password" not in body
    user = get_user_model().objects.get(username="ci-bot")
    assert user_role(user) == "operator" and user.email == "ci@example.com"
    entry = AuditEntry.objects.get(action="user.create")
    assert entry.actor_name == admin_user.username and "role=operator" in entry.detail
    assert "a-long-enough-pass-9" not in entry.detail
    assert get_token(APIClient(), "ci-bot", "a-long-enough-pass-9").status_code == 200


def test_admin_lists_users_with_their_roles(api_client_as, admin_user, viewer, operator):
    rows = api_client_as(admin_user).get("/api/v1/users/").json()["results"]
    roles = {row["username"]: row["role"] for row in rows}
    assert roles[viewer.username] == "viewer"
    assert roles[operator.username] == "operator"
    assert roles[admin_user.username] == "admin"
    assert all("password" not in row for row in rows)


@pytest.mark.parametrize(("body", "field"), [
    ({"role": "superhero"}, "role"),
    ({"password": "short"}, "password"),
    ({"password": "password123"}, "password"),
    ({"username": "bad name!"}, "username"),
    ({"username": ""}, "username"),
    ({"username": "nul\x00"}, "username"),
    ({"email": "not-an-email"}, "email"),
])
def test_bad_user_input_is_a_400_and_creates_nobody(api_client_as, admin_user, body, field):
    before = get_user_model().objects.count()
    payload = {"username": "new-person", "password": "a-long-enough-pass-9", "role": "viewer", **body}
    response = api_client_as(admin_user).post("/api/v1/users/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert get_user_model().objects.count() == before
    assert not AuditEntry.objects.exists()


def test_creating_an_existing_username_does_not_touch_that_user(api_client_as, admin_user, operator):
    response = api_client_as(admin_user).post(
        "/api/v1/users/", {"username": operator.username, "password": "hijack-pass-123", "role": "admin"},
        format="json")
    assert response.status_code == 400
    assert "username" in response.json()
    operator.refresh_from_db()
    assert operator.check_password(PASSWORD) and user_role(operator) == "operator"
    assert not AuditEntry.objects.exists()
