"""The conversation endpoints — shape, pagination, clear, and the authorization matrix."""

from __future__ import annotations

import pytest

from conversations.models import AgentConversation, ConversationArchive
from conversations.services import conversation_append, notes_add
from conversations.types import ConversationKey
from tests.conftest import node_id
from tests.conversations.conftest import turns

pytestmark = pytest.mark.django_db


def _url(workflow, agent=None):
    base = f"/api/v1/workflows/{workflow.pk}/conversations"
    return base if agent is None else f"{base}/{agent}"


def test_list_returns_metadata_only(api_client, workflow, key):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    notes_add(key=key, text="finding")

    response = api_client.get(_url(workflow))

    assert response.status_code == 200
    assert (response.json()["next_cursor"], response.json()["has_more"]) == (None, False)
    [row] = response.json()["results"]
    assert {k: row[k] for k in ("generation", "agent_node_id", "length", "revision", "notes")} == {
        "generation": 1,
        "agent_node_id": key.agent_node_id,
        "length": 2,
        "revision": 2,
        "notes": [{"id": "n1", "text": "finding"}],
    }
    assert row["bytes"] == AgentConversation.objects.get().bytes
    assert "messages" not in row


def test_list_query_count_does_not_grow_with_conversations(api_client, workflow, django_assert_num_queries):
    for agent in ("a", "b", "c"):
        k = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=agent)
        conversation_append(key=k, messages=turns(2), expected_length=0)

    with django_assert_num_queries(3):  # token auth, the owner's workflow, the conversations
        response = api_client.get(_url(workflow))

    assert len(response.json()["results"]) == 3


def test_list_pages_with_a_cursor_and_filters_by_generation_and_agent(api_client, workflow):
    for generation, agent in [(1, "a"), (1, "b"), (2, "a")]:
        k = ConversationKey(workflow_id=workflow.pk, generation=generation, agent_node_id=agent)
        conversation_append(key=k, messages=turns(1), expected_length=0)

    first = api_client.get(_url(workflow), {"limit": 2}).json()
    second = api_client.get(_url(workflow), {"limit": 2, "cursor": first["next_cursor"]}).json()
    only = api_client.get(_url(workflow), {"generation": 1, "agent_node_id": "b"}).json()
    forged = api_client.get(_url(workflow), {"cursor": first["next_cursor"] + "x"})

    assert [(r["generation"], r["agent_node_id"]) for r in first["results"]] == [(2, "a"), (1, "b")]
    assert first["has_more"] is True
    assert [(r["generation"], r["agent_node_id"]) for r in second["results"]] == [(1, "a")]
    assert (second["next_cursor"], second["has_more"]) == (None, False)
    assert [(r["generation"], r["agent_node_id"]) for r in only["results"]] == [(1, "b")]
    assert (forged.status_code, forged.json()["code"]) == (400, "invalid_cursor")


def test_read_paginates_messages_by_seq(api_client, workflow, key):
    conversation_append(key=key, messages=turns(5), expected_length=0)

    first = api_client.get(_url(workflow, key.agent_node_id), {"limit": 2}).json()
    second = api_client.get(
        _url(workflow, key.agent_node_id), {"limit": 2, "cursor": first["next_cursor"]}
    ).json()
    third = api_client.get(
        _url(workflow, key.agent_node_id), {"limit": 2, "cursor": second["next_cursor"]}
    ).json()

    assert [m["seq"] for m in first["results"]] == [0, 1]
    assert first["has_more"] is True
    assert [m["seq"] for m in second["results"]] == [2, 3]
    assert [m["seq"] for m in third["results"]] == [4]
    assert (third["next_cursor"], third["has_more"]) == (None, False)
    assert [m["message"] for m in first["results"] + second["results"] + third["results"]] == turns(5)
    assert (first["length"], first["revision"], first["generation"]) == (5, 1, 1)


def test_read_takes_a_generation(api_client, workflow, key):
    old = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="old-agent")
    conversation_append(key=old, messages=turns(1), expected_length=0)

    assert api_client.get(_url(workflow, "old-agent"), {"generation": 1}).json()["length"] == 1
    assert api_client.get(_url(workflow, key.agent_node_id), {"generation": 2}).json()["length"] == 0
    assert api_client.get(_url(workflow, "old-agent"), {"generation": 2}).json()["code"] == "not_found"


def test_a_cursor_of_another_conversation_is_refused(api_client, workflow, key):
    conversation_append(key=key, messages=turns(5), expected_length=0)
    cursor = api_client.get(_url(workflow, key.agent_node_id), {"limit": 2}).json()["next_cursor"]
    other = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="other-agent")
    conversation_append(key=other, messages=turns(1), expected_length=0)

    response = api_client.get(_url(workflow, "other-agent"), {"cursor": cursor})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_cursor"


def test_delete_clears_into_an_archive(api_client, workflow, key):
    conversation_append(key=key, messages=turns(2), expected_length=0)

    response = api_client.delete(_url(workflow, key.agent_node_id))

    assert (response.status_code, response.content) == (204, b"")
    assert ConversationArchive.objects.get().length == 2
    assert AgentConversation.objects.get().length == 0


def test_anonymous_requests_are_refused(anon_client, workflow):
    assert anon_client.get(_url(workflow)).status_code == 401


@pytest.mark.parametrize("method", ["list", "read", "delete"])
def test_another_owners_workflow_is_404_and_nothing_changes(other_client, workflow, key, method):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    before = AgentConversation.objects.values("length", "revision").get()

    if method == "list":
        response = other_client.get(_url(workflow))
    elif method == "read":
        response = other_client.get(_url(workflow, key.agent_node_id))
    else:
        response = other_client.delete(_url(workflow, key.agent_node_id))

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert AgentConversation.objects.values("length", "revision").get() == before
    assert ConversationArchive.objects.exists() is False


def test_own_workflow_with_another_owners_agent_id_is_404(api_client, workflow, other_workflow):
    foreign = ConversationKey(
        workflow_id=other_workflow.pk, generation=1, agent_node_id=node_id(other_workflow, "aiAgent")
    )
    conversation_append(key=foreign, messages=turns(2), expected_length=0)

    read = api_client.get(_url(workflow, foreign.agent_node_id))
    cleared = api_client.delete(_url(workflow, foreign.agent_node_id))

    assert (read.status_code, read.json()["code"]) == (404, "not_found")
    assert (cleared.status_code, cleared.json()["code"]) == (404, "not_found")
    assert AgentConversation.objects.get().length == 2
    assert ConversationArchive.objects.exists() is False


def test_a_missing_workflow_is_404(api_client):
    assert api_client.get("/api/v1/workflows/wf_nope/conversations").status_code == 404
