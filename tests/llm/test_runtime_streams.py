"""The runtime programs' output streams as the app reads them, their launch, and the commit order of a
turn: pure, over lines in the programs' formats (the real programs run in tests/chat/test_runtimes.py)."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import pytest

from opencompany.llm.commit import Committer
from opencompany.llm.providers.base import (
    PROVIDER_NOT_CONFIGURED,
    ProviderError,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from opencompany.llm.runtimes import McpEndpoint, RuntimeConfig, TurnRequest, firing_prompt
from opencompany.llm.runtimes.base import Call, Delta, Done, Result, Session, Text
from opencompany.llm.runtimes.claude_code import ClaudeCode, ClaudeStreamParser
from opencompany.llm.runtimes.codex_cli import CodexCli, CodexStreamParser
from opencompany.llm.runtimes.turn import INTERRUPTED_TEXT, UNREPORTED_TEXT, _Turn
from opencompany.llm.wire import make_assistant, make_text, make_tool_call, make_user

from .helpers import FakeSink

CALL = make_tool_call("toolu_1", "memory", {"operation": "recall", "query": "tea"})


def _config(tmp_path: Path, **values: str) -> RuntimeConfig:
    for name in ("claude", "codex"):
        (tmp_path / name).write_text("#!/bin/sh\n")
    return RuntimeConfig(bin_dir=str(tmp_path), options=values)


def _request(tmp_path: Path, **values: object) -> TurnRequest:
    defaults: dict[str, object] = {
        "prompt": "Hi",
        "instructions": "Be brief.",
        "model": "m",
        "home": tmp_path / "home",
        "workdir": tmp_path / "work",
    }
    return TurnRequest(**{**defaults, **values})  # type: ignore[arg-type]


# --- Claude Code's stream-json --------------------------------------------------------------------------


def test_claude_lines_become_session_deltas_blocks_usage_and_done():
    parser = ClaudeStreamParser()
    lines = [
        {"type": "system", "subtype": "init", "session_id": "s-1"},
        {"type": "system", "subtype": "status", "status": "requesting", "session_id": "s-1"},
        {
            "type": "stream_event",
            "event": {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Che"},
            },
            "parent_tool_use_id": None,
        },
        {
            "type": "stream_event",
            "event": {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "x"},
            },
            "parent_tool_use_id": None,
        },
        {
            "type": "assistant",
            "message": {
                "id": "msg_1",
                "content": [
                    {"type": "thinking", "thinking": "hidden", "signature": "sig"},
                    {"type": "text", "text": "Che"},
                ],
            },
            "parent_tool_use_id": None,
        },
        {
            "type": "assistant",
            "message": {
                "id": "msg_1",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "mcp__opencompany__memory",
                        "input": CALL["arguments"],
                    }
                ],
            },
            "parent_tool_use_id": None,
        },
        {
            "type": "user",
            "message": {
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "[]"}],
                    }
                ]
            },
            "parent_tool_use_id": None,
        },
        {
            "type": "assistant",
            "message": {"id": "msg_2", "content": [{"type": "text", "text": "Nothing about tea."}]},
            "parent_tool_use_id": None,
        },
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": 30,
                "cache_creation_input_tokens": 5,
                "output_tokens": 7,
            },
        },
    ]

    events = [event for line in lines for event in parser.feed(line)]

    assert events == [
        Session("s-1"),
        Delta("Che"),
        Text("Che"),
        Call(CALL),
        Result("toolu_1", "[]", "ok"),
        Delta("Nothing about tea."),
        Text("Nothing about tea."),
        Usage(input_tokens=45, output_tokens=7, cache_read_tokens=30, cache_write_tokens=5),
        Done(),
    ]


def test_claude_subagent_lines_and_api_error_wording_are_not_part_of_the_turn():
    parser = ClaudeStreamParser()
    subagent = {
        "type": "assistant",
        "message": {"id": "m", "content": [{"type": "text", "text": "inner"}]},
        "parent_tool_use_id": "toolu_task",
    }
    api_error = {
        "type": "assistant",
        "message": {
            "id": "m2",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": "API Error: 500"}],
        },
        "parent_tool_use_id": None,
        "is_api_error_message": True,
        "error": "server_error",
        "api_error_status": 500,
    }
    failed = {"type": "result", "subtype": "success", "is_error": True, "api_error_status": 500, "usage": {}}

    events = [event for line in (subagent, api_error, failed) for event in parser.feed(line)]

    assert len(events) == 2
    assert events[0] == Usage()
    done = events[1]
    assert isinstance(done, Done)
    assert done.error is not None
    assert (done.error.code, done.error.status) == ("provider_error", 500)


def test_claude_launch_resumes_a_bound_session_and_keeps_instructions_and_secrets_off_the_command_line(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", "postgres://user:secret@db/opencompany")
    monkeypatch.setenv("SECRET_KEY", "django-secret")
    runtime = ClaudeCode(
        _config(tmp_path, anthropic_api_key="sk-ant", anthropic_base_url="http://127.0.0.1:9")
    )
    endpoint = McpEndpoint(
        "/usr/bin/python3", ("-I", "bridge.py"), {"OPENCOMPANY_MCP_TOKEN": "t"}, ("memory",)
    )

    resumed = runtime.launch(_request(tmp_path, session_id="s-1", resume=True, mcp=endpoint))
    fresh = runtime.launch(_request(tmp_path, session_id="s-2"))
    stateless = runtime.launch(_request(tmp_path))

    assert "--resume=s-1" in resumed.argv
    assert "--session-id=s-2" in fresh.argv
    assert "--no-session-persistence" in stateless.argv
    assert "--allowedTools=mcp__opencompany__memory" in resumed.argv
    assert resumed.stdin == b"Hi"
    assert all("Be brief." not in arg for arg in resumed.argv)
    assert "Be brief." in resumed.files.values()
    assert resumed.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert resumed.env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert resumed.env["DISABLE_TELEMETRY"] == "1"
    assert "DATABASE_URL" not in resumed.env
    assert "SECRET_KEY" not in resumed.env


def test_a_program_that_is_not_installed_or_has_no_key_is_not_configured(tmp_path):
    with pytest.raises(ProviderError) as missing:
        ClaudeCode(RuntimeConfig(bin_dir=str(tmp_path / "nowhere"), options={"anthropic_api_key": "k"}))
    with pytest.raises(ProviderError) as keyless:
        CodexCli(_config(tmp_path))

    assert missing.value.code == PROVIDER_NOT_CONFIGURED
    assert "bin/install-runtimes" in missing.value.message
    assert keyless.value.code == PROVIDER_NOT_CONFIGURED
    assert "OPENAI_API_KEY" in keyless.value.message


# --- Codex CLI's exec --json ----------------------------------------------------------------------------


def test_codex_items_become_calls_and_results_with_run_unique_ids():
    parser = CodexStreamParser()
    mcp = {
        "id": "item_2",
        "type": "mcp_tool_call",
        "server": "opencompany",
        "tool": "memory",
        "arguments": CALL["arguments"],
        "result": None,
        "error": None,
        "status": "in_progress",
    }
    lines = [
        {"type": "thread.started", "thread_id": "t-9"},
        {
            "type": "item.completed",
            "item": {"id": "item_0", "type": "error", "message": "Model metadata not found"},
        },
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": "Looking."}},
        {"type": "item.started", "item": mcp},
        {
            "type": "item.completed",
            "item": {**mcp, "status": "completed", "result": {"content": [{"type": "text", "text": "[]"}]}},
        },
        {
            "type": "item.completed",
            "item": {
                "id": "item_3",
                "type": "command_execution",
                "command": "ls",
                "aggregated_output": "no such file",
                "exit_code": 2,
                "status": "failed",
            },
        },
        {"type": "item.completed", "item": {"id": "item_4", "type": "reasoning", "text": "hmm"}},
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 50,
                "cached_input_tokens": 20,
                "cache_write_input_tokens": 0,
                "output_tokens": 6,
            },
        },
    ]

    events = [event for line in lines for event in parser.feed(line)]

    assert events == [
        Session("t-9"),
        Delta("Looking."),
        Text("Looking."),
        Call(make_tool_call("t-9_item_2", "memory", CALL["arguments"])),
        Result("t-9_item_2", "[]", "ok"),
        Call(make_tool_call("t-9_item_3", "command_execution", {"command": "ls"})),
        Result("t-9_item_3", "no such file", "error"),
        Usage(input_tokens=50, output_tokens=6, cache_read_tokens=20, cache_write_tokens=0),
        Done(),
    ]


def test_a_failed_codex_turn_reports_the_error():
    parser = CodexStreamParser()

    parser.feed({"type": "error", "message": "stream disconnected"})
    [done] = parser.feed({"type": "turn.failed", "error": {"message": "unexpected status 500"}})

    assert isinstance(done, Done)
    assert done.error is not None
    assert done.error.code == "provider_error"
    assert done.error.message == "Codex CLI ended the turn with an error: unexpected status 500"


def test_codex_configuration_is_valid_toml_whatever_the_instructions_hold(tmp_path):
    runtime = CodexCli(_config(tmp_path, openai_api_key="sk", openai_base_url="http://127.0.0.1:9/v1"))
    instructions = 'Say "hi"\n\\ then [brackets] = “quotes” ünïcode\ttab'
    endpoint = McpEndpoint(
        "/usr/bin/python3", ("-I", "bridge.py"), {"OPENCOMPANY_MCP_TOKEN": "t"}, ("memory", "notes")
    )

    launch = runtime.launch(_request(tmp_path, instructions=instructions, mcp=endpoint))
    [config_text] = launch.files.values()
    config = tomllib.loads(config_text)

    assert config["developer_instructions"] == instructions
    assert config["model"] == "m"
    assert config["model_provider"] == "opencompany"
    assert config["model_providers"]["opencompany"] == {
        "name": "OpenCompany",
        "base_url": "http://127.0.0.1:9/v1",
        "env_key": "OPENCOMPANY_CODEX_API_KEY",
        "wire_api": "responses",
        "request_max_retries": 0,
        "stream_max_retries": 0,
    }
    assert config["mcp_servers"]["opencompany"] == {
        "command": "/usr/bin/python3",
        "args": ["-I", "bridge.py"],
        "env": {"OPENCOMPANY_MCP_TOKEN": "t"},
        "enabled_tools": ["memory", "notes"],
        "default_tools_approval_mode": "approve",
        "startup_timeout_sec": 30,
    }
    assert config["analytics"] == {"enabled": False}
    assert config["check_for_update_on_startup"] is False
    assert set(config["features"].values()) == {False}
    assert "--ephemeral" in launch.argv
    assert launch.env["OPENCOMPANY_CODEX_API_KEY"] == "sk"
    assert launch.stdin == b"Hi"


# --- the portable transcript ----------------------------------------------------------------------------


def test_a_first_firing_prompt_is_the_message_and_a_later_one_carries_the_transcript():
    first = firing_prompt([make_user("Hi")])
    later = firing_prompt(
        [
            make_user("Hi"),
            make_assistant([make_text("Let me look."), CALL]),
            {
                "role": "tool",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_call_id": "toolu_1",
                        "name": "memory",
                        "content": "[]",
                        "status": "ok",
                    }
                ],
                "metadata": {},
            },
            make_assistant(
                [{"type": "thinking", "thinking": "secret", "signature": "sig"}, make_text("Nothing.")]
            ),
            make_user("Why?"),
        ]
    )

    assert first == "Hi"
    assert later.endswith("</transcript>\n\nThe owner's new message, which you answer now:\n\nWhy?")
    assert (
        "<transcript>\nOwner: Hi\nAssistant: Let me look.\n"
        'Assistant called tool memory with {"operation":"recall","query":"tea"}\n'
        "Tool memory result (ok): []\nAssistant: Nothing.\n</transcript>"
    ) in later
    assert "secret" not in later


# --- commit order ---------------------------------------------------------------------------------------


class _Runtime:
    name = "codex_cli"
    display_name = "Codex CLI"
    fidelity = "observable"
    resumable = False


def _turn(sink: FakeSink, seen: list[object] | None = None) -> _Turn:
    committer = Committer(sink, run_id="run_1", unanswered=UNREPORTED_TEXT)
    return _Turn(_Runtime(), committer, seen.append if seen is not None else None, 100_000)  # type: ignore[arg-type]


def _observed(blocks: list[dict[str, object]]) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": blocks,
        "metadata": {"runtime": "codex_cli", "fidelity": "observable"},
    }


def test_parallel_calls_commit_the_assistant_message_before_their_results_and_the_answer_last():
    sink, seen = FakeSink(), []
    turn = _turn(sink, seen)
    first = make_tool_call("a", "memory", {"operation": "list"})
    second = make_tool_call("b", "notes", {"operation": "read"})

    async def scenario() -> None:
        for event in (
            Text("Checking."),
            Call(first),
            Call(second),
            Result("a", "[]"),
            Text("Done"),
            Result("b", "{}", "error"),
            Usage(5, 2),
            Done(),
        ):
            await turn.handle(event)
        await turn.finish(stopped=False)

    asyncio.run(scenario())

    assert sink.kinds == ["assistant", "tool_result", "tool_result", "final"]
    assert sink.calls[0][1] == _observed([make_text("Checking."), first, second])
    assert [(m["content"][0]["tool_call_id"], m["content"][0]["status"]) for _, m in sink.calls[1:3]] == [
        ("a", "ok"),
        ("b", "error"),
    ]
    assert sink.calls[3][1] == _observed([make_text("Done")])
    assert sink.usage == Usage(5, 2)
    assert [type(e).__name__ for e in seen] == [
        "ToolCallEvent",
        "ToolCallEvent",
        "ToolResultEvent",
        "ToolResultEvent",
    ]
    assert [e.block["id"] for e in seen if isinstance(e, ToolCallEvent)] == ["a", "b"]


def test_a_stopped_turn_answers_its_open_call_and_keeps_the_streamed_text_as_stopped():
    sink, seen = FakeSink(), []
    turn = _turn(sink, seen)

    async def scenario() -> None:
        for event in (Text("Looking."), Call(CALL), Delta("Half an ans")):
            await turn.handle(event)
        await turn.finish(stopped=True)

    asyncio.run(scenario())

    assert sink.kinds == ["assistant", "tool_result", "final"]
    assert sink.calls[1][1]["content"][0] == {
        "type": "tool_result",
        "tool_call_id": "toolu_1",
        "name": "memory",
        "content": INTERRUPTED_TEXT,
        "status": "interrupted",
    }
    assert sink.calls[2][1] == {
        "role": "assistant",
        "content": [make_text("Half an ans")],
        "metadata": {"status": "stopped", "runtime": "codex_cli", "fidelity": "portable"},
    }
    assert TextDelta("Half an ans") in seen


def test_a_call_the_program_never_answered_gets_a_result_so_the_transcript_stays_well_formed():
    sink = FakeSink()
    turn = _turn(sink)

    async def scenario() -> None:
        for event in (Call(CALL), Done()):
            await turn.handle(event)
        await turn.finish(stopped=False)

    asyncio.run(scenario())

    assert sink.kinds == ["assistant", "tool_result"]
    assert sink.calls[1][1]["content"][0]["content"] == UNREPORTED_TEXT
    assert turn.committer.final_message is None


def test_text_the_program_split_over_two_messages_is_stored_as_one_answer():
    sink = FakeSink()
    turn = _turn(sink)

    async def scenario() -> None:
        for event in (Text("First part."), Text("Second part."), Done()):
            await turn.handle(event)
        await turn.finish(stopped=False)

    asyncio.run(scenario())

    assert sink.kinds == ["final"]
    assert sink.calls[0][1] == _observed([make_text("First part."), make_text("Second part.")])
