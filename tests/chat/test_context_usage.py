"""Context pressure, the usage ledger, request records and compaction on the product's path: whole
chat runs through the executor, the Anthropic SDK against a loopback server that reports known usage
(cache reads included) and can hold a stream until the test releases it."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run
from chat.models import ChatRun
from conversations.models import AgentConversation, CompactionAttempt, ProviderCall
from conversations.selectors import conversation_load
from conversations.services import conversation_clear, notes_add, notes_read
from conversations.types import ConversationKey
from graphs import services as graph_services
from opencompany.core import events as core_events
from opencompany.llm.policies import SUMMARIZE_INSTRUCTION
from opencompany.llm.wire import tool_calls_of, tool_result_of
from tests.conftest import demo_graph, make_workflow
from tests.llm.loopback import LoopbackServer, Reply, anthropic_sse

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = "You are helpful."
MODEL = "claude-test"


@pytest.fixture
def server(settings: Any) -> Iterator[LoopbackServer]:
    loopback = LoopbackServer().start()
    settings.ANTHROPIC_API_KEY = "sk-ant-test"
    settings.ANTHROPIC_BASE_URL = loopback.base_url
    settings.OPENCOMPANY_MODEL_PRICES = {MODEL: {"input": "3", "cached_input": "0.3", "output": "15"}}
    try:
        yield loopback
    finally:
        loopback.stop()


def _workflow(owner: Any, **parameters: Any) -> Any:
    graph = demo_graph(with_memory=False)
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update(
                {"provider": "anthropic", "model": MODEL, "max_output_tokens": 1000, **parameters}
            )
    return make_workflow(owner, graph=graph)


def _key(workflow: Any) -> ConversationKey:
    agent = next(n["id"] for n in workflow.graph["nodes"] if n["type"] == "aiAgent")
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=agent)


def _start(input_tokens: int, cache_read: int) -> dict[str, Any]:
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": 1,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": 0,
    }
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return {"type": "message_start", "message": message}


def text_reply(text: str, *, input_tokens: int = 100, cache_read: int = 0, output: int = 7) -> Reply:
    return Reply(
        sse=anthropic_sse(
            _start(input_tokens, cache_read),
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[:3]}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[3:]}},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": output},
            },
            {"type": "message_stop"},
        )
    )


def tool_reply(call_id: str, *, input_tokens: int = 100, cache_read: int = 0, output: int = 5) -> Reply:
    arguments = json.dumps({"q": "tea"})
    return Reply(
        sse=anthropic_sse(
            _start(input_tokens, cache_read),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": call_id, "name": "lookup", "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": arguments},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": output},
            },
            {"type": "message_stop"},
        )
    )


def _send(workflow: Any, text: str) -> str:
    return services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text).run.run_id


def _run(run_id: str) -> ChatRun:
    async_to_sync(execute_run)(run_id)
    return ChatRun.objects.get(run_id=run_id)


def _in_background(run_id: str) -> threading.Thread:
    thread = threading.Thread(target=lambda: async_to_sync(execute_run)(run_id), daemon=True)
    thread.start()
    return thread


def _row(api_client: Any, workflow: Any) -> dict[str, Any]:
    rows = api_client.get(f"/api/v1/workflows/{workflow.pk}/conversations").json()["results"]
    return next(r for r in rows if r["generation"] == 1)


def _pressure(api_client: Any, workflow: Any) -> tuple[int, int, int, bool]:
    row = _row(api_client, workflow)
    return (
        row["last_input_tokens"],
        row["pressure_headroom_tokens"],
        row["context_window"],
        row["pressure_estimated"],
    )


# --- pressure -----------------------------------------------------------------------------------------


def test_pressure_is_the_last_requests_reported_input_with_cached_reads_counted_once(
    server, owner, api_client
):
    workflow = _workflow(owner, context_window=8000)
    server.replies += [
        tool_reply("toolu_1", input_tokens=100, cache_read=400, output=5),
        text_reply("Tea it is.", input_tokens=50, cache_read=550, output=9),
    ]

    run = _run(_send(workflow, "What do I like?"))

    assert run.state == "finished"
    assert server.failures == []
    # 600 is the last request's whole prompt; the run's sum would be 1,100, a double-counted cache 1,150.
    assert _pressure(api_client, workflow) == (600, 1000, 8000, False)
    assert _row(api_client, workflow)["pressure_tokens"] == 1600
    calls = list(
        ProviderCall.objects.order_by("id").values_list(
            "kind", "status", "input_tokens", "cached_tokens", "output_tokens", "cost"
        )
    )
    assert calls == [
        ("step", "ok", 500, 400, 5, Decimal("0.000495")),  # (3·100 + 0.3·400 + 15·5) / 10⁶
        ("step", "ok", 600, 550, 9, Decimal("0.000450")),  # (3·50 + 0.3·550 + 15·9) / 10⁶
    ]
    usage = api_client.get(f"/api/v1/workflows/{workflow.pk}/usage").json()
    assert usage == {
        "calls": 2,
        "input_tokens": 1100,
        "cached_tokens": 950,
        "cache_write_tokens": 0,
        "output_tokens": 14,
        "cost": "0.000945",
        "cost_complete": True,
    }


def test_pressure_is_unchanged_while_a_run_streams(server, owner, api_client):
    workflow = _workflow(owner, context_window=8000)
    server.replies.append(text_reply("First answer.", input_tokens=300, cache_read=0))
    _run(_send(workflow, "first"))
    held = text_reply("Second answer.", input_tokens=120, cache_read=360)
    held.hold_after = 3
    server.replies.append(held)

    worker = _in_background(_send(workflow, "second"))
    assert held.held.wait(10)
    during = _pressure(api_client, workflow)
    held.release.set()
    worker.join(20)

    assert during == (300, 1000, 8000, False)
    assert _pressure(api_client, workflow) == (480, 1000, 8000, False)


def test_pressure_is_restored_with_the_branch_after_a_version_switch(server, owner, api_client):
    workflow = _workflow(owner, context_window=8000)
    server.replies += [
        text_reply("One.", input_tokens=200),
        text_reply("Two.", input_tokens=400),
        text_reply("Two, edited.", input_tokens=900),
    ]
    _run(_send(workflow, "first"))
    second = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="second")
    _run(second.run.run_id)
    assert _pressure(api_client, workflow)[0] == 400

    edit = services.chat_edit(workflow=workflow, message_uid=second.message.uid, text="second, edited")
    _run(edit.run.run_id)
    assert _pressure(api_client, workflow)[0] == 900

    services.chat_switch(workflow=workflow, message_uid=second.message.uid)
    assert _pressure(api_client, workflow) == (400, 1000, 8000, False)

    services.chat_switch(workflow=workflow, message_uid=edit.message.uid)
    assert _pressure(api_client, workflow) == (900, 1000, 8000, False)


# --- the ledger ---------------------------------------------------------------------------------------


def test_the_ledger_has_a_row_per_call_for_finished_stopped_and_failed_runs_and_outlives_new_chat_clear_and_reset(
    server, owner, api_client
):
    workflow = _workflow(owner)
    key = _key(workflow)
    server.replies.append(text_reply("Fine.", input_tokens=100))
    assert _run(_send(workflow, "ok run")).state == "finished"
    server.replies.append(
        Reply(
            status=400, body={"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
        )
    )
    assert _run(_send(workflow, "failing run")).state == "error"
    held = text_reply("A long answer the owner stops.", input_tokens=150)
    held.hold_after = 3
    server.replies.append(held)
    stopped = _send(workflow, "stopped run")
    worker = _in_background(stopped)
    assert held.held.wait(10)
    services.chat_stop(workflow=workflow, run_id=stopped)
    worker.join(20)
    held.release.set()
    assert ChatRun.objects.get(run_id=stopped).state == "stopped"

    # A call cut off (or refused) before the provider reported usage is kept, its counts marked unknown.
    expected = [("ok", 100, True), ("error", 0, False), ("stopped", 0, False)]
    rows = ProviderCall.objects.order_by("id")
    assert list(rows.values_list("status", "input_tokens", "usage_reported")) == expected

    services.chat_archive(workflow=workflow)  # New chat
    conversation_clear(key=key)
    graph_services.workflow_reset(workflow=workflow)

    assert list(rows.values_list("status", "input_tokens", "usage_reported")) == expected
    assert api_client.get(f"/api/v1/workflows/{workflow.pk}/usage").json()["calls"] == 3


# --- compaction on the product path -------------------------------------------------------------------


def test_clear_context_during_a_compaction_keeps_it_cleared_and_ends_the_run_context_changed(
    server, owner, api_client
):
    workflow = _workflow(owner, context_window=1024, compaction_ratio=0.05)
    key = _key(workflow)
    server.replies.append(text_reply("Noted.", input_tokens=40))
    _run(_send(workflow, "Please remember: " + "the owner likes green tea. " * 60))
    summary = text_reply("The owner likes green tea.", input_tokens=30)
    summary.hold_after = 2
    server.replies.append(summary)

    run_id = _send(workflow, "What do I like?")
    worker = _in_background(run_id)
    assert summary.held.wait(10)
    assert server.received[-1].body["system"][0]["text"] == SUMMARIZE_INSTRUCTION
    conversation_clear(key=key)
    summary.release.set()
    worker.join(20)

    run = ChatRun.objects.get(run_id=run_id)
    assert (run.state, run.error_code) == ("error", "context_changed")
    head = AgentConversation.objects.get(**key.filter_kwargs())
    assert (head.length, head.head_digest, head.notes, head.last_input_tokens) == (0, "", [], 0)
    assert conversation_load(key=key) == []
    attempt = CompactionAttempt.objects.get()
    assert (attempt.outcome, attempt.reason, attempt.messages_before) == ("failed", "context_changed", 3)
    assert list(ProviderCall.objects.order_by("id").values_list("kind", flat=True)) == ["step", "compaction"]
    assert len(server.received) == 2  # nothing was sent after the refused activation


def test_clear_context_while_an_answer_streams_keeps_it_cleared_and_ends_the_run_context_changed(
    server, owner
):
    workflow = _workflow(owner)
    key = _key(workflow)
    server.replies.append(text_reply("Earlier.", input_tokens=40))
    _run(_send(workflow, "earlier"))
    held = text_reply("An answer to a question the owner cleared.", input_tokens=80)
    held.hold_after = 3
    server.replies.append(held)

    run_id = _send(workflow, "now")
    worker = _in_background(run_id)
    assert held.held.wait(10)
    conversation_clear(key=key)
    held.release.set()
    worker.join(20)

    run = ChatRun.objects.get(run_id=run_id)
    assert (run.state, run.error_code) == ("error", "context_changed")
    assert conversation_load(key=key) == []
    head = AgentConversation.objects.get(**key.filter_kwargs())
    assert (head.length, head.last_input_tokens) == (0, 0)
    assert list(ProviderCall.objects.order_by("id").values_list("status", "input_tokens")) == [
        ("ok", 40),
        ("ok", 80),
    ]


def test_a_compaction_that_does_not_reduce_the_tokens_is_refused_recorded_and_changes_nothing(
    server, owner, api_client
):
    workflow = _workflow(owner, context_window=1024, compaction_ratio=0.05)
    key = _key(workflow)
    server.replies += [
        text_reply("Hello.", input_tokens=20),
        text_reply("x" * 500, input_tokens=30),  # the summary: longer than what it would replace
        text_reply("Still here.", input_tokens=40),
    ]
    _run(_send(workflow, "hi"))
    before = conversation_load(key=key)

    run = _run(_send(workflow, "and now?"))

    assert run.state == "finished"
    attempt = CompactionAttempt.objects.get()
    assert (attempt.outcome, attempt.reason) == ("refused", "not_smaller")
    assert attempt.tokens_after >= attempt.tokens_before
    stored = conversation_load(key=key)
    assert stored[:2] == before[:2]
    assert len(stored) == 4
    assert notes_read(key=key).entries == []
    assert server.received[2].body["messages"][0]["content"][0]["text"] == "hi"


def test_a_compaction_keeps_the_system_prompt_byte_identical_the_tool_pairs_and_the_notes(
    server, owner, api_client
):
    workflow = _workflow(owner, context_window=10_000, compaction_ratio=0.8)
    key = _key(workflow)
    notes_add(key=key, text="The owner is Ada.")
    server.replies += [
        tool_reply("toolu_1", input_tokens=500),
        text_reply("Looked it up.", input_tokens=600),
    ]
    _run(_send(workflow, "Look up tea. " + "Some context about the request. " * 40))
    server.replies += [
        # reported pressure passes 0.8 of the window after this call: the next iteration compacts
        tool_reply("toolu_2", input_tokens=9_000),
        text_reply("The owner asked to look up tea.", input_tokens=50),  # the summary call
        text_reply("Done again.", input_tokens=700),
    ]

    run = _run(_send(workflow, "Again, please."))

    assert run.state == "finished"
    assert server.failures == []
    attempt = CompactionAttempt.objects.get()
    assert (attempt.outcome, attempt.messages_before, attempt.messages_after) == ("applied", 7, 3)
    assert attempt.system_digest == hashlib.sha256(SYSTEM.encode()).hexdigest()
    after = server.received[-1].body
    assert after["system"][0]["text"] == SYSTEM
    assert "The owner is Ada." in after["system"][1]["text"]
    assert "The owner asked to look up tea." in after["system"][1]["text"]
    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert (
        [c["id"] for c in tool_calls_of(stored[1])]
        == [tool_result_of(stored[2])["tool_call_id"]]
        == ["toolu_2"]
    )
    assert notes_read(key=key).entries == [
        {"id": "n1", "text": "The owner is Ada."},
        {"id": "findings", "text": "The owner asked to look up tea."},
    ]
    last = ProviderCall.objects.filter(kind="step").latest("id")
    assert (last.system_digest, last.message_end) == (attempt.system_digest, 3)


# --- request records ----------------------------------------------------------------------------------


def test_the_request_record_references_what_was_sent_and_the_owner_alone_can_read_it(
    server, owner, api_client, other_client
):
    workflow = _workflow(owner, context_window=8000)
    key = _key(workflow)
    server.replies.append(text_reply("Hi there.", input_tokens=90))
    _run(_send(workflow, "hello"))
    base = f"/api/v1/workflows/{workflow.pk}/conversations/{key.agent_node_id}/requests"

    page = api_client.get(base).json()

    (record,) = page["results"]
    assert (page["next_cursor"], page["has_more"]) == (None, False)
    assert (
        record["kind"],
        record["provider"],
        record["model"],
        record["message_start"],
        record["message_end"],
    ) == (
        "step",
        "anthropic",
        MODEL,
        0,
        1,
    )
    assert record["system_digest"] == hashlib.sha256(SYSTEM.encode()).hexdigest()
    assert (record["runtime"], record["fidelity"]) == ("anthropic", "provider_replayable")
    assert record["settings"]["max_output_tokens"] == 1000
    detail = api_client.get(f"{base}/{record['id']}").json()
    assert detail["messages"] == conversation_load(key=key)[:1]
    assert other_client.get(base).status_code == 404
    assert other_client.get(f"{base}/{record['id']}").status_code == 404

    conversation_clear(key=key)
    assert api_client.get(f"{base}/{record['id']}").json()["messages"] is None


# --- nothing of it reaches logs or events ---------------------------------------------------------------


def test_request_records_ledger_and_attempts_carry_no_message_content_into_logs_events_or_rows(
    server, owner, monkeypatch, caplog
):
    secret = "zebra-violet-4417"
    workflow = _workflow(owner, context_window=1024, compaction_ratio=0.05)
    published: list[tuple[str, dict[str, Any]]] = []
    original = core_events._message

    def recording(type: str, data: dict[str, Any]) -> dict[str, Any]:
        published.append((type, copy.deepcopy(data)))
        return original(type, data)

    monkeypatch.setattr(core_events, "_message", recording)
    caplog.set_level(logging.DEBUG)
    server.replies += [
        text_reply(f"I keep {secret} in mind.", input_tokens=40),
        text_reply(f"Summary: {secret} " + "y" * 600, input_tokens=30),  # refused: not smaller
        text_reply(f"Again {secret}.", input_tokens=50),
    ]
    _run(_send(workflow, f"Remember {secret} " + "please " * 100))
    _run(_send(workflow, f"What is {secret}?"))

    assert CompactionAttempt.objects.count() == 1
    assert ProviderCall.objects.count() == 3
    for model in (ProviderCall, CompactionAttempt):
        for values in model.objects.values():
            assert secret not in json.dumps(values, default=str)
    ours = [r for r in caplog.records if r.name.split(".")[0] in {"chat", "conversations", "opencompany"}]
    assert len(ours) > 0
    assert [r.name for r in ours if secret in r.getMessage()] == []
    # Run events stream the answer to the owner's chat by design; every other event is metadata.
    others = [(t, d) for t, d in published if not t.startswith("run.")]
    assert {t for t, _ in others} >= {"context.updated"}
    assert [t for t, d in others if secret in json.dumps(d, default=str)] == []
