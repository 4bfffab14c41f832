"""The OpenAPI schema a frontend generates its client from: every operation documents every status it can
answer with the one error envelope and its codes, one list shape, one delete convention, one timestamp
format, required fields as the serializers require them, and `spectacular --validate` stays clean."""

from __future__ import annotations

import re
from io import StringIO
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from memory.fields import CONTENT_MAX
from tests.conftest import node_id

pytestmark = pytest.mark.django_db

ENVELOPE = "#/components/schemas/ErrorEnvelope"
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    out = StringIO()
    call_command("spectacular", stdout=out)
    return yaml.safe_load(out.getvalue())


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]


def codes(op: dict[str, Any], status: str) -> set[str]:
    """The `code` enum an operation documents for `status` (its response uses the envelope)."""
    body = op["responses"][status]["content"]["application/json"]["schema"]
    assert body["allOf"][0] == {"$ref": ENVELOPE}
    return set(body["allOf"][1]["properties"]["code"]["enum"])


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def test_spectacular_validates_without_a_warning(tmp_path) -> None:
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))

    assert (tmp_path / "schema.yaml").stat().st_size > 0


def test_the_error_envelope_is_one_component(schema) -> None:
    assert schema["components"]["schemas"]["ErrorEnvelope"]["required"] == ["code", "message", "extra"]
    assert set(schema["components"]["schemas"]["ErrorEnvelope"]["properties"]) == {"code", "message", "extra"}


def test_every_operation_documents_its_error_statuses(schema) -> None:
    for path, method, op in operations(schema):
        statuses = set(op["responses"])
        where = (method, path)
        if op["operationId"] != "auth_token_create":
            assert {"401", "403"} <= statuses, where
            assert codes(op, "401") == {"not_authenticated"}, where
        if "{" in path:
            assert "not_found" in codes(op, "404"), where
        if "requestBody" in op:
            assert {"invalid_request"} <= codes(op, "400"), where
            assert codes(op, "413") == {"too_large"}, where
            assert codes(op, "415") == {"invalid_request"}, where
        if any(p["name"] == "cursor" for p in op.get("parameters", [])):
            assert "invalid_cursor" in codes(op, "400"), where
        for status in statuses - {"200", "201", "202", "204"}:
            assert int(status) >= 400, where
            codes(op, status)


def test_the_codes_a_service_refuses_with_are_listed_per_operation(schema) -> None:
    by_id = {op["operationId"]: op for _, _, op in operations(schema)}

    assert codes(by_id["memory_item_update"], "409") == {"version_conflict", "idempotency_key_reused"}
    assert codes(by_id["memory_items_create"], "409") == {"idempotency_key_reused", "memory_quota_exceeded"}
    assert codes(by_id["workflow_update"], "409") == {"revision_conflict"}
    assert codes(by_id["chats_purge"], "409") == {"chat_not_archived"}
    assert codes(by_id["chat_retry"], "409") >= {"not_editable", "run_in_progress", "revision_conflict"}
    assert codes(by_id["chat_send"], "400") == {"invalid_request", "message_too_long"}
    assert codes(by_id["auth_token_create"], "401") == {"invalid_credentials"}
    assert "validation_failed" in codes(by_id["workflow_deploy"], "400")


def test_throttled_operations_document_429_with_retry_after(schema) -> None:
    by_id = {op["operationId"]: op for _, _, op in operations(schema)}

    for operation_id in ("auth_token_create", "chat_send", "chat_edit", "chat_retry", "memory_items_create"):
        response = by_id[operation_id]["responses"]["429"]
        assert codes(by_id[operation_id], "429") == {"throttled"}, operation_id
        assert response["headers"]["Retry-After"]["schema"] == {"type": "integer", "minimum": 1}
    assert "429" not in by_id["workflows_list"]["responses"]


def test_every_delete_answers_204_without_a_body(schema) -> None:
    deletes = [(path, op) for path, method, op in operations(schema) if method == "delete"]

    assert len(deletes) == 4
    for path, op in deletes:
        assert "204" in op["responses"], path
        assert "content" not in op["responses"]["204"], path
        assert "200" not in op["responses"], path


def test_every_list_has_the_one_page_shape(schema) -> None:
    lists = [
        op for _, _, op in operations(schema) if any(p["name"] == "cursor" for p in op.get("parameters", []))
    ]

    assert {op["operationId"] for op in lists} == {
        "workflows_list",
        "chats_list",
        "conversations_list",
        "conversation_retrieve",
        "conversation_requests_list",
        "memory_items_list",
        "memory_item_revisions_list",
    }
    for op in lists:
        page = resolve(schema, op["responses"]["200"]["content"]["application/json"]["schema"])
        assert {"results", "next_cursor", "has_more"} <= set(page["required"]), op["operationId"]
        assert page["properties"]["results"]["type"] == "array"
        assert page["properties"]["has_more"]["type"] == "boolean"
        assert page["properties"]["next_cursor"]["nullable"] is True


def test_every_timestamp_in_a_response_is_a_date_time(schema) -> None:
    for name, component in schema["components"]["schemas"].items():
        for field, spec in component.get("properties", {}).items():
            if field.endswith("_at") or field == "at":
                assert spec.get("format") == "date-time", (name, field)


def test_required_fields_and_limits_match_the_serializers(schema) -> None:
    components = schema["components"]["schemas"]
    update = components["UpdateInputRequest"]
    by_id = {op["operationId"]: op for _, _, op in operations(schema)}
    forget = {p["name"]: p for p in by_id["memory_item_destroy"]["parameters"]}

    assert update["required"] == ["expected_version"]
    assert update["additionalProperties"] is False
    assert update["minProperties"] == 2
    assert update["properties"]["expected_version"]["minimum"] == 1
    assert forget["expected_version"]["required"] is True
    assert sorted(components["WorkflowSaveInputRequest"]["required"]) == ["expected_revision", "graph"]
    assert components["RememberInputRequest"]["properties"]["content"]["maxLength"] == CONTENT_MAX
    confirm = components["EraseInputRequest"]["properties"]["confirm"]["allOf"][0]
    assert resolve(schema, confirm) == {"enum": [True], "type": "boolean"}
    assert forget["Idempotency-Key"]["schema"]["maxLength"] == 512


def test_the_api_writes_every_timestamp_in_one_format(api_client, workflow) -> None:
    from chat import services as chat_services

    chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Hi")
    base = f"/api/v1/workflows/{workflow.pk}"
    memory = f"{base}/memory/{node_id(workflow, 'simpleMemory')}/items"
    item = api_client.post(memory, {"content": "Likes espresso"}, format="json").json()["memory"]

    stamps = [
        api_client.get(f"{base}").json()["created_at"],
        api_client.get("/api/v1/workflows").json()["results"][0]["updated_at"],
        api_client.get(f"{base}/chat").json()["path"][0]["created_at"],
        api_client.get(f"{base}/chat").json()["active_runs"][0]["created_at"],
        api_client.get(f"{base}/chats").json()["results"][0]["created_at"],
        item["created_at"],
        api_client.get(f"{memory}/{item['id']}/revisions").json()["results"][0]["created_at"],
    ]

    assert [bool(RFC3339.match(stamp)) for stamp in stamps] == [True] * len(stamps), stamps


def test_creates_declare_links_to_what_a_client_does_next(schema) -> None:
    by_id = {op["operationId"]: op for _, _, op in operations(schema)}

    assert by_id["workflows_create"]["responses"]["201"]["links"]["workflow_retrieve"] == {
        "operationId": "workflow_retrieve",
        "parameters": {"workflow_id": "$response.body#/id"},
    }
    assert set(by_id["chat_send"]["responses"]["202"]["links"]) == {"chat_run", "chat_stop"}
    assert by_id["memory_items_create"]["responses"]["201"]["links"]["memory_item_destroy"]["parameters"] == {
        "workflow_id": "$request.path.workflow_id",
        "memory_node_id": "$request.path.memory_node_id",
        "memory_id": "$response.body#/memory/id",
        "expected_version": "$response.body#/memory/version",
    }
    linked = {
        link["operationId"]
        for _, _, op in operations(schema)
        for r in op["responses"].values()
        for link in r.get("links", {}).values()
    }
    assert linked <= set(by_id)
