"""Agent runtimes that are programs, end to end: the real Claude Code and Codex CLI (installed by
bin/install-runtimes) run each firing against loopback servers speaking the Anthropic Messages and
OpenAI Responses streams, with the project's tools served to them over MCP from the run."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from chat import services
from chat.executor import execute_run
from chat.executor.runtime import agent_dirs
from chat.models import ChatRun
from conversations import services as conversations
from conversations.models import AgentConversation, ConversationArchive, ProviderCall
from conversations.selectors import conversation_load, conversation_runtime_binding
from conversations.types import ConversationKey
from graphs.models import Workflow
from memory import services as memory_services
from memory.models import MemoryItem, MemoryReceipt
from memory.scope import memory_scope
from opencompany.llm.wire import text_of
from tests.chat.runtime_support import (
    ProxyTrap,
    alive,
    anthropic_reply,
    anthropic_texts,
    claude_tools,
    processes_of_run,
    proxy_trap,
    require_programs,
    responses_namespace_tools,
    responses_reply,
    responses_user_texts,
)
from tests.conftest import demo_graph, make_workflow, node_id
from tests.llm.loopback import LoopbackServer, Received, Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.runtimes]

REMEMBER = {"operation": "remember", "content": "The owner likes tea."}


@pytest.fixture
def programs(settings: Any, tmp_path: Any) -> None:
    require_programs(settings.OPENCOMPANY_RUNTIMES_BIN)
    settings.OPENCOMPANY_RUNTIME_HOME = str(tmp_path / "runtimes")


@pytest.fixture
def trap(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProxyTrap]:
    yield from proxy_trap(monkeypatch)


@pytest.fixture
def anthropic(settings: Any, programs: None) -> Iterator[LoopbackServer]:
    server = LoopbackServer().start()
    settings.ANTHROPIC_API_KEY = "sk-ant-loopback"
    settings.ANTHROPIC_BASE_URL = server.base_url
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def openai(settings: Any, programs: None) -> Iterator[LoopbackServer]:
    server = LoopbackServer().start()
    settings.OPENAI_API_KEY = "sk-loopback"
    settings.OPENAI_BASE_URL = server.base_url + "/v1"
    try:
        yield server
    finally:
        server.stop()


def _graph(provider: str, model: str = "") -> dict[str, Any]:
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update({"provider": provider, "model": model})
    return graph


def _key(workflow: Workflow) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


def _send_and_run(workflow: Workflow, text: str) -> ChatRun:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    async_to_sync(execute_run)(admission.run.run_id)
    return ChatRun.objects.get(run_id=admission.run.run_id)


def _session_header(received: Received) -> str:
    return received.headers["x-claude-code-session-id"]


async def _run_and_stop(
    workflow: Workflow, run_id: str, ready: Callable[[], bool]
) -> tuple[str, dict[str, Any]]:
    """Execute the run and, on the same event loop (as the embedded default serves Stop), press Stop once
    `ready()` holds; times how long the run's processes outlive the Stop."""
    seen: dict[str, Any] = {}

    async def stop_when_ready() -> None:
        deadline = time.monotonic() + 30
        while not await sync_to_async(ready)() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        seen["processes"] = processes_of_run(run_id)
        started = time.monotonic()
        await sync_to_async(services.chat_stop)(workflow=workflow, run_id=run_id)
        while alive(set(seen["processes"])) and time.monotonic() - started < 10:
            await asyncio.sleep(0.01)
        seen["ended_after"] = time.monotonic() - started

    outcome, _ = await asyncio.gather(execute_run(run_id), stop_when_ready())
    return outcome, seen


# --- Claude Code ----------------------------------------------------------------------------------------


def test_a_claude_code_turn_with_a_memory_call_is_stored_as_observed_and_nothing_leaves_loopback(
    owner, other_owner, anthropic, trap
):
    workflow = make_workflow(owner, _graph("claude_code", "claude-test"))
    elsewhere = make_workflow(other_owner, demo_graph(), name="Elsewhere")
    other_scope = memory_scope(workflow=elsewhere, memory_node_id=node_id(elsewhere, "simpleMemory"))
    memory_services.memory_remember(scope=other_scope, content="Mallory likes coffee.", actor="owner:test")

    def call_memory(received: Received) -> Reply:
        assert received.path.startswith("/v1/messages")
        assert claude_tools(received) == ["memory", "notes"]
        assert anthropic_texts(received) == [("user", "Remember that I like tea.")]
        return anthropic_reply(
            ("text", "Noting it."), ("tool", "toolu_01", "mcp__opencompany__memory", REMEMBER)
        )

    def answer(received: Received) -> Reply:
        result = received.body["messages"][-1]["content"][0]
        assert result["type"] == "tool_result"
        assert result["tool_use_id"] == "toolu_01"
        assert result.get("is_error") is not True
        assert json.loads(result["content"][0]["text"])["memory"]["content"] == "The owner likes tea."
        return anthropic_reply(("text", "I will remember ", "that you like tea."))

    anthropic.replies += [call_memory, answer]

    run = _send_and_run(workflow, "Remember that I like tea.")

    assert anthropic.failures == []
    assert (run.state, run.error_code) == ("finished", "")
    assert run.draft_text == "Noting it.\n\nI will remember that you like tea."
    assert len(anthropic.received) == 2
    stored = conversation_load(key=_key(workflow))
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    observed = {"runtime": "claude_code", "fidelity": "observable", "epoch": 1}
    assert stored[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Noting it."},
            {"type": "tool_call", "id": "toolu_01", "name": "memory", "arguments": REMEMBER},
        ],
        "metadata": observed,
    }
    result = stored[2]["content"][0]
    assert (result["tool_call_id"], result["name"], result["status"]) == ("toolu_01", "memory", "ok")
    assert stored[3] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "I will remember that you like tea."}],
        "metadata": observed,
    }
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    assert list(MemoryItem.objects.filter(namespace=scope.namespace).values_list("content", flat=True)) == [
        "The owner likes tea."
    ]
    assert (
        json.loads(result["content"])["memory"]["id"]
        == MemoryItem.objects.get(namespace=scope.namespace).memory_id
    )
    assert list(
        MemoryItem.objects.filter(namespace=other_scope.namespace).values_list("content", flat=True)
    ) == ["Mallory likes coffee."]
    assert MemoryItem.objects.count() == 2
    assert MemoryReceipt.objects.get(namespace=scope.namespace).operation_id == f"{run.run_id}:toolu_01"
    head = AgentConversation.objects.get(workflow_id=workflow.pk)
    assert (head.input_tokens, head.output_tokens) == (80, 14)
    # The program's turn is one ledger row with the usage it reported; its context cannot be counted
    # from here, so the pressure is an estimate and says so.
    call = ProviderCall.objects.get(workflow_id=workflow.pk)
    assert (call.provider, call.status, call.input_tokens, call.output_tokens) == (
        "claude_code",
        "ok",
        80,
        14,
    )
    assert (call.runtime, call.fidelity) == ("claude_code", "observable")
    assert head.pressure_estimated is True
    assert head.last_input_tokens > 0
    assert trap.attempts == []
    assert processes_of_run(run.run_id) == {}


def test_claude_codes_next_firing_resumes_the_bound_session(owner, anthropic):
    workflow = make_workflow(owner, _graph("claude_code", "claude-test"))
    key = _key(workflow)
    anthropic.replies.append(anthropic_reply(("text", "Hello, I am here.")))
    _send_and_run(workflow, "Hi")
    binding = conversation_runtime_binding(key=key)
    head = AgentConversation.objects.get(workflow_id=workflow.pk)
    first_session = _session_header(anthropic.received[0])

    def resumed(received: Received) -> Reply:
        assert _session_header(received) == first_session
        assert anthropic_texts(received) == [
            ("user", "Hi"),
            ("assistant", "Hello, I am here."),
            ("user", "What did I say?"),
        ]
        return anthropic_reply(("text", "You said hi."))

    anthropic.replies.append(resumed)
    second = _send_and_run(workflow, "What did I say?")

    assert anthropic.failures == []
    assert binding == {
        "runtime": "claude_code",
        "session_id": first_session,
        "length": 2,
        "digest": head.head_digest,
    }
    assert (second.state, second.draft_text) == ("finished", "You said hi.")
    head.refresh_from_db()
    assert conversation_runtime_binding(key=key) == {
        "runtime": "claude_code",
        "session_id": first_session,
        "length": 4,
        "digest": head.head_digest,
    }
    assert [text_of(m) for m in conversation_load(key=key)] == [
        "Hi",
        "Hello, I am here.",
        "What did I say?",
        "You said hi.",
    ]


def test_a_conversation_changed_since_the_session_saw_it_starts_a_new_session_with_the_transcript(
    owner, anthropic
):
    workflow = make_workflow(owner, _graph("claude_code", "claude-test"))
    key = _key(workflow)
    anthropic.replies.append(anthropic_reply(("text", "Hello, I am here.")))
    _send_and_run(workflow, "Hi")
    first_session = _session_header(anthropic.received[0])
    stored = conversation_load(key=key)
    stored[1] = {**stored[1], "content": [{"type": "text", "text": "Hello (summarized)."}]}
    conversations.conversation_save(key=key, messages=stored)

    def fresh(received: Received) -> Reply:
        assert _session_header(received) != first_session
        [(role, prompt)] = anthropic_texts(received)
        assert role == "user"
        assert "<transcript>\nOwner: Hi\nAssistant: Hello (summarized).\n</transcript>" in prompt
        assert prompt.endswith("\n\nAnd now?")
        return anthropic_reply(("text", "Fresh start."))

    anthropic.replies.append(fresh)
    run = _send_and_run(workflow, "And now?")

    assert anthropic.failures == []
    assert run.state == "finished"
    binding = conversation_runtime_binding(key=key)
    assert binding["session_id"] == _session_header(anthropic.received[1])
    assert binding["length"] == 4


def test_clear_archives_the_session_binding_and_the_binding_is_never_exported(owner, anthropic, api_client):
    workflow = make_workflow(owner, _graph("claude_code", "claude-test"))
    key = _key(workflow)
    anthropic.replies.append(anthropic_reply(("text", "Hello, I am here.")))
    _send_and_run(workflow, "Hi")
    binding = conversation_runtime_binding(key=key)
    session = binding["session_id"]

    page = api_client.get(f"/api/v1/workflows/{workflow.pk}/conversations/{key.agent_node_id}")
    listing = api_client.get(f"/api/v1/workflows/{workflow.pk}/conversations")
    export = api_client.get(f"/api/v1/workflows/{workflow.pk}/export")
    cleared = api_client.delete(f"/api/v1/workflows/{workflow.pk}/conversations/{key.agent_node_id}")

    assert [r.status_code for r in (page, listing, export, cleared)] == [200, 200, 200, 204]
    for response in (page, listing, export):
        assert session not in response.content.decode()
        assert "runtime_binding" not in response.content.decode()
    assert ConversationArchive.objects.get(reason="cleared").runtime_binding == binding
    assert conversation_runtime_binding(key=key) == {}

    def new_session(received: Received) -> Reply:
        assert _session_header(received) != session
        assert anthropic_texts(received) == [("user", "Hello again")]
        return anthropic_reply(("text", "Nice to meet you."))

    anthropic.replies.append(new_session)
    run = _send_and_run(workflow, "Hello again")

    assert anthropic.failures == []
    assert run.state == "finished"
    assert conversation_runtime_binding(key=key)["session_id"] == _session_header(anthropic.received[1])


def test_stop_ends_claude_codes_process_group_within_two_seconds_and_saves_the_turn_as_stopped(
    owner, anthropic
):
    workflow = make_workflow(owner, _graph("claude_code", "claude-test"))
    key = _key(workflow)
    held = anthropic_reply(("text", "Partial answer ", "never sent"), hold_after=3)
    anthropic.replies.append(held)
    admission = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Tell me a story"
    )
    run_id = admission.run.run_id

    def streaming() -> bool:
        return bool(ChatRun.objects.filter(run_id=run_id).values_list("draft_text", flat=True).first())

    try:
        outcome, seen = async_to_sync(_run_and_stop)(workflow, run_id, streaming)
    finally:
        held.release.set()

    assert outcome == "stopped"
    assert len(seen["processes"]) >= 2, "the program and its MCP bridge were not seen while it streamed"
    assert len(set(seen["processes"].values())) == 1  # one process group: the program and its children
    assert seen["ended_after"] < 2.0
    assert alive(set(seen["processes"])) == set()
    run = ChatRun.objects.get(run_id=run_id)
    assert (run.state, run.draft_text) == ("stopped", "Partial answer ")
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Partial answer "}],
        "metadata": {"status": "stopped", "runtime": "claude_code", "fidelity": "portable", "epoch": 1},
    }
    assert conversation_runtime_binding(key=key) == {}
    # The request record says what the firing carried, not what its cut-off answer kept.
    call = ProviderCall.objects.get(run_id=run_id)
    assert (call.runtime, call.fidelity, call.status) == ("claude_code", "observable", "stopped")


def _clear_during_the_turn(workflow: Workflow, held: Reply) -> tuple[ConversationKey, str]:
    """Send, wait until the program's provider stream is held mid-answer, Clear the Context, let the
    stream go on; returns the key and the run's id once the run has ended."""
    key = _key(workflow)
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="A question")
    run_id = admission.run.run_id
    worker = threading.Thread(target=lambda: async_to_sync(execute_run)(run_id), daemon=True)
    worker.start()
    try:
        assert held.held.wait(30)
        conversations.conversation_clear(key=key)
    finally:
        held.release.set()
        worker.join(60)
    return key, run_id


def test_clear_during_a_claude_code_turn_ends_the_run_context_changed_and_keeps_the_context_cleared(
    owner, anthropic
):
    workflow = make_workflow(owner, _graph("claude_code", "claude-test"))
    held = anthropic_reply(("text", "An answer to a question ", "the owner cleared."), hold_after=3)
    anthropic.replies.append(held)

    key, run_id = _clear_during_the_turn(workflow, held)

    run = ChatRun.objects.get(run_id=run_id)
    assert (run.state, run.error_code) == ("error", "context_changed")
    assert conversation_load(key=key) == []
    assert AgentConversation.objects.get(**key.filter_kwargs()).length == 0
    assert conversation_runtime_binding(key=key) == {}
    assert ConversationArchive.objects.get(reason="cleared").length == 1  # only the owner's question


def test_a_runtime_that_is_not_installed_fails_the_run_before_starting_anything(
    owner, anthropic, settings, tmp_path
):
    workflow = make_workflow(owner, _graph("claude_code", "claude-test"))
    # Uninstalled after the deploy, which refuses an agent whose program is missing.
    settings.OPENCOMPANY_RUNTIMES_BIN = str(tmp_path / "empty")

    run = _send_and_run(workflow, "Hi")

    assert (run.state, run.error_code) == ("error", "provider_not_configured")
    assert "bin/install-runtimes" in run.error_message
    assert anthropic.received == []
    assert [m["role"] for m in conversation_load(key=_key(workflow))] == ["user"]


# --- Codex CLI ------------------------------------------------------------------------------------------


def test_a_codex_turn_with_a_memory_call_is_stored_as_observed_and_the_next_firing_gets_the_transcript(
    owner, openai, trap
):
    workflow = make_workflow(owner, _graph("codex_cli", "gpt-test"))
    key = _key(workflow)

    def call_memory(received: Received) -> Reply:
        assert received.path == "/v1/responses"
        assert received.headers["authorization"] == "Bearer sk-loopback"
        assert responses_namespace_tools(received) == ["memory", "notes"]
        assert responses_user_texts(received)[-1].strip() == "Remember that I like tea."
        return responses_reply("Noting it.", ("mcp__opencompany", "memory", REMEMBER))

    def answer(received: Received) -> Reply:
        output = [i for i in received.body["input"] if i.get("type") == "function_call_output"]
        assert len(output) == 1
        assert "The owner likes tea." in json.dumps(output[0]["output"])
        return responses_reply("I will remember that you like tea.")

    openai.replies += [call_memory, answer]
    first = _send_and_run(workflow, "Remember that I like tea.")

    assert openai.failures == []
    assert (first.state, first.error_code) == ("finished", "")
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    observed = {"runtime": "codex_cli", "fidelity": "observable", "epoch": 1}
    [text, call] = stored[1]["content"]
    assert text == {"type": "text", "text": "Noting it."}
    assert (call["type"], call["name"], call["arguments"]) == ("tool_call", "memory", REMEMBER)
    assert re.fullmatch(r"[0-9a-f-]{36}_item_\d+", call["id"])
    assert stored[1]["metadata"] == observed
    result = stored[2]["content"][0]
    assert (result["tool_call_id"], result["name"], result["status"]) == (call["id"], "memory", "ok")
    assert stored[3] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "I will remember that you like tea."}],
        "metadata": observed,
    }
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    assert list(MemoryItem.objects.values_list("namespace", "content")) == [
        (scope.namespace, "The owner likes tea.")
    ]
    assert MemoryReceipt.objects.get().operation_id == f"{first.run_id}:call_loop"
    assert conversation_runtime_binding(key=key) == {}

    def with_transcript(received: Received) -> Reply:
        assert [i for i in received.body["input"] if i.get("role") == "assistant"] == []
        prompt = responses_user_texts(received)[-1]
        assert (
            "Owner: Remember that I like tea.\nAssistant: Noting it.\nAssistant called tool memory with "
            in prompt
        )
        assert "Tool memory result (ok): " in prompt
        assert "Assistant: I will remember that you like tea.\n</transcript>" in prompt
        assert prompt.rstrip().endswith("What do I like?")
        return responses_reply("You like tea.")

    openai.replies.append(with_transcript)
    second = _send_and_run(workflow, "What do I like?")

    assert openai.failures == []
    assert (second.state, second.draft_text) == ("finished", "You like tea.")
    assert trap.attempts == []
    assert [m["role"] for m in conversation_load(key=key)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ] * 1 + [
        "user",
        "assistant",
    ]


def test_stop_ends_codexs_process_group_within_two_seconds_and_keeps_the_turn_as_far_as_it_went(
    owner, openai
):
    workflow = make_workflow(owner, _graph("codex_cli", "gpt-test"))
    key = _key(workflow)
    held = responses_reply("Still thinking")
    held.hold_after = 1
    openai.replies += [responses_reply("Looking.", ("mcp__opencompany", "memory", REMEMBER)), held]
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Remember tea")
    run_id = admission.run.run_id

    try:
        outcome, seen = async_to_sync(_run_and_stop)(workflow, run_id, held.held.is_set)
    finally:
        held.release.set()

    assert outcome == "stopped"
    # Codex CLI starts its MCP server in a group of its own: the program's group and the bridge's.
    assert len(seen["processes"]) >= 3, "the program and its MCP bridge were not seen while it waited"
    assert len(set(seen["processes"].values())) == 2
    assert seen["ended_after"] < 2.0
    assert alive(set(seen["processes"])) == set()
    assert ChatRun.objects.get(run_id=run_id).state == "stopped"
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    assert stored[1]["metadata"] == {"runtime": "codex_cli", "fidelity": "observable", "epoch": 1}
    assert stored[2]["content"][0]["status"] == "ok"
    assert MemoryItem.objects.count() == 1


def test_clear_during_a_codex_turn_ends_the_run_context_changed_and_keeps_the_context_cleared(owner, openai):
    workflow = make_workflow(owner, _graph("codex_cli", "gpt-test"))
    held = responses_reply("An answer to a question the owner cleared.")
    held.hold_after = 1
    openai.replies.append(held)

    key, run_id = _clear_during_the_turn(workflow, held)

    run = ChatRun.objects.get(run_id=run_id)
    assert (run.state, run.error_code) == ("error", "context_changed")
    assert conversation_load(key=key) == []
    assert ConversationArchive.objects.get(reason="cleared").length == 1  # only the owner's question


def test_a_bound_session_the_program_no_longer_has_is_replaced_by_a_new_one_with_the_transcript(
    owner, anthropic, settings
):
    workflow = make_workflow(owner, _graph("claude_code", "claude-test"))
    key = _key(workflow)
    anthropic.replies.append(anthropic_reply(("text", "Hello, I am here.")))
    _send_and_run(workflow, "Hi")
    lost = conversation_runtime_binding(key=key)["session_id"]
    home, _ = agent_dirs(workflow_id=workflow.pk, generation=1, agent_node_id=key.agent_node_id)
    shutil.rmtree(home / ".claude")  # as on a process that does not share OPENCOMPANY_RUNTIME_HOME

    def fresh(received: Received) -> Reply:
        assert _session_header(received) != lost
        [(role, prompt)] = anthropic_texts(received)
        assert role == "user"
        assert "<transcript>\nOwner: Hi\nAssistant: Hello, I am here.\n</transcript>" in prompt
        return anthropic_reply(("text", "Starting over."))

    anthropic.replies.append(fresh)
    run = _send_and_run(workflow, "Still there?")

    assert anthropic.failures == []
    assert (run.state, run.draft_text) == ("finished", "Starting over.")
    assert len(anthropic.received) == 2
    assert conversation_runtime_binding(key=key)["session_id"] == _session_header(anthropic.received[1])
    assert [m["role"] for m in conversation_load(key=key)] == ["user", "assistant", "user", "assistant"]
