"""Fidelity through a whole chat: each stored assistant turn records its runtime, fidelity and epoch, and
an agent moved from Anthropic to OpenAI starts a new epoch whose requests carry none of Anthropic's
signed state — the real SDKs against loopback servers that check what they receive."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run
from chat.models import ChatRun
from conversations.models import ConversationArchive
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from graphs import services as graph_services
from opencompany.llm.wire import text_of
from tests.conftest import make_workflow, node_id
from tests.llm.loopback import LoopbackServer, Received, Reply, anthropic_sse, responses_sse

pytestmark = pytest.mark.django_db(transaction=True)

SIGNATURE = "ErUBCkYIBRgCIkDm+/zZ0sig==" * 4
THINKING = "The owner likes tea; remember it."
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4a"


@pytest.fixture
def server(settings: Any) -> Iterator[LoopbackServer]:
    loopback = LoopbackServer().start()
    settings.ANTHROPIC_API_KEY = "sk-ant-test"
    settings.ANTHROPIC_BASE_URL = loopback.base_url
    settings.OPENAI_API_KEY = "sk-test"
    settings.OPENAI_BASE_URL = loopback.base_url + "/v1"
    try:
        yield loopback
    finally:
        loopback.stop()


def _graph(provider: str, model: str, **parameters: Any) -> dict[str, Any]:
    from tests.conftest import demo_graph

    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": provider, "model": model, **parameters})
    return graph


def _switch(workflow: Any, provider: str, model: str) -> None:
    graph = copy.deepcopy(workflow.graph)
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": provider, "model": model})
            node["data"]["parameters"].pop("thinking_budget", None)
    graph_services.workflow_save(workflow=workflow, graph=graph, expected_revision=workflow.revision)
    workflow.refresh_from_db()
    graph_services.workflow_deploy(workflow=workflow)


def _send_and_run(workflow: Any, text: str) -> ChatRun:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    async_to_sync(execute_run)(admission.run.run_id)
    return ChatRun.objects.get(run_id=admission.run.run_id)


def _anthropic_thinking_answer(received: Received) -> Reply:
    assert received.path == "/v1/messages"
    assert received.body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    usage = {
        "input_tokens": 40,
        "output_tokens": 1,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return Reply(
        sse=anthropic_sse(
            {"type": "message_start", "message": message},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": THINKING},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": SIGNATURE},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "redacted_thinking", "data": REDACTED},
            },
            {"type": "content_block_stop", "index": 1},
            {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "text_delta", "text": "Noted: you like tea."},
            },
            {"type": "content_block_stop", "index": 2},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 30},
            },
            {"type": "message_stop"},
        )
    )


def _openai_answer_without_anthropic_state(received: Received) -> Reply:
    assert received.path == "/v1/responses"
    raw = received.raw
    assert SIGNATURE.encode() not in raw, "an Anthropic signature reached OpenAI"
    assert THINKING.encode() not in raw, "Anthropic's thinking reached OpenAI"
    assert REDACTED.encode() not in raw, "Anthropic's redacted thinking reached OpenAI"
    assert received.body["input"] == [
        {"role": "user", "content": "Remember that I like tea."},
        {"role": "assistant", "content": "Noted: you like tea."},
        {"role": "user", "content": "What do I like?"},
    ]
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "in_progress",
        "model": "gpt-test",
        "output": [],
    }
    item = {
        "type": "message",
        "id": "msg_9",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "You like tea.", "annotations": []}],
    }
    usage = {
        "input_tokens": 60,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 65,
    }
    return Reply(
        sse=responses_sse(
            {"type": "response.created", "response": response},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "content": [], "status": "in_progress"},
            },
            {
                "type": "response.output_text.delta",
                "item_id": "msg_9",
                "output_index": 0,
                "content_index": 0,
                "delta": "You like tea.",
                "logprobs": [],
            },
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": [item], "usage": usage},
            },
        )
    )


def test_a_switch_from_anthropic_to_openai_sends_no_anthropic_signature_and_the_conversation_goes_on(
    owner, server, api_client
):
    workflow = make_workflow(owner, _graph("anthropic", "claude-test", thinking_budget=1024))
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    server.replies.append(_anthropic_thinking_answer)

    first = _send_and_run(workflow, "Remember that I like tea.")

    assert (first.state, first.error_code) == ("finished", "")
    stored = conversation_load(key=key)
    assert stored[1]["metadata"] == {"runtime": "anthropic", "fidelity": "provider_replayable", "epoch": 1}
    assert stored[1]["content"][0] == {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}

    _switch(workflow, "openai", "gpt-test")
    server.replies.append(_openai_answer_without_anthropic_state)
    second = _send_and_run(workflow, "What do I like?")

    assert server.failures == []
    assert (second.state, second.error_code, second.draft_text) == ("finished", "", "You like tea.")
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Noted: you like tea."}],
        "metadata": {"runtime": "anthropic", "fidelity": "portable", "epoch": 1},
    }
    assert text_of(stored[3]) == "You like tea."
    assert stored[3]["metadata"] == {"runtime": "openai", "fidelity": "provider_replayable", "epoch": 2}
    archive = ConversationArchive.objects.get(reason="provider_switch")
    assert archive.length == 2
    assert archive.messages[1]["content"][0]["signature"] == SIGNATURE

    page = api_client.get(f"/api/v1/workflows/{workflow.pk}/conversations/{key.agent_node_id}").json()
    assert [(m["runtime"], m["fidelity"], m["epoch"]) for m in page["results"]] == [
        (None, None, None),
        ("anthropic", "portable", 1),
        (None, None, None),
        ("openai", "provider_replayable", 2),
    ]
    # The badge: the runtime the conversation is on, and the lowest fidelity among the turns it holds
    # (the handed-off Anthropic turn is portable, and the next request carries it).
    assert page["fidelity"] == {"runtime": "openai", "fidelity": "portable", "epoch": 2}


def test_the_next_turn_on_the_same_runtime_stays_in_its_epoch_and_replays_its_own_state(owner, server):
    workflow = make_workflow(owner, _graph("anthropic", "claude-test", thinking_budget=1024))
    server.replies.append(_anthropic_thinking_answer)
    _send_and_run(workflow, "Remember that I like tea.")

    def replayed(received: Received) -> Reply:
        assistant = received.body["messages"][1]
        assert assistant["content"][0] == {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}
        assert assistant["content"][1] == {"type": "redacted_thinking", "data": REDACTED}
        return _anthropic_thinking_answer(received)

    server.replies.append(replayed)
    second = _send_and_run(workflow, "And coffee?")

    assert server.failures == []
    assert second.state == "finished"
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    assert [m["metadata"].get("epoch") for m in conversation_load(key=key) if m["role"] == "assistant"] == [
        1,
        1,
    ]
    assert ConversationArchive.objects.exists() is False


def test_a_switch_to_a_provider_that_is_not_configured_fails_the_run_and_hands_nothing_off(
    owner, server, settings
):
    workflow = make_workflow(owner, _graph("anthropic", "claude-test", thinking_budget=1024))
    server.replies.append(_anthropic_thinking_answer)
    _send_and_run(workflow, "Remember that I like tea.")
    _switch(workflow, "openai", "gpt-test")
    settings.OPENAI_API_KEY = ""  # the key goes after the deploy (which refuses a provider without one)

    run = _send_and_run(workflow, "What do I like?")

    assert (run.state, run.error_code) == ("error", "provider_not_configured")
    assert len(server.received) == 1
    assert ConversationArchive.objects.exists() is False
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    assert conversation_load(key=key)[1]["content"][0]["signature"] == SIGNATURE
