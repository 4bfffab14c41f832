from __future__ import annotations

import asyncio

import pytest

from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers import ModelSettings, ProviderConfig, ProviderError, Request
from opencompany.llm.providers.base import Completed, TextDelta, ThinkingDelta, ToolCallEvent, Usage
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext
from opencompany.llm.wire import make_assistant, make_text, make_tool_result, make_user

from .helpers import FakeMemory, FakeSink
from .loopback import LoopbackServer, Received, Reply, anthropic_sse

SETTINGS = ModelSettings(
    provider="anthropic",
    model="claude-test",
    max_output_tokens=4096,
    context_window=200_000,
    thinking_budget=2048,
)
SIGNATURE = "ErUBCkYIBRgCIkDm+/zZ0sig==" * 8
THINKING = "The owner wants tea remembered. ünïcode “quotes”"


def _config(server: LoopbackServer, key: str | None = "sk-ant-test") -> ProviderConfig:
    return ProviderConfig(options={"anthropic_api_key": key, "anthropic_base_url": server.base_url})


def _start(input_tokens=100, cache_read=0, cache_write=0):
    return {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": 1,
                "cache_read_input_tokens": cache_read,
                "cache_creation_input_tokens": cache_write,
            },
        },
    }


def _block_start(index, block):
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index, delta):
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _stop(index):
    return {"type": "content_block_stop", "index": index}


def _end(stop_reason, output_tokens):
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


def _thinking_tool_turn():
    return anthropic_sse(
        _start(input_tokens=50, cache_read=900, cache_write=100),
        _block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        _delta(0, {"type": "thinking_delta", "thinking": THINKING[:20]}),
        _delta(0, {"type": "thinking_delta", "thinking": THINKING[20:]}),
        _delta(0, {"type": "signature_delta", "signature": SIGNATURE}),
        _stop(0),
        _block_start(1, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}),
        _stop(1),
        _block_start(2, {"type": "text", "text": ""}),
        _delta(2, {"type": "text_delta", "text": "Saving "}),
        _delta(2, {"type": "text_delta", "text": "that."}),
        _stop(2),
        _block_start(3, {"type": "tool_use", "id": "toolu_1", "name": "memory", "input": {}}),
        _delta(3, {"type": "input_json_delta", "partial_json": '{"operation": "reme'}),
        _delta(3, {"type": "input_json_delta", "partial_json": 'mber", "content": "tea"}'}),
        _stop(3),
        *_end("tool_use", 42),
    )


def _text_turn(text="Done.", input_tokens=10):
    return anthropic_sse(
        _start(input_tokens=input_tokens),
        _block_start(0, {"type": "text", "text": ""}),
        _delta(0, {"type": "text_delta", "text": text}),
        _stop(0),
        *_end("end_turn", 3),
    )


async def _collect(provider, request):
    return [event async for event in provider.stream(request)]


async def test_thinking_text_and_tool_use_stream_in_order_with_usage(loopback):
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
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == THINKING
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Saving ", "that."]
    assert [e.block for e in events if isinstance(e, ToolCallEvent)] == [
        {
            "type": "tool_call",
            "id": "toolu_1",
            "name": "memory",
            "arguments": {"operation": "remember", "content": "tea"},
        }
    ]
    assert [e for e in events if isinstance(e, Usage)] == [
        Usage(input_tokens=1050, output_tokens=42, cache_read_tokens=900, cache_write_tokens=100)
    ]
    assert isinstance(events[-1], Completed)
    assert events[-1].message == make_assistant(
        [
            {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
            make_text("Saving that."),
            {
                "type": "tool_call",
                "id": "toolu_1",
                "name": "memory",
                "arguments": {"operation": "remember", "content": "tea"},
            },
        ],
        {"runtime": "anthropic", "fidelity": "provider_replayable"},
    )
    received = loopback.received[0]
    assert received.path == "/v1/messages"
    assert "sk-ant-test" in (
        received.headers.get("x-api-key", "") + received.headers.get("authorization", "")
    )
    body = received.body
    assert body["system"] == [
        {"type": "text", "text": "You are Ada.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Notes:\n- likes tea"},
    ]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "temperature" not in body
    assert body["stream"] is True
    assert body["tools"] == [
        {
            "name": "memory",
            "description": memory.spec().description,
            "input_schema": memory.spec().input_schema,
        }
    ]


async def test_signed_thinking_is_replayed_byte_identically_on_the_next_request(loopback):
    def replayed(received: Received) -> Reply:
        first = loopback.received[0]
        assert received.body["system"] == first.body["system"]
        assert received.body["messages"][1] == {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
                {"type": "text", "text": "Saving that."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "memory",
                    "input": {"operation": "remember", "content": "tea"},
                },
            ],
        }
        # the exact bytes of the signature and the redacted data reach the server
        compact = received.raw.replace(b": ", b":")
        assert ('"signature":"' + SIGNATURE + '"').encode() in compact
        assert b'"data":"EmwKAhgBEgy3va3pzix/LafPsn4a"' in compact
        tool_turn = received.body["messages"][2]
        assert tool_turn["role"] == "user"
        assert tool_turn["content"][0]["type"] == "tool_result"
        assert tool_turn["content"][0]["tool_use_id"] == "toolu_1"
        return Reply(sse=_text_turn("I'll remember that you like tea."))

    loopback.replies.extend([Reply(sse=_thinking_tool_turn()), replayed])
    memory = FakeMemory()
    sink = FakeSink()
    provider = get_provider(SETTINGS, config=_config(loopback))
    request = Request(
        system_blocks=["You are Ada.", "Notes:\n- likes tea"],
        messages=[make_user("remember tea")],
        tools=[],
        settings=SETTINGS,
    )

    result = await run_agent_loop(
        request, provider, [memory.spec()], sink, asyncio.Event(), tool_context=ToolContext(run_id="r1")
    )

    assert loopback.failures == []
    assert result.status == "finished"
    assert sink.kinds == ["assistant", "tool_result", "final"]
    assert [i["content"] for i in memory.items.values()] == ["tea"]
    assert result.usage == Usage(
        input_tokens=1060, output_tokens=45, cache_read_tokens=900, cache_write_tokens=100
    )


async def test_malformed_streamed_tool_input_is_kept_raw_and_the_model_gets_an_error_result(loopback):
    def replayed(received: Received) -> Reply:
        assistant, results = received.body["messages"][1:3]
        # The API takes only an object as input: the malformed call and its result go back as text.
        assert assistant["content"] == [
            {
                "type": "text",
                "text": '[a call of memory was malformed: {"operation": "remember", "content": ]',
            }
        ]
        assert results["content"][0]["type"] == "text"
        assert results["content"][0]["text"].startswith("[result of that call: ")
        assert '"invalid_arguments"' in results["content"][0]["text"]
        return Reply(sse=_text_turn("Sorry."))

    broken = anthropic_sse(
        _start(),
        _block_start(0, {"type": "tool_use", "id": "toolu_9", "name": "memory", "input": {}}),
        _delta(0, {"type": "input_json_delta", "partial_json": '{"operation": "remember", "content": '}),
        _stop(0),
        *_end("tool_use", 12),
    )
    loopback.replies.extend([Reply(sse=broken), replayed])
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
    assert block["raw_arguments"] == '{"operation": "remember", "content": '
    assert block["parse_error"].startswith("invalid JSON")
    assert memory.items == {}


async def test_consecutive_tool_results_merge_into_one_user_message(loopback):
    loopback.replies.append(Reply(sse=_text_turn()))
    provider = get_provider(SETTINGS, config=_config(loopback))
    messages = [
        make_user("look up two things"),
        make_assistant(
            [
                {"type": "tool_call", "id": "t1", "name": "memory", "arguments": {"operation": "list"}},
                {
                    "type": "tool_call",
                    "id": "t2",
                    "name": "memory",
                    "raw_arguments": "{bad",
                    "parse_error": "invalid JSON",
                },
            ]
        ),
        make_tool_result("t1", "memory", "one", "ok"),
        make_tool_result("t2", "memory", "bad args", "error"),
        make_user("and then?"),
    ]

    await _collect(provider, Request(system_blocks=["sys"], messages=messages, tools=[], settings=SETTINGS))

    sent = loopback.received[0].body["messages"]
    assert sent == [
        {"role": "user", "content": [{"type": "text", "text": "look up two things"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "memory", "input": {"operation": "list"}},
                {"type": "text", "text": "[a call of memory was malformed: {bad]"},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
                {"type": "text", "text": "[result of that call: bad args]"},
                {"type": "text", "text": "and then?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]


async def test_unknown_response_blocks_are_kept_and_replayed(loopback):
    server_block = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "tea"},
    }
    loopback.replies.append(
        Reply(
            sse=anthropic_sse(
                _start(),
                _block_start(0, server_block),
                _stop(0),
                _block_start(1, {"type": "text", "text": ""}),
                _delta(1, {"type": "text_delta", "text": "Found."}),
                _stop(1),
                *_end("end_turn", 2),
            )
        )
    )
    loopback.replies.append(Reply(sse=_text_turn()))
    provider = get_provider(SETTINGS, config=_config(loopback))

    events = await _collect(
        provider, Request(system_blocks=["s"], messages=[make_user("q")], tools=[], settings=SETTINGS)
    )
    message = events[-1].message
    await _collect(
        provider,
        Request(
            system_blocks=["s"],
            messages=[make_user("q"), message, make_user("more")],
            tools=[],
            settings=SETTINGS,
        ),
    )

    assert message["content"][0] == {"type": "provider_block", "provider": "anthropic", "block": server_block}
    assert loopback.received[1].body["messages"][1]["content"][0] == server_block


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"), [(429, {"retry-after": "3"}, 3.0), (529, {}, None), (500, {}, None)]
)
async def test_http_errors_become_provider_error(loopback, status, headers, retry_after):
    loopback.replies.append(
        Reply(
            status=status,
            body={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
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
    assert len(loopback.received) == 1


async def test_error_event_in_the_stream_is_a_provider_error(loopback):
    loopback.replies.append(
        Reply(
            sse=anthropic_sse(
                _start(), {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            )
        )
    )
    provider = get_provider(SETTINGS, config=_config(loopback))

    with pytest.raises(ProviderError) as excinfo:
        await _collect(
            provider, Request(system_blocks=["s"], messages=[make_user("q")], tools=[], settings=SETTINGS)
        )

    assert excinfo.value.code == "provider_error"


def test_missing_key_is_refused_before_any_request(loopback):
    with pytest.raises(ProviderError) as excinfo:
        get_provider(SETTINGS, config=_config(loopback, key=None))

    assert excinfo.value.code == "provider_not_configured"
    assert loopback.received == []


async def test_without_a_thinking_budget_no_thinking_or_temperature_is_sent(loopback):
    loopback.replies.append(Reply(sse=_text_turn()))
    settings_obj = ModelSettings(
        provider="anthropic", model="claude-test", temperature=0.2, max_output_tokens=100
    )
    provider = get_provider(settings_obj, config=_config(loopback))

    await _collect(
        provider, Request(system_blocks=["s"], messages=[make_user("q")], tools=[], settings=settings_obj)
    )

    body = loopback.received[0].body
    assert "temperature" not in body
    assert "thinking" not in body
    assert body["max_tokens"] == 100


@pytest.mark.parametrize("budget", [512, 4096, 8000])
async def test_a_thinking_budget_the_api_would_refuse_is_refused_before_any_request(loopback, budget):
    settings_obj = ModelSettings(
        provider="anthropic", model="claude-test", max_output_tokens=4096, thinking_budget=budget
    )
    provider = get_provider(settings_obj, config=_config(loopback))

    with pytest.raises(ProviderError) as excinfo:
        await _collect(
            provider, Request(system_blocks=["s"], messages=[make_user("q")], tools=[], settings=settings_obj)
        )

    assert excinfo.value.code == "provider_not_configured"
    assert loopback.received == []


async def test_stop_mid_stream_keeps_the_partial_text_and_no_unsigned_thinking(loopback):
    reply = Reply(
        sse=anthropic_sse(
            _start(),
            _block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            _delta(0, {"type": "thinking_delta", "thinking": "pondering"}),
            _delta(0, {"type": "signature_delta", "signature": SIGNATURE}),
            _stop(0),
            _block_start(1, {"type": "text", "text": ""}),
            _delta(1, {"type": "text_delta", "text": "Half an"}),
            _delta(1, {"type": "text_delta", "text": " answer"}),
            _stop(1),
            *_end("end_turn", 9),
        ),
        hold_after=7,
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
                [make_text("Half an")], {"status": "stopped", "runtime": "anthropic", "fidelity": "portable"}
            ),
        )
    ]


async def test_another_runtimes_opaque_state_never_reaches_anthropic(loopback):
    loopback.replies.append(Reply(sse=_text_turn()))
    provider = get_provider(SETTINGS, config=_config(loopback))
    openai_turn = make_assistant(
        [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-encrypted"},
            {"type": "text", "text": "Tea, noted.", "item_id": "msg_1"},
            {
                "type": "provider_block",
                "provider": "openai",
                "block": {"type": "web_search_call", "id": "ws_1"},
            },
        ],
        {"runtime": "openai", "fidelity": "provider_replayable"},
    )
    gemini_turn = make_assistant(
        [{"type": "thinking", "thinking": "gemini thoughts", "thought_signature": "c2ln"}, make_text("Yes.")],
        {"runtime": "gemini", "fidelity": "provider_replayable"},
    )

    await _collect(
        provider,
        Request(
            system_blocks=["s"],
            messages=[make_user("a"), openai_turn, make_user("b"), gemini_turn, make_user("c")],
            tools=[],
            settings=SETTINGS,
        ),
    )

    raw = loopback.received[0].raw
    assert b"gAAAA-encrypted" not in raw
    assert b"gemini thoughts" not in raw
    assert b"ws_1" not in raw
    assert loopback.received[0].body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Tea, noted."}],
    }
