"""An id that names nothing inside the owner's workflow (an agent node, a message, a run, a Memory node or
item) answers `not_found` on every endpoint, and nothing is written."""

from __future__ import annotations

import pytest

from tests.conftest import node_id
from tests.rows import row_counts

pytestmark = pytest.mark.django_db


def _endpoints(workflow):
    mem = node_id(workflow, "simpleMemory")
    return [
        ("get", "conversations/nobody", None),
        ("delete", "conversations/nobody", None),
        ("get", "conversations/nobody/requests", None),
        ("get", "conversations/nobody/requests/1", None),
        ("get", "usage?agent_node_id=nobody", None),
        ("get", "chats/chat_unknown", None),
        ("post", "chats/chat_unknown/purge", {"confirm": True}),
        ("get", f"conversations/{node_id(workflow, 'chatTrigger')}", None),  # a node, but not an agent
        ("post", "agents/nobody/subagents", {}),
        ("post", "chat/messages/m_nothing/edit", {"text": "hi"}),
        ("post", "chat/messages/m_nothing/retry", {}),
        ("post", "chat/messages/m_nothing/feedback", {"value": "up"}),
        ("post", "chat/switch", {"message_id": "m_nothing"}),
        ("get", "chat/runs/run_nothing", None),
        ("post", "chat/runs/run_nothing/stop", None),
        ("get", "memory/nobody/items", None),
        ("post", "memory/nobody/items", {"content": "x"}),
        ("get", f"memory/{mem}/items/mem_nothing", None),
        ("patch", f"memory/{mem}/items/mem_nothing", {"expected_version": 1, "content": "x"}),
        ("delete", f"memory/{mem}/items/mem_nothing?expected_version=1", None),
        ("get", f"memory/{mem}/items/mem_nothing/revisions", None),
    ]


def test_every_endpoint_answers_not_found_for_an_unknown_child_id(api_client, workflow):
    before = row_counts()

    for method, path, body in _endpoints(workflow):
        url = f"/api/v1/workflows/{workflow.pk}/{path}"
        response = (
            getattr(api_client, method)(url, body, format="json")
            if body is not None
            else getattr(api_client, method)(url)
        )
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), (method, path)

    assert row_counts() == before


def test_an_agent_that_never_ran_has_an_empty_conversation(api_client, workflow):
    response = api_client.get(f"/api/v1/workflows/{workflow.pk}/conversations/{node_id(workflow, 'aiAgent')}")

    assert response.status_code == 200
    assert (response.json()["length"], response.json()["results"], response.json()["has_more"]) == (
        0,
        [],
        False,
    )
