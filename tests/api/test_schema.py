"""The OpenAPI schema: complete, valid, and only for logged-in callers."""

from __future__ import annotations

import re

import pytest
import yaml
from django.core.management import call_command

from tests.api.conftest import api_v1_endpoints


@pytest.mark.django_db
def test_the_schema_validates_without_warnings(tmp_path):
    # --fail-on-warn: an endpoint whose types the generator had to guess fails here.
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    schema = yaml.safe_load(target.read_text())
    assert schema["openapi"].startswith("3.")
    operation_ids = [op["operationId"] for item in schema["paths"].values() for op in item.values()
                     if isinstance(op, dict) and "operationId" in op]
    assert len(operation_ids) == len(set(operation_ids))


@pytest.mark.django_db
def test_the_schema_documents_every_endpoint(api_client_as, admin_user):
    schema = yaml.safe_load(api_client_as(admin_user).get("/api/schema/").content)
    # Path parameters written as the sample value the URL walk uses ("1").
    documented = {re.sub(r"\{\w+\}", "1", path) for path in schema["paths"]}
    for url, entry in api_v1_endpoints():
        if entry.name == "api-not-found":
            continue
        assert url in documented, url


@pytest.mark.django_db
def test_the_schema_never_shows_a_secret_field_as_readable(api_client_as, admin_user):
    schema = yaml.safe_load(api_client_as(admin_user).get("/api/schema/").content)
    cluster = schema["components"]["schemas"]["Cluster"]["properties"]
    assert "password" not in cluster and "token" not in cluster
    request = schema["components"]["schemas"]["ClusterRequest"]["properties"]
    assert request["password"]["writeOnly"] is True and request["token"]["writeOnly"] is True


@pytest.mark.django_db
def test_the_schema_answers_a_token_but_refuses_anonymous_callers(client, api_client_as, viewer):
    assert api_client_as(viewer).get("/api/schema/").status_code == 200
    anonymous = client.get("/api/schema/")
    assert anonymous.status_code == 401
    assert b"paths" not in anonymous.content


@pytest.mark.django_db
def test_the_swagger_page_needs_a_login(client, client_as, viewer):
    response = client.get("/api/docs/")
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert client_as(viewer).get("/api/docs/").status_code == 200
