"""The Vertex and RLM runtimes through the chat path: an owner's message runs a turn with a tool call
(the Memory tool) against loopback servers speaking each runtime's wire, and the stored conversation,
its request records and its badge carry the runtime's declared fidelity (observable)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run
from chat.models import ChatRun
from conversations.models import ConversationMessage, ProviderCall
from conversations.selectors import conversation_fidelity, conversation_load
from conversations.services import conversation_append
from conversations.types import ConversationKey
from memory.models import MemoryItem
from opencompany.llm.wire import make_assistant, make_text, make_user, text_of, tool_calls_of
from tests.conftest import demo_graph, make_workflow, node_id
from tests.llm.loopback import LoopbackServer, Received, Reply
from tests.llm.vertex_rlm_support import chat_call, chat_text, credentials_file, token_reply, vertex_text

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(settings: Any, tmp_path: Path) -> Iterator[LoopbackServer]:
    loopback = LoopbackServer().start()
    settings.VERTEX_PROJECT = "oc-project"
    settings.VERTEX_LOCATION = "us-central1"
    settings.VERTEX_CREDENTIALS_FILE = str(credentials_file(tmp_path, loopback.base_url))
    settings.VERTEX_BASE_URL = loopback.base_url
    settings.RLM_BASE_URL = loopback.base_url + "/v1"
    try:
        yield loopback
    finally:
        loopback.stop()


def _workflow(owner: Any, provider: str, model: str) -> Any:
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": provider, "model": model})
    return make_workflow(owner, graph)


def _run(workflow: Any, text: str) -> ChatRun:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    async_to_sync(execute_run)(admission.run.run_id)
    return ChatRun.objects.get(run_id=admission.run.run_id)


def _vertex_memory_call(received: Received) -> Reply:
    assert received.path.startswith(
        "/v1beta1/projects/oc-project/locations/us-central1/publishers/google/models/"
    )
    chunk = (
        b'data: {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "memory", '
        b'"args": {"operation": "remember", "content": "The owner likes tea."}}, "thoughtSignature": "c2lnLTE="}]}, '
        b'"finishReason": "STOP"}], "responseId": "vx-call", "usageMetadata": {"promptTokenCount": 300, '
        b'"candidatesTokenCount": 12, "totalTokenCount": 312}}\r\n\r\n'
    )
    return Reply(raw=chunk)


def _vertex_after_tool(received: Received) -> Reply:
    parts = received.body["contents"][1]["parts"]
    assert parts[0]["thoughtSignature"] == "c2lnLTE="  # same environment: the signature goes back
    return Reply(raw=vertex_text("Noted: you like tea.", "vx-text"))


def test_a_vertex_agent_runs_a_chat_turn_with_a_tool_call_bound_to_its_environment(owner, server, api_client):
    workflow = _workflow(owner, "vertex", "gemini-3-pro-preview")
    server.replies.extend([token_reply, _vertex_memory_call, _vertex_after_tool])

    run = _run(workflow, "Remember that I like tea.")

    assert (run.state, run.error_code, server.failures) == ("finished", "", [])
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    call = tool_calls_of(stored[1])[0]
    assert (call["name"], call["thought_signature"]) == ("memory", "c2lnLTE=")
    assert stored[1]["metadata"]["vertex"] == {
        "environment": "projects/oc-project/locations/us-central1",
        "interaction": "vx-call",
    }
    assert [m["metadata"]["fidelity"] for m in stored if m["role"] == "assistant"] == ["observable"] * 2
    assert MemoryItem.objects.get().content == "The owner likes tea."
    records = list(
        ProviderCall.objects.filter(run_id=run.run_id).order_by("id").values_list("runtime", "fidelity")
    )
    assert records == [("vertex", "observable")] * 2
    page = api_client.get(f"/api/v1/workflows/{workflow.pk}/conversations/{key.agent_node_id}").json()
    assert page["fidelity"] == {"runtime": "vertex", "fidelity": "observable", "epoch": 1}


def test_an_rlm_agent_runs_a_chat_turn_with_a_recursive_query_and_a_tool_call(owner, server, api_client):
    workflow = _workflow(owner, "rlm", "rlm-model")
    server.replies.extend(
        [
            chat_call("q1", "llm_query", '{"prompt":"What is worth remembering here?"}'),
            chat_text("That the owner likes tea."),
            chat_call("m1", "memory", '{"operation":"remember","content":"The owner likes tea."}'),
            chat_text("Noted: you like tea."),
        ]
    )

    run = _run(workflow, "Remember what matters.")

    assert (run.state, run.error_code, server.failures) == ("finished", "", [])
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["content"][0]["block"] == {
        "type": "llm_query",
        "prompt": "What is worth remembering here?",
        "depth": 1,
        "answer": "That the owner likes tea.",
    }
    assert text_of(stored[-1]) == "Noted: you like tea."
    assert MemoryItem.objects.get().content == "The owner likes tea."
    records = list(
        ProviderCall.objects.filter(run_id=run.run_id).order_by("id").values_list("runtime", "fidelity")
    )
    assert records == [("rlm", "observable")] * 2
    page = api_client.get(f"/api/v1/workflows/{workflow.pk}/conversations/{key.agent_node_id}").json()
    assert page["fidelity"] == {"runtime": "rlm", "fidelity": "observable", "epoch": 1}


def test_the_conversation_badge_is_the_lowest_fidelity_among_the_turns_it_holds(workflow):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))

    def turn(fidelity: str) -> dict[str, Any]:
        return make_assistant(
            [make_text("a")], {"runtime": "openai_compatible", "fidelity": fidelity, "epoch": 1}
        )

    conversation_append(
        key=key,
        messages=[
            make_user("1"),
            turn("provider_replayable"),
            make_user("2"),
            turn("portable"),
            make_user("3"),
        ],
        expected_length=0,
    )
    conversation_append(key=key, messages=[turn("provider_replayable")], expected_length=5)

    assert ConversationMessage.objects.count() == 6
    assert conversation_fidelity(key=key) == {
        "runtime": "openai_compatible",
        "fidelity": "portable",
        "epoch": 1,
    }
