"""Gemini native, through Google's real `google-genai` SDK against a loopback server that speaks
`streamGenerateContent?alt=sse`."""

from __future__ import annotations

import asyncio
import base64

import pytest

from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers import ModelSettings, ProviderConfig, ProviderError, Request
from opencompany.llm.providers.base import Completed, TextDelta, ThinkingDelta, ToolCallEvent, Usage
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext
from opencompany.llm.wire import make_assistant, make_text, make_user

from .helpers import FakeMemory, FakeSink
from .loopback import LoopbackServer, Received, Reply, gemini_sse

SETTINGS = ModelSettings(
    provider="gemini",
    model="gemini-test",
    max_output_tokens=2048,
    context_window=1_000_000,
    thinking_budget=1024,
)
# Signature bytes whose base64 has '+' and '/': the SDK re-encodes them URL-safe, the bytes stay the same.
THOUGHT_SIG = bytes(range(200, 256)) * 3
CALL_SIG = b"\xfb\xff\xfe" + bytes(range(64))
THOUGHT = "The owner wants tea remembered. ünïcode “quotes”"
STAMP = {"runtime": "gemini", "fidelity": "provider_replayable"}
PATH = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _config(server: LoopbackServer) -> ProviderConfig:
    return ProviderConfig(options={"gemini_api_key": "gm-test", "gemini_base_url": server.base_url})


def _chunk(*parts, finish=None, usage=None, finish_message=None):
    candidate = {"index": 0}
    if parts:
        candidate["content"] = {"role": "model", "parts": list(parts)}
    if finish:
        candidate["finishReason"] = finish
    if finish_message:
        candidate["finishMessage"] = finish_message
    chunk = {"candidates": [candidate], "modelVersion": "gemini-test", "responseId": "resp-1"}
    if usage:
        chunk["usageMetadata"] = usage
    return chunk


def _usage(prompt, cached, candidates, thoughts=0):
    return {
        "promptTokenCount": prompt,
        "cachedContentTokenCount": cached,
        "candidatesTokenCount": candidates,
        "thoughtsTokenCount": thoughts,
        "totalTokenCount": prompt + candidates + thoughts,
    }


def _thinking_tool_turn():
    return gemini_sse(
        _chunk({"text": THOUGHT[:20], "thought": True}),
        _chunk({"text": THOUGHT[20:], "thought": True, "thoughtSignature": _b64(THOUGHT_SIG)}),
        _chunk({"text": "Saving "}),
        _chunk({"text": "that."}),
        _chunk(
            {
                "functionCall": {"name": "memory", "args": {"operation": "remember", "content": "tea"}},
                "thoughtSignature": _b64(CALL_SIG),
            },
            finish="STOP",
            usage=_usage(1000, 800, 40, thoughts=90),
        ),
    )


def _text_turn(text="Done.", usage=None):
    return gemini_sse(_chunk({"text": text}, finish="STOP", usage=usage or _usage(1200, 1000, 5)))


async def _collect(provider, request):
    return [event async for event in provider.stream(request)]


def _thinking_tool_message(call_id):
    return make_assistant(
        [
            # The signed chunk stays its own block: its signature never moves onto the unsigned text.
            {"type": "thinking", "thinking": THOUGHT[:20]},
            {"type": "thinking", "thinking": THOUGHT[20:], "thought_signature": _b64(THOUGHT_SIG)},
            make_text("Saving that."),
            {
                "type": "tool_call",
                "id": call_id,
                "name": "memory",
                "arguments": {"operation": "remember", "content": "tea"},
                "local_id": True,
                "thought_signature": _b64(CALL_SIG),
            },
        ],
        STAMP,
    )


async def test_thoughts_text_and_a_function_call_stream_in_order_with_exact_usage(loopback):
    loopback.replies.append(Reply(sse=_thinking_tool_turn()))
    memory = FakeMemory()
    provider = get_provider(SETTINGS, config=_config(loopback))
    request = Request(
        system_blocks=["You are Ada.", "Notes:\n- likes tea"],
        messages=[make_user("remember tea")],
        tools=[memory.spec()],
        settings=SETTINGS,
    )

    events = await _collect(provider, request)

    assert provider.fidelity == "provider_replayable"
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == THOUGHT
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Saving ", "that."]
    [call] = [e.block for e in events if isinstance(e, ToolCallEvent)]
    assert call["id"].startswith("gemini_")
    assert [e for e in events if isinstance(e, Usage)] == [
        Usage(input_tokens=1000, output_tokens=130, cache_read_tokens=800)
    ]
    assert events[-1] == Completed(_thinking_tool_message(call["id"]))
    received = loopback.received[0]
    assert received.path == PATH
    assert received.headers["x-goog-api-key"] == "gm-test"
    body = received.body
    assert body["contents"] == [{"role": "user", "parts": [{"text": "remember tea"}]}]
    assert body["systemInstruction"]["parts"] == [{"text": "You are Ada.\n\nNotes:\n- likes tea"}]
    assert body["generationConfig"]["maxOutputTokens"] == 2048
    thinking = body["generationConfig"]["thinkingConfig"]
    assert (
        thinking.get("include_thoughts", thinking.get("includeThoughts")),
        thinking.get("thinking_budget", thinking.get("thinkingBudget")),
    ) == (True, 1024)
    [declarations] = [t["functionDeclarations"] for t in body["tools"]]
    assert declarations[0]["name"] == "memory"
    schema = declarations[0].get("parameters_json_schema", declarations[0].get("parametersJsonSchema"))
    assert schema == memory.spec().input_schema


async def test_thought_signatures_are_replayed_byte_identically_on_the_next_request(loopback):
    def replayed(received: Received) -> Reply:
        contents = received.body["contents"]
        assert [c["role"] for c in contents] == ["user", "model", "user"]
        unsigned, thought, text, call = contents[1]["parts"]
        assert unsigned == {"text": THOUGHT[:20], "thought": True}
        assert (thought["text"], thought["thought"]) == (THOUGHT[20:], True)
        assert base64.urlsafe_b64decode(thought["thoughtSignature"]) == THOUGHT_SIG
        assert text == {"text": "Saving that."}
        assert call["functionCall"] == {"name": "memory", "args": {"operation": "remember", "content": "tea"}}
        assert base64.urlsafe_b64decode(call["thoughtSignature"]) == CALL_SIG
        [response] = contents[2]["parts"]
        assert response["functionResponse"]["name"] == "memory"
        assert "id" not in response["functionResponse"]  # Gemini gave the call no id; none is made up
        assert '"memory"' in response["functionResponse"]["response"]["output"]
        return Reply(sse=_text_turn("I'll remember that you like tea."))

    loopback.replies.extend([Reply(sse=_thinking_tool_turn()), replayed])
    memory = FakeMemory()
    sink = FakeSink()
    provider = get_provider(SETTINGS, config=_config(loopback))

    result = await run_agent_loop(
        Request(
            system_blocks=["You are Ada."], messages=[make_user("remember tea")], tools=[], settings=SETTINGS
        ),
        provider,
        [memory.spec()],
        sink,
        asyncio.Event(),
        tool_context=ToolContext(run_id="r1"),
    )

    assert loopback.failures == []
    assert result.status == "finished"
    assert sink.kinds == ["assistant", "tool_result", "final"]
    call_id = sink.calls[0][1]["content"][3]["id"]
    assert sink.calls[0][1] == _thinking_tool_message(call_id)
    assert sink.calls[1][1]["content"][0]["tool_call_id"] == call_id
    assert sink.calls[2][1] == make_assistant([make_text("I'll remember that you like tea.")], STAMP)
    assert result.usage == Usage(input_tokens=2200, output_tokens=135, cache_read_tokens=1800)


async def test_a_call_gemini_could_not_form_is_kept_raw_and_replayed_as_text(loopback):
    def replayed(received: Received) -> Reply:
        contents = received.body["contents"]
        assert contents[1] == {"role": "model", "parts": [{"text": "[malformed function call]"}]}
        assert contents[2]["role"] == "user"
        [result] = contents[2]["parts"]
        assert result["text"].startswith("[result of the malformed function call: ")
        assert '"invalid_arguments"' in result["text"]
        assert b"functionCall" not in received.raw
        assert b"functionResponse" not in received.raw
        return Reply(sse=_text_turn("Sorry."))

    malformed = _chunk(finish="MALFORMED_FUNCTION_CALL", usage=_usage(40, 0, 0))
    malformed["candidates"][0]["content"] = {}
    loopback.replies.extend([Reply(sse=gemini_sse(malformed)), replayed])
    memory = FakeMemory()
    sink = FakeSink()
    provider = get_provider(SETTINGS, config=_config(loopback))

    result = await run_agent_loop(
        Request(system_blocks=["s"], messages=[make_user("remember tea")], tools=[], settings=SETTINGS),
        provider,
        [memory.spec()],
        sink,
        asyncio.Event(),
        tool_context=ToolContext(run_id="r1"),
    )

    assert loopback.failures == []
    assert result.status == "finished"
    [block] = sink.calls[0][1]["content"]
    assert (block["name"], block["raw_arguments"], block["local_id"]) == ("unknown", "", True)
    assert "MALFORMED_FUNCTION_CALL" in block["parse_error"]
    assert "arguments" not in block
    assert sink.calls[1][1]["content"][0]["status"] == "error"
    assert memory.items == {}


def test_the_name_of_a_malformed_call_is_read_from_its_text_when_the_service_sends_it():
    from opencompany.llm.providers.gemini_provider import _malformed_block

    block = _malformed_block(
        "Malformed function call: print(default_api.memory(operation='remember', content=))"
    )

    assert (block["name"], block["raw_arguments"]) == (
        "memory",
        "Malformed function call: print(default_api.memory(operation='remember', content=))",
    )


@pytest.mark.parametrize(
    ("status", "name", "headers", "retry_after"),
    [
        (429, "RESOURCE_EXHAUSTED", {"retry-after": "4"}, 4.0),
        (500, "INTERNAL", {}, None),
        (400, "INVALID_ARGUMENT", {}, None),
    ],
)
async def test_http_errors_become_provider_error(loopback, status, name, headers, retry_after):
    loopback.replies.append(
        Reply(
            status=status,
            body={"error": {"code": status, "message": "nope", "status": name}},
            headers=headers,
        )
    )
    provider = get_provider(SETTINGS, config=_config(loopback))

    with pytest.raises(ProviderError) as excinfo:
        await _collect(
            provider, Request(system_blocks=["s"], messages=[make_user("q")], tools=[], settings=SETTINGS)
        )

    assert (excinfo.value.code, excinfo.value.status, excinfo.value.retry_after) == (
        "provider_error",
        status,
        retry_after,
    )
    assert len(loopback.received) == 1  # one attempt: the app decides about retries


async def test_an_error_inside_the_stream_is_a_provider_error_and_commits_nothing(loopback):
    loopback.replies.append(
        Reply(
            sse=gemini_sse(
                _chunk({"text": "Par"}),
                {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
            )
        )
    )
    sink = FakeSink()
    provider = get_provider(SETTINGS, config=_config(loopback))

    result = await run_agent_loop(
        Request(system_blocks=["s"], messages=[make_user("q")], tools=[], settings=SETTINGS),
        provider,
        [],
        sink,
        asyncio.Event(),
        tool_context=ToolContext(),
    )

    assert (result.status, result.error_code, result.error_extra) == (
        "error",
        "provider_error",
        {"status": 503},
    )
    assert sink.calls == []


async def test_stop_mid_stream_keeps_the_partial_text_without_thoughts(loopback):
    reply = Reply(
        sse=gemini_sse(
            _chunk({"text": "pondering", "thought": True}),
            _chunk({"text": "Half an"}),
            _chunk({"text": " answer", "thoughtSignature": _b64(CALL_SIG)}, finish="STOP"),
        ),
        hold_after=2,
    )
    loopback.replies.append(reply)
    sink = FakeSink()
    stop = asyncio.Event()
    provider = get_provider(SETTINGS, config=_config(loopback))

    def on_event(event):
        if isinstance(event, TextDelta):
            stop.set()

    try:
        result = await run_agent_loop(
            Request(system_blocks=["s"], messages=[make_user("hi")], tools=[], settings=SETTINGS),
            provider,
            [],
            sink,
            stop,
            tool_context=ToolContext(run_id="r1"),
            on_event=on_event,
        )
    finally:
        reply.release.set()

    assert result.status == "stopped"
    assert sink.calls == [
        (
            "final",
            make_assistant(
                [make_text("Half an")], {"status": "stopped", "runtime": "gemini", "fidelity": "portable"}
            ),
        )
    ]


async def test_another_runtimes_state_never_reaches_gemini(loopback):
    def clean(received: Received) -> Reply:
        assert b"sig-from-anthropic" not in received.raw
        assert b"rs_enc" not in received.raw
        assert b"private thoughts" not in received.raw
        model = received.body["contents"][1]
        assert model == {
            "role": "model",
            "parts": [
                {"text": "Tea, noted."},
                {"functionCall": {"name": "memory", "args": {"operation": "list"}}},
            ],
        }
        return Reply(sse=_text_turn())

    loopback.replies.append(clean)
    provider = get_provider(SETTINGS, config=_config(loopback))
    foreign = make_assistant(
        [
            {"type": "thinking", "thinking": "private thoughts", "signature": "sig-from-anthropic"},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "rs_enc"},
            make_text("Tea, noted."),
            {"type": "tool_call", "id": "toolu_1", "name": "memory", "arguments": {"operation": "list"}},
        ],
        {"runtime": "anthropic", "fidelity": "provider_replayable"},
    )

    await _collect(
        provider,
        Request(
            system_blocks=["s"],
            messages=[make_user("remember tea"), foreign],
            tools=[],
            settings=SETTINGS,
        ),
    )

    assert loopback.failures == []
