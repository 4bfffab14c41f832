"""Hostile input over HTTP: every listed input answers `invalid_request` naming the field, with no row
written, on whichever database the suite runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import node_id
from tests.rows import row_counts

pytestmark = pytest.mark.django_db

DEEP = "[" * 1000 + "]" * 1000


def _with_deep(template: str) -> str:
    """`template` with its `DEEP` placeholder replaced by a value nested a thousand deep."""
    return template.replace('"DEEP"', DEEP)


NUL = "a\x00b"
SURROGATE = "a\ud800b"  # json.dumps writes it as the escape "\\ud800", as an attacker's client would


def _post(client: Any, url: str, body: str, method: str = "post") -> Any:
    return getattr(client, method)(url, data=body, content_type="application/json")


def _assert_refused(response: Any, field: str) -> None:
    body = response.json()
    assert (response.status_code, body["code"]) == (400, "invalid_request"), body
    assert list(body["extra"]["fields"]) == [field], body


def _cases(workflow: Any) -> list[tuple[str, str, str, str]]:
    """(method, url, raw body, the field the refusal names)."""
    base = f"/api/v1/workflows/{workflow.pk}"
    memory = f"{base}/memory/{node_id(workflow, 'simpleMemory')}/items"
    send = f"{base}/chat/messages"
    dumps = json.dumps
    return [
        ("post", send, dumps({"text": NUL}), "text"),
        ("post", send, dumps({"text": SURROGATE}), "text"),
        ("post", send, dumps({"text": "hi", "client_message_id": NUL}), "client_message_id"),
        ("post", send, dumps({"text": "hi", "expected_revision": 10**20}), "expected_revision"),
        ("post", send, _with_deep('{"text": "DEEP"}'), "text"),
        ("post", f"{base}/chat/messages/m_x/edit", dumps({"text": SURROGATE}), "text"),
        ("post", f"{base}/chat/switch", dumps({"message_id": NUL}), "message_id"),
        (
            "post",
            f"{base}/chat/switch",
            dumps({"message_id": "m_x", "expected_revision": 10**20}),
            "expected_revision",
        ),
        (
            "post",
            f"{base}/chat/messages/m_x/retry",
            dumps({"expected_revision": 10**20}),
            "expected_revision",
        ),
        ("post", memory, dumps({"content": NUL}), "content"),
        ("post", memory, dumps({"content": "ok", "tags": [SURROGATE]}), "tags.0"),
        ("post", memory, _with_deep('{"content": "ok", "tags": "DEEP"}'), "tags"),
        ("patch", f"{memory}/mem_x", dumps({"expected_version": 10**20, "content": "x"}), "expected_version"),
        ("post", f"{base}/validate", _with_deep('{"graph": {"nodes": "DEEP", "edges": []}}'), "graph"),
        (
            "post",
            f"{base}/validate",
            dumps({"graph": {"nodes": [{"id": NUL}], "edges": []}}),
            "graph.nodes.0.id",
        ),
        (
            "put",
            base,
            dumps({"graph": {"nodes": [], "edges": []}, "expected_revision": 10**20}),
            "expected_revision",
        ),
        (
            "post",
            "/api/v1/workflows",
            _with_deep(
                '{"name": "x", "graph": {"nodes": [{"id": "a", "type": "aiAgent", "data": {"parameters": '
                '{"system_prompt": "DEEP"}}}], "edges": []}}'
            ),
            "graph",
        ),
        ("post", "/api/v1/workflows", dumps({"name": SURROGATE}), "name"),
        ("post", "/api/v1/auth/token", _with_deep('{"username": "DEEP", "password": "x"}'), "username"),
        ("post", "/api/v1/auth/token", dumps({"username": NUL, "password": "x"}), "username"),
    ]


def test_every_hostile_body_is_refused_naming_its_field_and_writes_nothing(api_client, workflow):
    before = row_counts()

    for method, url, body, field in _cases(workflow):
        _assert_refused(_post(api_client, url, body, method), field)

    assert row_counts() == before


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/chat/runs/run%00x", "run_id"),
        ("/chat/runs/run%00x/stop", "run_id"),
        ("/chat/messages/m%00x/feedback", "message_id"),
        ("/chat/messages/m%00x/edit", "message_id"),
        ("/conversations/agent%00x", "agent_node_id"),
        ("/memory/mem%00x/items", "memory_node_id"),
        ("/agents/agent%00x/subagents", "agent_node_id"),
    ],
)
def test_a_path_id_holding_a_nul_is_refused_naming_it(api_client, workflow, path, field):
    before = row_counts()

    response = api_client.post(
        f"/api/v1/workflows/{workflow.pk}{path}", data="{}", content_type="application/json"
    )

    _assert_refused(response, field)
    assert row_counts() == before


def test_a_memory_item_id_holding_a_nul_is_refused(api_client, workflow):
    url = f"/api/v1/workflows/{workflow.pk}/memory/{node_id(workflow, 'simpleMemory')}/items/mem%00x"

    _assert_refused(api_client.get(url), "memory_id")
    _assert_refused(api_client.delete(url + "?expected_version=1"), "memory_id")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("memory/MEM/items?tags=a%00b", "tags"),
        ("memory/MEM/items?query=a%00b", "query"),
        ("memory/MEM/items/mem_x?expected_version=100000000000000000000", "expected_version"),
        ("conversations/AGENT?generation=100000000000000000000", "generation"),
        ("chat?before=m%00x", "before"),
    ],
)
def test_a_hostile_query_parameter_is_refused_naming_it(api_client, workflow, query, field):
    query = query.replace("MEM", node_id(workflow, "simpleMemory")).replace(
        "AGENT", node_id(workflow, "aiAgent")
    )
    method = api_client.delete if "expected_version" in query else api_client.get
    before = row_counts()

    _assert_refused(method(f"/api/v1/workflows/{workflow.pk}/{query}"), field)
    assert row_counts() == before


def test_the_admin_refuses_a_nul_in_a_search_and_in_a_memory_edit(client, staff, workflow):
    from memory import services
    from memory.models import MemoryItem
    from memory.scope import memory_scope

    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    item = services.memory_remember(scope=scope, content="tea at four", actor="system:test").memory
    client.force_login(staff)
    before = row_counts()

    search = client.get("/admin/memory/memoryitem/?q=a%00b")
    edit = client.post(
        f"/admin/memory/memoryitem/{MemoryItem.objects.get().pk}/change/",
        {
            "title": "",
            "content": "tea at five",
            "category": "",
            "tags": '["\\u0000"]',
            "expected_version": "1",
            "expires_at_0": "",
            "expires_at_1": "",
            "revisions-TOTAL_FORMS": "0",
            "revisions-INITIAL_FORMS": "0",
        },
    )
    deep = client.post(
        f"/admin/memory/memoryitem/{MemoryItem.objects.get().pk}/change/",
        {"content": "tea at six", "tags": DEEP, "expected_version": "1"},
    )

    assert (search.status_code, search.json()["extra"]["fields"]) == (400, {"q": [gate_nul()]})
    assert edit.status_code == 200  # the form is shown again with its error
    assert "Null characters are not allowed." in edit.content.decode()
    assert deep.status_code == 200
    assert "Nested deeper than 64 levels." in deep.content.decode()
    assert MemoryItem.objects.get().content == "tea at four"
    assert row_counts() == before
    assert item["version"] == 1


def gate_nul() -> str:
    from opencompany.core.gate import NUL_MESSAGE

    return NUL_MESSAGE
