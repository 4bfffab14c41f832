"""Three turns with a tool call each, through the real SDKs and the run loop, against loopback servers
that answer HTTP 400 when a request leaves out continuation state they issued (tests/llm/conformance.py):
Anthropic with thinking, Responses with encrypted reasoning, Gemini native, Gemini through its
OpenAI-compatible endpoint, and a server that returns ``reasoning_content`` (DeepSeek's thinking mode).
Each stored turn keeps the issued state exactly and every later request carries it back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers import CompatCapabilities, ModelSettings, ProviderConfig, Request
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext
from opencompany.llm.wire import make_user, text_of, tool_calls_of

from .conformance import (
    AnthropicThinking,
    ChatCompletionsField,
    Enforcer,
    GeminiSignatures,
    ResponsesEncrypted,
    stream,
)
from .helpers import FakeMemory, FakeSink
from .loopback import LoopbackServer

DEEPSEEK_CAPS = CompatCapabilities(
    tools=True,
    json_arguments=True,
    streaming_usage=True,
    continuation=True,
    continuation_fields=("reasoning_content",),
)
GEMINI_COMPAT_CAPS = CompatCapabilities(
    tools=True,
    json_arguments=True,
    streaming_usage=True,
    continuation=True,
    continuation_fields=("extra_content",),
)


@dataclass
class Case:
    provider: str
    model: str
    tool: str
    text: str
    enforcer: Any
    kept: Any  # (stored assistant turn with the call, turn number) -> the continuation state kept
    settings: dict[str, Any]


def _anthropic_kept(turn: dict[str, Any], n: int) -> Any:
    thinking, call = turn["content"]
    assert call["caller"] == {"type": "direct"}
    return thinking["signature"], f"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds{n}"


def _responses_kept(turn: dict[str, Any], n: int) -> Any:
    reasoning, call = turn["content"]
    assert call["provider_arguments"] == f'{{"operation":"remember","content":"fact {n}"}}'
    return reasoning["encrypted_content"], f"gAAAAABpEncryptedReasoningBlob{n}=="


def _gemini_kept(turn: dict[str, Any], n: int) -> Any:
    call = tool_calls_of(turn)[0]
    return call["thought_signature"], f"CiQBjz1rSig{n}Step"


def _gemini_compat_kept(turn: dict[str, Any], n: int) -> Any:
    [call] = turn["content"]
    assert call["provider_arguments"] == f'{{"operation":"remember","content":"fact {n}"}}'
    return call["extra_content"], {"google": {"thought_signature": f"CtgBAdHtim9MhSignatureA{n}"}}


def _deepseek_kept(turn: dict[str, Any], n: int) -> Any:
    reasoning = turn["content"][0]
    return (reasoning["field"], reasoning["text"]), (
        "reasoning_content",
        f"The owner wants this kept; I will call memory ({n}).",
    )


CASES = {
    "anthropic_thinking": Case(
        "anthropic",
        "claude-sonnet-4-5",
        "documented/anthropic_thinking_tool_use.sse",
        "documented/anthropic_text.sse",
        AnthropicThinking,
        _anthropic_kept,
        {"thinking_budget": 1024, "max_output_tokens": 2048},
    ),
    "openai_responses_encrypted": Case(
        "openai",
        "gpt-5",
        "documented/responses_reasoning_function_call.sse",
        "documented/responses_text.sse",
        ResponsesEncrypted,
        _responses_kept,
        {"reasoning_effort": "low"},
    ),
    "gemini_native": Case(
        "gemini",
        "gemini-3-pro-preview",
        "documented/gemini_thinking_function_call.sse",
        "documented/gemini_text.sse",
        GeminiSignatures,
        _gemini_kept,
        {"thinking_budget": 1024},
    ),
    "gemini_openai_compatible": Case(
        "openai_compatible",
        "gemini-3-pro-preview",
        "documented/gemini_openai_tool_call.sse",
        "documented/gemini_openai_text.sse",
        lambda replies: ChatCompletionsField(replies, "extra_content"),
        _gemini_compat_kept,
        {},
    ),
    "reasoning_content_server": Case(
        "openai_compatible",
        "deepseek-reasoner",
        "documented/deepseek_reasoning_tool_call.sse",
        "documented/deepseek_text.sse",
        lambda replies: ChatCompletionsField(replies, "reasoning_content"),
        _deepseek_kept,
        {},
    ),
}


def _config(server: LoopbackServer, case: Case) -> ProviderConfig:
    caps = DEEPSEEK_CAPS if case.model == "deepseek-reasoner" else GEMINI_COMPAT_CAPS
    return ProviderConfig(
        options={
            "anthropic_api_key": "sk-ant",
            "anthropic_base_url": server.base_url,
            "openai_api_key": "sk",
            "openai_base_url": server.base_url + "/v1",
            "gemini_api_key": "gm",
            "gemini_base_url": server.base_url,
            "openai_compatible_base_url": server.base_url + "/v1",
        },
        openai_compatible_capabilities=caps,
    )


@pytest.mark.parametrize("name", list(CASES))
async def test_a_tool_conversation_continues_for_three_turns_against_a_server_enforcing_continuation(
    loopback: LoopbackServer, name: str
) -> None:
    case = CASES[name]
    replies = [stream(path, n) for n in (1, 2, 3) for path in (case.tool, case.text)]
    enforcer: Enforcer = case.enforcer(replies)
    loopback.replies.extend([enforcer] * 6)
    settings = ModelSettings(provider=case.provider, model=case.model, **case.settings)
    provider: Any = get_provider(settings, config=_config(loopback, case))
    memory = FakeMemory()
    transcript: list[dict[str, Any]] = []

    for n in (1, 2, 3):
        transcript.append(make_user(f"Keep fact {n}."))
        sink = FakeSink(transcript)
        request = Request(
            system_blocks=["You keep facts."], messages=list(transcript), tools=[], settings=settings
        )
        result = await run_agent_loop(
            request,
            provider,
            [memory.spec()],
            sink,
            asyncio.Event(),
            tool_context=ToolContext(run_id=f"r{n}"),
        )
        assert (result.status, result.error_code, enforcer.refusals) == ("finished", None, [])
        transcript = sink.transcript
        assert sink.kinds == ["assistant", "tool_result", "final"]
        assert text_of(transcript[-1]) == f"Kept fact {n}."

    assert loopback.failures == []
    assert len(enforcer.bodies) == 6
    calls = [m for m in transcript if m["role"] == "assistant" and tool_calls_of(m)]
    assert [c["metadata"]["fidelity"] for c in calls] == ["provider_replayable"] * 3
    for n, turn in enumerate(calls, start=1):
        kept, issued = case.kept(turn, n)
        assert kept == issued
    assert [i["content"] for i in memory.items.values()] == ["fact 1", "fact 2", "fact 3"]


_CONTINUATION = {"thinking", "redacted_thinking", "reasoning"}
_FIELDS = ("signature", "thought_signature", "extra_content", "caller")


def _dropped(message: dict[str, Any]) -> dict[str, Any]:
    """A turn without its continuation state, as a provider that lost it would send it."""
    blocks = [
        {k: v for k, v in b.items() if k not in _FIELDS}
        for b in message["content"]
        if b.get("type") not in _CONTINUATION
    ]
    return {**message, "content": blocks}


@pytest.mark.parametrize("name", list(CASES))
async def test_each_enforcing_server_refuses_a_request_that_drops_the_continuation(
    loopback: LoopbackServer, name: str
) -> None:
    case = CASES[name]
    enforcer: Enforcer = case.enforcer([stream(case.tool, 1), stream(case.text, 1)])
    loopback.replies.extend([enforcer] * 2)
    settings = ModelSettings(provider=case.provider, model=case.model, **case.settings)
    provider: Any = get_provider(settings, config=_config(loopback, case))
    sink = FakeSink([make_user("Keep fact 1.")])

    class Dropping:
        name = provider.name
        fidelity = provider.fidelity

        def stream(self, request: Request) -> Any:
            stripped = [_dropped(m) if m["role"] == "assistant" else m for m in request.messages]
            return provider.stream(Request(request.system_blocks, stripped, request.tools, request.settings))

    result = await run_agent_loop(
        Request(["s"], list(sink.transcript), [], settings),
        Dropping(),
        [FakeMemory().spec()],
        sink,
        asyncio.Event(),
        tool_context=ToolContext(run_id="r"),
    )

    assert (result.status, result.error_extra) == ("error", {"status": 400})
    assert len(enforcer.refusals) == 1
