"""The Vertex runtime (google-genai with ``vertexai=True``) against Vertex's recorded stream and a Google
token endpoint on loopback, and the RLM runtime against an OpenAI-compatible loopback server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers import ModelSettings, ProviderConfig, ProviderError, Request
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext, ToolSpec
from opencompany.llm.wire import make_user, tool_calls_of

from .helpers import FakeMemory, FakeSink
from .loopback import LoopbackServer, Received, Reply
from .vertex_rlm_support import (
    VERTEX_PATH,
    chat_call,
    chat_text,
    credentials_file,
    token_reply,
    vertex_call_reply,
    vertex_text,
)

VERTEX = ModelSettings(provider="vertex", model="gemini-2.0-flash")
RLM = ModelSettings(provider="rlm", model="rlm-model")


def _divide(calls: list[dict[str, Any]]) -> ToolSpec:
    def execute(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        calls.append(arguments)
        return {"result": 50}

    return ToolSpec("customDivide", "Custom divide function", {"type": "object"}, execute)


def _vertex_config(server: LoopbackServer, tmp_path: Path, location: str = "us-central1") -> ProviderConfig:
    return ProviderConfig(
        options={
            "vertex_project": "oc-project",
            "vertex_location": location,
            "vertex_credentials_file": str(credentials_file(tmp_path, server.base_url)),
            "vertex_base_url": server.base_url,
        }
    )


async def test_vertex_runs_a_tool_turn_on_its_endpoint_and_binds_the_turn_to_its_environment(
    loopback: LoopbackServer, tmp_path: Path
) -> None:
    def answer(received: Received) -> Reply:
        assert received.path == VERTEX_PATH
        contents = json.loads(received.raw)["contents"]
        assert contents[1] == {
            "parts": [
                {"functionCall": {"args": {"denominator": 2, "numerator": 100}, "name": "customDivide"}}
            ],
            "role": "model",
        }
        assert contents[2]["parts"][0]["functionResponse"]["name"] == "customDivide"
        return Reply(raw=vertex_text("It is 50.", "vx-2"))

    loopback.replies.extend([token_reply, vertex_call_reply, answer])
    calls: list[dict[str, Any]] = []
    provider: Any = get_provider(VERTEX, config=_vertex_config(loopback, tmp_path))
    sink = FakeSink([make_user("what is the result of 100/2")])

    result = await run_agent_loop(
        Request(["s"], list(sink.transcript), [], VERTEX),
        provider,
        [_divide(calls)],
        sink,
        asyncio.Event(),
        tool_context=ToolContext(run_id="r"),
    )

    assert (result.status, loopback.failures, calls) == (
        "finished",
        [],
        [{"denominator": 2, "numerator": 100}],
    )
    turn = sink.calls[0][1]
    assert turn["metadata"] == {
        "vertex": {
            "environment": "projects/oc-project/locations/us-central1",
            "interaction": "w9SfaNDeOseSmecP8YP84Ao",
        },
        "runtime": "vertex",
        "fidelity": "observable",
    }
    assert sink.transcript[-1]["metadata"]["vertex"]["interaction"] == "vx-2"
    assert [(r.runtime, r.fidelity) for r in sink.records] == [("vertex", "observable")] * 2


async def test_vertex_sends_a_signature_back_only_to_the_environment_that_issued_it(
    loopback: LoopbackServer, tmp_path: Path
) -> None:
    turn = {
        "role": "assistant",
        "content": [
            {
                "type": "tool_call",
                "id": "c1",
                "name": "customDivide",
                "arguments": {"n": 1},
                "thought_signature": "c2ln",
            }
        ],
        "metadata": {
            "runtime": "vertex",
            "fidelity": "observable",
            "vertex": {"environment": "projects/oc-project/locations/us-central1", "interaction": "x"},
        },
    }
    result = {
        "role": "tool",
        "content": [
            {
                "type": "tool_result",
                "tool_call_id": "c1",
                "name": "customDivide",
                "content": "1",
                "status": "ok",
            }
        ],
        "metadata": {},
    }
    transcript = [make_user("one"), turn, result, make_user("again")]
    # Each provider fetches its own access token first.
    loopback.replies.extend(
        [token_reply, Reply(raw=vertex_text("same")), token_reply, Reply(raw=vertex_text("moved"))]
    )

    for location in ("us-central1", "europe-west4"):
        provider: Any = get_provider(VERTEX, config=_vertex_config(loopback, tmp_path, location))
        [e async for e in provider.stream(Request(["s"], transcript, [], VERTEX))]

    same, moved = (json.loads(r.raw)["contents"][1]["parts"][0] for r in loopback.received[1::2])
    assert same["thoughtSignature"] == "c2ln"
    assert "thoughtSignature" not in moved
    assert loopback.received[3].path == VERTEX_PATH.replace("us-central1", "europe-west4")


def test_vertex_without_a_project_or_credentials_is_not_configured(tmp_path: Path) -> None:
    with pytest.raises(ProviderError) as missing:
        get_provider(
            VERTEX,
            config=ProviderConfig(options={"vertex_location": "us-central1", "vertex_credentials_file": "x"}),
        )
    with pytest.raises(ProviderError) as unreadable:
        get_provider(
            VERTEX,
            config=ProviderConfig(
                options={
                    "vertex_project": "p",
                    "vertex_location": "l",
                    "vertex_credentials_file": str(tmp_path / "none.json"),
                }
            ),
        )

    assert (missing.value.code, unreadable.value.code) == (
        "provider_not_configured",
        "provider_not_configured",
    )


async def test_rlm_answers_its_recursive_queries_itself_and_passes_the_agents_tools_to_the_loop(
    loopback: LoopbackServer,
) -> None:
    def sub_query(received: Received) -> Reply:
        body = json.loads(received.raw)
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
        assert body["messages"][1]["content"] == "What should be remembered?"
        assert [t["function"]["name"] for t in body["tools"]] == ["llm_query"]
        return chat_text("That the owner likes tea.")

    def root_again(received: Received) -> Reply:
        messages = json.loads(received.raw)["messages"]
        assert messages[-2]["tool_calls"][0]["function"]["name"] == "llm_query"
        assert messages[-1] == {"role": "tool", "tool_call_id": "q1", "content": "That the owner likes tea."}
        return chat_call("m1", "memory", '{"operation":"remember","content":"likes tea"}')

    def after_tool(received: Received) -> Reply:
        messages = json.loads(received.raw)["messages"]
        # Portable: the stored RLM turn goes back as text and tool calls only.
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
        call = {
            "id": "m1",
            "type": "function",
            "function": {"name": "memory", "arguments": '{"operation":"remember","content":"likes tea"}'},
        }
        assert messages[2] == {"role": "assistant", "content": None, "tool_calls": [call]}
        return chat_text("Remembered: you like tea.")

    loopback.replies.extend(
        [
            chat_call("q1", "llm_query", '{"prompt":"What should be remembered?"}'),
            sub_query,
            root_again,
            after_tool,
        ]
    )
    memory = FakeMemory()
    provider: Any = get_provider(
        RLM, config=ProviderConfig(options={"rlm_base_url": loopback.base_url + "/v1"})
    )
    sink = FakeSink([make_user("Remember what matters.")])

    result = await run_agent_loop(
        Request(["You keep facts."], list(sink.transcript), [], RLM),
        provider,
        [memory.spec()],
        sink,
        asyncio.Event(),
        tool_context=ToolContext(run_id="r"),
    )

    assert (result.status, loopback.failures) == ("finished", [])
    turn = sink.calls[0][1]
    assert turn["content"][0] == {
        "type": "provider_block",
        "provider": "rlm",
        "block": {
            "type": "llm_query",
            "prompt": "What should be remembered?",
            "depth": 1,
            "answer": "That the owner likes tea.",
        },
    }
    assert [c["name"] for c in tool_calls_of(turn)] == ["memory"]
    assert turn["metadata"] == {"runtime": "rlm", "fidelity": "observable"}
    assert [i["content"] for i in memory.items.values()] == ["likes tea"]
    assert [(r.runtime, r.fidelity) for r in sink.records] == [("rlm", "observable")] * 2
    assert result.usage.input_tokens == 50 + 60 + 50 + 60
