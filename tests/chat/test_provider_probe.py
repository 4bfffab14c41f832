"""An OpenAI-compatible server is probed on the first run for a model, the answer is kept (and shown to
staff), later runs reuse it, and what the server lacks is not sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse
from django.utils import timezone

from chat import services
from chat.executor import execute_run
from chat.models import ChatRun, ProviderProbe
from conversations.selectors import conversation_load
from conversations.types import ConversationKey
from tests.conftest import demo_graph, make_workflow, node_id
from tests.llm.loopback import LoopbackServer, Received, Reply, openai_sse

pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}


@pytest.fixture
def server(settings: Any) -> Iterator[LoopbackServer]:
    loopback = LoopbackServer().start()
    settings.OPENAI_COMPATIBLE_BASE_URL = loopback.base_url + "/v1"
    settings.OPENAI_COMPATIBLE_API_KEY = ""
    try:
        yield loopback
    finally:
        loopback.stop()


def _chunk(delta=None, finish=None, usage=None):
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "llama", "choices": []}
    if delta is not None or finish is not None:
        chunk["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _no_stream_options(received: Received) -> Reply:
    """A server that streams and calls tools, but refuses `stream_options` and `parallel_tool_calls`."""
    body = received.body
    if "stream_options" in body or "parallel_tool_calls" in body:
        return Reply(
            status=400, body={"error": {"message": "unknown field", "type": "invalid_request_error"}}
        )
    if "tools" in body and body["messages"][-1]["content"].startswith("Call the record_probe tool"):
        call = {
            "index": 0,
            "id": "call_p",
            "type": "function",
            "function": {"name": "record_probe", "arguments": '{"value": "alpha"}'},
        }
        return Reply(sse=openai_sse(_chunk({"tool_calls": [call]}), _chunk({}, finish="tool_calls")))
    return Reply(
        sse=openai_sse(_chunk({"content": "Hello from the local model."}), _chunk({}, finish="stop"))
    )


def _workflow(owner: Any) -> Any:
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": "openai_compatible", "model": "llama"})
    return make_workflow(owner, graph)


def _send_and_run(workflow: Any, text: str) -> ChatRun:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    async_to_sync(execute_run)(admission.run.run_id)
    return ChatRun.objects.get(run_id=admission.run.run_id)


def test_the_first_run_probes_the_server_and_later_runs_reuse_the_kept_answer(owner, server):
    workflow = _workflow(owner)
    server.replies.extend([_no_stream_options] * 7)

    first = _send_and_run(workflow, "Hello")

    assert (first.state, first.draft_text) == ("finished", "Hello from the local model.")
    probe = ProviderProbe.objects.get()
    assert (probe.base_url, probe.model, probe.fidelity) == (server.base_url + "/v1", "llama", "portable")
    assert probe.capabilities == {
        "tools": True,
        "json_arguments": True,
        "streaming_usage": False,
        "parallel_tool_calls": False,
        "continuation": True,
        "continuation_fields": [],
    }
    chat = server.received[-1].body
    assert "stream_options" not in chat
    assert "parallel_tool_calls" not in chat
    assert [t["function"]["name"] for t in chat["tools"]] == ["memory", "notes"]
    assert len(server.received) == 6  # two text probes, two tool probes, the continuation, the answer

    server.replies.append(_no_stream_options)
    second = _send_and_run(workflow, "Again")

    assert second.state == "finished"
    assert len(server.received) == 7  # no probe this time
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))
    turns = [m["metadata"] for m in conversation_load(key=key) if m["role"] == "assistant"]
    assert turns == [{"runtime": "openai_compatible", "fidelity": "portable", "epoch": 1}] * 2


def test_a_kept_answer_past_its_age_is_probed_again(owner, server, settings):
    settings.OPENCOMPANY_PROVIDER_PROBE_TTL_S = 60
    workflow = _workflow(owner)
    server.replies.extend([_no_stream_options] * 12)
    _send_and_run(workflow, "Hello")
    ProviderProbe.objects.update(probed_at=timezone.now() - timedelta(seconds=61))

    _send_and_run(workflow, "Again")

    assert len(server.received) == 12
    assert ProviderProbe.objects.count() == 1
    assert ProviderProbe.objects.get().probed_at > timezone.now() - timedelta(seconds=60)


def test_a_server_that_cannot_be_probed_fails_the_run_with_provider_error_and_keeps_nothing(owner, server):
    workflow = _workflow(owner)
    server.replies.append(Reply(status=503, body={"error": {"message": "loading"}}))

    run = _send_and_run(workflow, "Hello")

    assert (run.state, run.error_code) == ("error", "provider_error")
    assert ProviderProbe.objects.exists() is False


def test_staff_see_the_probe_and_can_have_it_run_again(owner, server, client, staff):
    workflow = _workflow(owner)
    server.replies.extend([_no_stream_options] * 6)
    _send_and_run(workflow, "Hello")
    probe = ProviderProbe.objects.get()
    client.force_login(staff)

    page = client.get(reverse("admin:chat_providerprobe_changelist"))
    done = client.post(
        reverse("admin:chat_providerprobe_changelist"),
        {"action": "probe_again", "_selected_action": [probe.pk]},
    )

    assert page.status_code == 200
    assert "llama" in page.text
    assert "portable" in page.text
    assert done.status_code == 302
    assert ProviderProbe.objects.exists() is False


def test_staff_see_each_stored_turns_runtime_and_fidelity(owner, server, client, staff):
    workflow = _workflow(owner)
    server.replies.extend([_no_stream_options] * 6)
    _send_and_run(workflow, "Hello")
    client.force_login(staff)

    messages_page = client.get(reverse("admin:conversations_conversationmessage_changelist"))
    from conversations.models import AgentConversation

    head = AgentConversation.objects.get()
    head_page = client.get(reverse("admin:conversations_agentconversation_change", args=[head.pk]))

    assert messages_page.status_code == 200
    assert messages_page.text.count("openai_compatible · portable · epoch 1") == 1
    assert head_page.status_code == 200
    assert (
        head_page.text.count("openai_compatible · portable · epoch 1") == 2
    )  # the latest turn, the inline row


def test_the_probe_command_probes_now_and_keeps_the_answer(server):
    from io import StringIO

    from django.core.management import call_command

    server.replies.extend([_no_stream_options] * 5)
    out = StringIO()

    call_command("probe_provider", "llama", stdout=out)

    assert json.loads(out.getvalue()) == {
        "model": "llama",
        "fidelity": "portable",
        "tools": True,
        "json_arguments": True,
        "streaming_usage": False,
        "parallel_tool_calls": False,
        "continuation": True,
        "continuation_fields": [],
    }
    assert ProviderProbe.objects.get().model == "llama"


def test_the_probe_command_reports_a_server_it_cannot_probe_and_keeps_nothing(server):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    server.replies.append(Reply(status=503, body={"error": {"message": "loading"}}))

    with pytest.raises(CommandError, match="provider_error"):
        call_command("probe_provider", "llama")
    assert ProviderProbe.objects.exists() is False
