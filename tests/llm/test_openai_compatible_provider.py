from __future__ import annotations

import asyncio

import pytest

from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers import (
    CompatCapabilities,
    ModelSettings,
    ProviderConfig,
    ProviderError,
    Request,
)
from opencompany.llm.providers.base import Completed, TextDelta, ThinkingDelta, ToolCallEvent, Usage
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext
from opencompany.llm.wire import make_assistant, make_text, make_tool_call, make_tool_result, make_user

from .helpers import FakeMemory, FakeSink
from .loopback import LoopbackServer, Reply, openai_sse

SETTINGS = ModelSettings(
    provider="openai_compatible", model="gpt-test", max_output_tokens=256, context_window=100_000
)
VERIFIED = CompatCapabilities(
    tools=True, json_arguments=True, streaming_usage=True, parallel_tool_calls=True, continuation=True
)


def _config(
    server: LoopbackServer, key: str | None = "sk-test", capabilities: CompatCapabilities | None = None
) -> ProviderConfig:
    return ProviderConfig(
        options={"openai_compatible_api_key": key, "openai_compatible_base_url": server.base_url + "/v1"},
        openai_compatible_capabilities=capabilities,
    )


def _chunk(delta=None, finish=None, usage=None):
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test",
        "choices": [],
    }
    if delta is not None or finish is not None:
        chunk["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _tool_chunk(index, *, call_id=None, name=None, arguments=None):
    fn = {}
    if name is not None:
        fn["name"] = name
    if arguments is not None:
        fn["arguments"] = arguments
    tc = {"index": index, "function": fn}
    if call_id:
        tc["id"] = call_id
        tc["type"] = "function"
    return _chunk({"tool_calls": [tc]})


async def _collect(provider, request):
    return [event async for event in provider.stream(request)]


async def test_text_streams_as_deltas_and_usage_includes_cached_tokens(loopback):
    loopback.replies.append(
        Reply(
            sse=openai_sse(
                _chunk({"role": "assistant", "content": ""}),
                _chunk({"content": "Hello"}),
                _chunk({"content": ", world"}),
                _chunk({}, finish="stop"),
                _chunk(
                    usage={
                        "prompt_tokens": 120,
                        "completion_tokens": 7,
                        "total_tokens": 127,
                        "prompt_tokens_details": {"cached_tokens": 64},
                    }
                ),
            )
        )
    )
    provider = get_provider(SETTINGS, config=_config(loopback))
    request = Request(
        system_blocks=["You are helpful.", "Notes: none"],
        messages=[make_user("hi")],
        tools=[],
        settings=SETTINGS,
    )

    events = await _collect(provider, request)

    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello", ", world"]
    assert [e for e in events if isinstance(e, Usage)] == [
        Usage(input_tokens=120, output_tokens=7, cache_read_tokens=64)
    ]
    assert events[-1] == Completed(
        make_assistant([make_text("Hello, world")], {"runtime": "openai_compatible", "fidelity": "portable"})
    )
    body = loopback.received[0].body
    assert loopback.received[0].path == "/v1/chat/completions"
    assert loopback.received[0].headers["authorization"] == "Bearer sk-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "You are helpful.\n\nNotes: none"},
        {"role": "user", "content": "hi"},
    ]
    assert body["max_completion_tokens"] == 256
    assert "tools" not in body


async def test_tool_call_arguments_split_across_chunks_are_joined_by_index(loopback):
    loopback.replies.append(
        Reply(
            sse=openai_sse(
                _tool_chunk(0, call_id="call_a", name="memory", arguments=""),
                _tool_chunk(1, call_id="call_b", name="memory", arguments='{"operation"'),
                _tool_chunk(0, arguments='{"operation": "rem'),
                _tool_chunk(0, arguments='ember", "content": "tea"}'),
                _tool_chunk(1, arguments=': "list"}'),
                _chunk({}, finish="tool_calls"),
                _chunk(usage={"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}),
            )
        )
    )
    memory = FakeMemory()
    provider = get_provider(SETTINGS, config=_config(loopback))
    request = Request(
        system_blocks=["sys"], messages=[make_user("remember tea")], tools=[memory.spec()], settings=SETTINGS
    )

    events = await _collect(provider, request)

    calls = [e.block for e in events if isinstance(e, ToolCallEvent)]
    assert calls == [
        {
            "type": "tool_call",
            "id": "call_a",
            "name": "memory",
            "arguments": {"operation": "remember", "content": "tea"},
            "provider_arguments": '{"operation": "remember", "content": "tea"}',
        },
        {
            "type": "tool_call",
            "id": "call_b",
            "name": "memory",
            "arguments": {"operation": "list"},
            "provider_arguments": '{"operation": "list"}',
        },
    ]
    assert events[-1].message["content"] == calls
    tools = loopback.received[0].body["tools"]
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "memory",
                "description": memory.spec().description,
                "parameters": memory.spec().input_schema,
            },
        }
    ]


async def test_malformed_tool_json_is_kept_raw_and_the_model_gets_an_error_result(loopback):
    loopback.replies.append(
        Reply(
            sse=openai_sse(
                _tool_chunk(
                    0, call_id="call_x", name="memory", arguments='{"operation": "remember", "content": '
                ),
                _chunk({}, finish="tool_calls"),
            )
        )
    )
    loopback.replies.append(
        Reply(sse=openai_sse(_chunk({"content": "Sorry, retrying later."}), _chunk({}, finish="stop")))
    )
    memory = FakeMemory()
    sink = FakeSink()
    provider = get_provider(SETTINGS, config=_config(loopback))
    request = Request(
        system_blocks=["sys"], messages=[make_user("remember tea")], tools=[], settings=SETTINGS
    )

    result = await run_agent_loop(
        request, provider, [memory.spec()], sink, asyncio.Event(), tool_context=ToolContext(run_id="r1")
    )

    assert result.status == "finished"
    assistant = sink.calls[0][1]
    assert assistant["content"][0]["raw_arguments"] == '{"operation": "remember", "content": '
    assert assistant["content"][0]["parse_error"].startswith("invalid JSON")
    tool_message = sink.calls[1][1]
    assert tool_message["content"][0]["status"] == "error"
    assert '"invalid_arguments"' in tool_message["content"][0]["content"]
    assert memory.items == {}
    second = loopback.received[1].body["messages"]
    assert second[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_x",
                "type": "function",
                "function": {"name": "memory", "arguments": '{"operation": "remember", "content": '},
            }
        ],
    }
    assert second[3]["role"] == "tool"
    assert second[3]["tool_call_id"] == "call_x"
    assert sink.kinds == ["assistant", "tool_result", "final"]


async def test_replayed_transcript_converts_tool_turns(loopback):
    loopback.replies.append(Reply(sse=openai_sse(_chunk({"content": "ok"}), _chunk({}, finish="stop"))))
    provider = get_provider(SETTINGS, config=_config(loopback))
    messages = [
        make_user("hi"),
        make_assistant(
            [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                make_text("Let me look."),
                {"type": "tool_call", "id": "c1", "name": "memory", "arguments": {"operation": "list"}},
            ]
        ),
        make_tool_result("c1", "memory", '{"results": []}', "ok"),
    ]

    await _collect(provider, Request(system_blocks=["sys"], messages=messages, tools=[], settings=SETTINGS))

    assert loopback.received[0].body["messages"][1:] == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "memory", "arguments": '{"operation": "list"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"results": []}'},
    ]


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"), [(429, {"retry-after": "7"}, 7.0), (429, {}, 5.0), (500, {}, None)]
)
async def test_http_errors_become_provider_error_with_status_and_retry_hint(
    loopback, status, headers, retry_after
):
    loopback.replies.append(
        Reply(status=status, body={"error": {"message": "nope", "type": "x"}}, headers=headers)
    )
    provider = get_provider(SETTINGS, config=_config(loopback))
    request = Request(system_blocks=["sys"], messages=[make_user("hi")], tools=[], settings=SETTINGS)

    with pytest.raises(ProviderError) as excinfo:
        await _collect(provider, request)

    assert excinfo.value.code == "provider_error"
    assert excinfo.value.status == status
    assert excinfo.value.retry_after == retry_after
    assert len(loopback.received) == 1  # max_retries=0: the app decides about retries


async def test_connection_refused_is_a_provider_error_without_status():
    server = LoopbackServer()
    base_url = server.base_url
    server.httpd.server_close()  # nothing listens there any more
    provider = get_provider(SETTINGS, config=ProviderConfig(options={"openai_compatible_base_url": base_url}))

    with pytest.raises(ProviderError) as excinfo:
        await _collect(
            provider, Request(system_blocks=["s"], messages=[make_user("hi")], tools=[], settings=SETTINGS)
        )

    assert excinfo.value.code == "provider_error"
    assert excinfo.value.status is None


async def test_loop_reports_a_provider_error_code(loopback):
    loopback.replies.append(Reply(status=500, body={"error": {"message": "boom"}}))
    sink = FakeSink()
    provider = get_provider(SETTINGS, config=_config(loopback))
    request = Request(system_blocks=["sys"], messages=[make_user("hi")], tools=[], settings=SETTINGS)

    result = await run_agent_loop(request, provider, [], sink, asyncio.Event(), tool_context=ToolContext())

    assert (result.status, result.error_code, result.error_extra) == (
        "error",
        "provider_error",
        {"status": 500},
    )
    assert sink.calls == []


@pytest.mark.parametrize(
    ("settings_obj", "config"),
    [
        (ModelSettings(provider="openai_compatible", model="m"), ProviderConfig()),  # no base URL
        (
            ModelSettings(provider="openai_compatible", model=""),
            ProviderConfig(options={"openai_compatible_base_url": "x"}),
        ),
        (ModelSettings(provider="mystery", model="m"), ProviderConfig()),
    ],
)
def test_configuration_errors_are_raised_before_any_request(loopback, settings_obj, config):
    with pytest.raises(ProviderError) as excinfo:
        get_provider(settings_obj, config=config)

    assert excinfo.value.code == "provider_not_configured"
    assert loopback.received == []


def test_model_allowlist_is_enforced_before_any_request(loopback):
    config = ProviderConfig(
        options={"openai_compatible_base_url": loopback.base_url},
        models={"openai_compatible": frozenset({"gpt-a"})},
    )

    with pytest.raises(ProviderError, match="not available"):
        get_provider(ModelSettings(provider="openai_compatible", model="gpt-b"), config=config)
    provider = get_provider(ModelSettings(provider="openai_compatible", model="gpt-a"), config=config)
    assert provider.fidelity == "portable"
    assert loopback.received == []


def _text_reply():
    return Reply(sse=openai_sse(_chunk({"content": "ok"}), _chunk({}, finish="stop")))


async def test_a_verified_server_gets_every_feature_and_its_turns_are_replayable(loopback):
    loopback.replies.append(
        Reply(
            sse=openai_sse(
                _tool_chunk(0, call_id="call_a", name="memory", arguments='{"operation": "list"}'),
                _chunk({}, finish="tool_calls"),
                _chunk(usage={"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}),
            )
        )
    )
    memory = FakeMemory()
    provider = get_provider(SETTINGS, config=_config(loopback, capabilities=VERIFIED))
    request = Request(
        system_blocks=["s"], messages=[make_user("list")], tools=[memory.spec()], settings=SETTINGS
    )

    events = await _collect(provider, request)

    assert provider.fidelity == "provider_replayable"
    assert events[-1].message["metadata"] == {
        "runtime": "openai_compatible",
        "fidelity": "provider_replayable",
    }
    assert [e for e in events if isinstance(e, Usage)] == [Usage(input_tokens=30, output_tokens=4)]
    body = loopback.received[0].body
    assert body["stream_options"] == {"include_usage": True}
    assert body["parallel_tool_calls"] is True
    assert [t["function"]["name"] for t in body["tools"]] == ["memory"]


async def test_features_the_server_lacks_are_not_sent_and_its_turns_stay_portable(loopback):
    loopback.replies.append(_text_reply())
    caps = CompatCapabilities(
        tools=True, json_arguments=True, streaming_usage=False, parallel_tool_calls=False
    )
    memory = FakeMemory()
    provider = get_provider(SETTINGS, config=_config(loopback, capabilities=caps))

    events = await _collect(
        provider,
        Request(system_blocks=["s"], messages=[make_user("hi")], tools=[memory.spec()], settings=SETTINGS),
    )

    body = loopback.received[0].body
    assert "stream_options" not in body
    assert "parallel_tool_calls" not in body
    assert [t["function"]["name"] for t in body["tools"]] == ["memory"]
    assert [e for e in events if isinstance(e, Usage)] == []
    assert events[-1].message["metadata"]["fidelity"] == "portable"


async def test_a_server_without_tools_gets_no_tools_and_tool_turns_as_text(loopback):
    loopback.replies.append(_text_reply())
    caps = CompatCapabilities(tools=False, json_arguments=False, streaming_usage=True)
    memory = FakeMemory()
    provider = get_provider(SETTINGS, config=_config(loopback, capabilities=caps))
    messages = [
        make_user("what do you remember?"),
        make_assistant(
            [make_text("Looking."), make_tool_call("c1", "memory", {"operation": "list"})],
            {"runtime": "anthropic", "fidelity": "portable"},
        ),
        make_tool_result("c1", "memory", '{"results": []}', "ok"),
    ]

    await _collect(
        provider, Request(system_blocks=["s"], messages=messages, tools=[memory.spec()], settings=SETTINGS)
    )

    body = loopback.received[0].body
    assert "tools" not in body
    assert body["messages"][1:] == [
        {"role": "user", "content": "what do you remember?"},
        {"role": "assistant", "content": 'Looking.\n[called memory with {"operation": "list"}]'},
        {"role": "user", "content": '[result of memory: {"results": []}]'},
    ]


async def test_a_turn_whose_reasoning_field_the_probe_did_not_verify_is_kept_and_portable(loopback):
    loopback.replies.append(
        Reply(
            sse=openai_sse(
                _chunk({"reasoning_content": "Let me think."}),
                _chunk({"content": "Four."}),
                _chunk({}, finish="stop"),
                _chunk(usage={"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}),
            )
        )
    )
    provider = get_provider(SETTINGS, config=_config(loopback, capabilities=VERIFIED))

    events = await _collect(
        provider, Request(system_blocks=["s"], messages=[make_user("2+2?")], tools=[], settings=SETTINGS)
    )

    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["Let me think."]
    assert events[-1].message == make_assistant(
        [{"type": "reasoning", "field": "reasoning_content", "text": "Let me think."}, make_text("Four.")],
        {"runtime": "openai_compatible", "fidelity": "portable"},
    )


async def test_stop_mid_stream_keeps_the_partial_answer_and_closes_the_request(loopback):
    reply = Reply(
        sse=openai_sse(
            _chunk({"content": "Half an"}), _chunk({"content": " answer"}), _chunk({}, finish="stop")
        ),
        hold_after=1,
    )
    loopback.replies.append(reply)
    sink = FakeSink()
    stop = asyncio.Event()
    provider = get_provider(SETTINGS, config=_config(loopback, capabilities=VERIFIED))

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
                [make_text("Half an")],
                {"status": "stopped", "runtime": "openai_compatible", "fidelity": "portable"},
            ),
        )
    ]
    assert len(loopback.received) == 1
