"""Request input read as the schema describes it: JSON types without coercion, `confirm: true`, empty query
values as values, and state refusals of a valid request as 409."""

from __future__ import annotations

import pytest

from tests.conftest import node_id

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/auth/token/revoke", {"all": 0}, "all"),
        ("/api/v1/workflows", {"name": 123}, "name"),
        ("/api/v1/workflows", {"name": "x", "graph": {"nodes": [1], "edges": []}}, "graph"),
        (
            "/api/v1/workflows",
            {"name": "x", "graph": {"nodes": [], "edges": [], "graphVersion": None}},
            "graph",
        ),
        ("/api/v1/account/erase", {"confirm": 1}, "confirm"),
        ("/api/v1/account/erase", {"confirm": False}, "confirm"),
    ],
)
def test_a_body_field_of_another_json_type_is_refused_and_nothing_changes(
    api_client, workflow, path, body, field
):
    response = api_client.post(path, body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert field in response.json()["extra"]["fields"]
    assert api_client.get(f"/api/v1/workflows/{workflow.pk}").status_code == 200


def test_a_wrongly_typed_field_is_named_beside_the_other_invalid_ones(api_client, workflow):
    response = api_client.put(
        f"/api/v1/workflows/{workflow.pk}", {"graph": "nope", "expected_revision": "1"}, format="json"
    )

    assert response.status_code == 400
    assert set(response.json()["extra"]["fields"]) == {"graph", "expected_revision"}


def test_memory_numbers_as_strings_and_unknown_fields_are_refused(api_client, workflow):
    base = f"/api/v1/workflows/{workflow.pk}/memory/{node_id(workflow, 'simpleMemory')}/items"
    item = api_client.post(base, {"content": "Likes espresso"}, format="json").json()["memory"]

    as_string = api_client.patch(
        f"{base}/{item['id']}", {"expected_version": "1", "title": "t"}, format="json"
    )
    unknown = api_client.post(base, {"content": "x", "owner": 2}, format="json")
    nothing = api_client.patch(f"{base}/{item['id']}", {"expected_version": 1}, format="json")

    assert (as_string.status_code, as_string.json()["extra"]["fields"]) == (
        400,
        {"expected_version": ["Must be an integer."]},
    )
    assert (unknown.status_code, list(unknown.json()["extra"]["fields"])) == (400, ["owner"])
    assert (nothing.status_code, nothing.json()["code"]) == (400, "invalid_request")
    assert api_client.get(f"{base}/{item['id']}").json()["version"] == 1


@pytest.mark.parametrize("query", ["before=", "limit=", "limit=abc"])
def test_an_empty_or_malformed_query_value_is_refused(api_client, workflow, query):
    response = api_client.get(f"/api/v1/workflows/{workflow.pk}/chat?{query}")

    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")


def test_an_empty_cursor_is_the_first_page_and_a_malformed_one_is_refused(api_client, workflow):
    first = api_client.get("/api/v1/workflows?cursor=")
    malformed = api_client.get("/api/v1/workflows?cursor=not%20a%20cursor")

    assert (first.status_code, [w["id"] for w in first.json()["results"]]) == (200, [workflow.pk])
    assert (malformed.status_code, list(malformed.json()["extra"]["fields"])) == (400, ["cursor"])


def test_an_idempotency_key_of_spaces_is_refused(api_client, workflow):
    base = f"/api/v1/workflows/{workflow.pk}/memory/{node_id(workflow, 'simpleMemory')}/items"

    response = api_client.post(base, {"content": "x"}, format="json", HTTP_IDEMPOTENCY_KEY="   ")

    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")


def test_a_subagent_type_outside_the_schema_enum_is_refused(api_client, workflow):
    url = f"/api/v1/workflows/{workflow.pk}/agents/{node_id(workflow, 'aiAgent')}/subagents"

    response = api_client.post(url, {"type": "teamLead"}, format="json")

    assert (response.status_code, list(response.json()["extra"]["fields"])) == (400, ["type"])
    assert api_client.get(f"/api/v1/workflows/{workflow.pk}").json()["revision"] == workflow.revision
