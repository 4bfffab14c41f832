"""OpenAI native on the Responses API, through the real `openai` SDK against a loopback server that
speaks the Responses streaming format."""

from __future__ import annotations

import asyncio
import json

import pytest

from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers import ModelSettings, ProviderConfig, ProviderError, Request
from opencompany.llm.providers.base import Completed, TextDelta, ThinkingDelta, ToolCallEvent, Usage
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext
from opencompany.llm.wire import make_assistant, make_text, make_user

from .helpers import FakeMemory, FakeSink
from .loopback import LoopbackServer, Received, Reply, responses_sse

SETTINGS = ModelSettings(
    provider="openai", model="gpt-test", max_output_tokens=512, context_window=200_000, reasoning_effort="low"
)
ENCRYPTED = "gAAAAABo9x+Qk3/zZ0rEASONING+/=" * 12
SUMMARY = "The owner wants tea remembered. ünïcode “quotes”"
REASONING_ITEM = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": SUMMARY}],
    "encrypted_content": ENCRYPTED,
}
STAMP = {"runtime": "openai", "fidelity": "provider_replayable"}


def _config(server: LoopbackServer) -> ProviderConfig:
    return ProviderConfig(options={"openai_api_key": "sk-test", "openai_base_url": server.base_url + "/v1"})


def _response(status="in_progress", output=(), usage=None):
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": "gpt-test",
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
        "error": None,
        "incomplete_details": None,
    }


def _usage(input_tokens, cached, output_tokens, reasoning=0):
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def _message_events(index, item_id, chunks):
    text = "".join(chunks)
    done = {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**done, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": item_id,
            "output_index": index,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        *(
            {
                "type": "response.output_text.delta",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "delta": chunk,
                "logprobs": [],
            }
            for chunk in chunks
        ),
        {
            "type": "response.output_text.done",
            "item_id": item_id,
            "output_index": index,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        },
        {"type": "response.output_item.done", "output_index": index, "item": done},
    ]


def _reasoning_events(index):
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": ENCRYPTED[:10]},
        },
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": "rs_1",
            "output_index": index,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": ""},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": index,
            "summary_index": 0,
            "delta": SUMMARY[:16],
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": index,
            "summary_index": 0,
            "delta": SUMMARY[16:],
        },
        {"type": "response.output_item.done", "output_index": index, "item": REASONING_ITEM},
    ]


def _call_events(index, item_id, call_id, arguments_chunks):
    arguments = "".join(arguments_chunks)
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": "memory", "arguments": ""}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress"},
        },
        *(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item_id,
                "output_index": index,
                "delta": chunk,
            }
            for chunk in arguments_chunks
        ),
        {
            "type": "response.function_call_arguments.done",
            "item_id": item_id,
            "output_index": index,
            "arguments": arguments,
        },
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": {**item, "arguments": arguments, "status": "completed"},
        },
    ]


def _turn(*item_events, usage):
    return responses_sse(
        {"type": "response.created", "response": _response()},
        {"type": "response.in_progress", "response": _response()},
        *item_events,
        {"type": "response.completed", "response": _response("completed", usage=usage)},
    )


def _reasoning_tool_turn():
    return _turn(
        *_reasoning_events(0),
        *_message_events(1, "msg_1", ["Saving ", "that."]),
        *_call_events(2, "fc_1", "call_1", ['{"operation":"remember",', '"content":"tea"}']),
        usage=_usage(1200, 1024, 80, reasoning=64),
    )


def _text_turn(text="Done."):
    return _turn(*_message_events(0, "msg_2", [text]), usage=_usage(1300, 1200, 5))


async def _collect(provider, request):
    return [event async for event in provider.stream(request)]


async def test_reasoning_text_and_a_function_call_stream_in_order_with_exact_usage(loopback):
    loopback.replies.append(Reply(sse=_reasoning_tool_turn()))
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
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == SUMMARY
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Saving ", "that."]
    call = {
        "type": "tool_call",
        "id": "call_1",
        "name": "memory",
        "arguments": {"operation": "remember", "content": "tea"},
        "item_id": "fc_1",
        "provider_arguments": '{"operation":"remember","content":"tea"}',
    }
    assert [e.block for e in events if isinstance(e, ToolCallEvent)] == [call]
    assert [e for e in events if isinstance(e, Usage)] == [
        Usage(input_tokens=1200, output_tokens=80, cache_read_tokens=1024)
    ]
    assert events[-1] == Completed(
        make_assistant(
            [REASONING_ITEM, {"type": "text", "text": "Saving that.", "item_id": "msg_1"}, call], STAMP
        )
    )
    received = loopback.received[0]
    assert received.path == "/v1/responses"
    assert received.headers["authorization"] == "Bearer sk-test"
    body = received.body
    assert (body["stream"], body["store"], body["include"]) == (True, False, ["reasoning.encrypted_content"])
    assert "previous_response_id" not in body
    assert body["instructions"] == "You are Ada.\n\nNotes:\n- likes tea"
    assert body["input"] == [{"role": "user", "content": "remember tea"}]
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["max_output_tokens"] == 512
    assert body["tools"] == [
        {
            "type": "function",
            "name": "memory",
            "description": memory.spec().description,
            "parameters": memory.spec().input_schema,
            "strict": False,
        }
    ]


async def test_encrypted_reasoning_is_replayed_byte_identically_on_the_next_request(loopback):
    def replayed(received: Received) -> Reply:
        items = received.body["input"]
        assert items[0] == {"role": "user", "content": "remember tea"}
        assert items[1] == REASONING_ITEM
        assert items[2] == {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Saving that.", "annotations": []}],
        }
        assert items[3] == {
            "type": "function_call",
            "call_id": "call_1",
            "name": "memory",
            "arguments": '{"operation":"remember","content":"tea"}',
            "id": "fc_1",
        }
        assert items[4]["type"] == "function_call_output"
        assert items[4]["call_id"] == "call_1"
        # the exact bytes of the encrypted content reach the server
        assert json.dumps(ENCRYPTED).encode() in received.raw
        assert received.body["store"] is False
        return Reply(sse=_text_turn("I'll remember that you like tea."))

    loopback.replies.extend([Reply(sse=_reasoning_tool_turn()), replayed])
    memory = FakeMemory()
    sink = FakeSink()
    provider = get_provider(SETTINGS, config=_config(loopback))
    request = Request(
        system_blocks=["You are Ada."], messages=[make_user("remember tea")], tools=[], settings=SETTINGS
    )

    result = await run_agent_loop(
        request, provider, [memory.spec()], sink, asyncio.Event(), tool_context=ToolContext(run_id="r1")
    )

    assert loopback.failures == []
    assert result.status == "finished"
    assert sink.kinds == ["assistant", "tool_result", "final"]
    assert sink.calls[0][1]["content"][0] == REASONING_ITEM
    assert sink.calls[2][1] == make_assistant(
        [{"type": "text", "text": "I'll remember that you like tea.", "item_id": "msg_2"}], STAMP
    )
    assert [i["content"] for i in memory.items.values()] == ["tea"]
    assert result.usage == Usage(input_tokens=2500, output_tokens=85, cache_read_tokens=2224)


async def test_malformed_arguments_are_kept_raw_and_replayed_as_sent(loopback):
    raw = '{"operation": "remember", "content": '

    def replayed(received: Received) -> Reply:
        call = received.body["input"][1]
        assert call == {
            "type": "function_call",
            "call_id": "call_x",
            "name": "memory",
            "arguments": raw,
            "id": "fc_x",
        }
        assert received.body["input"][2]["call_id"] == "call_x"
        assert '"invalid_arguments"' in received.body["input"][2]["output"]
        return Reply(sse=_text_turn("Sorry."))

    loopback.replies.extend(
        [Reply(sse=_turn(*_call_events(0, "fc_x", "call_x", [raw]), usage=_usage(50, 0, 9))), replayed]
    )
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
    block = sink.calls[0][1]["content"][0]
    assert (block["raw_arguments"], block["item_id"]) == (raw, "fc_x")
    assert block["parse_error"].startswith("invalid JSON")
    assert "arguments" not in block
    assert memory.items == {}


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"), [(429, {"retry-after": "2"}, 2.0), (500, {}, None), (401, {}, None)]
)
async def test_http_errors_become_provider_error(loopback, status, headers, retry_after):
    loopback.replies.append(
        Reply(status=status, body={"error": {"message": "nope", "type": "server_error"}}, headers=headers)
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


@pytest.mark.parametrize(
    "failure",
    [
        {
            "type": "response.failed",
            "response": {**_response("failed"), "error": {"code": "server_error", "message": "boom"}},
        },
        {"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None},
    ],
)
async def test_a_failure_inside_the_stream_is_a_provider_error_and_commits_nothing(loopback, failure):
    loopback.replies.append(
        Reply(sse=responses_sse({"type": "response.created", "response": _response()}, failure))
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

    assert (result.status, result.error_code) == ("error", "provider_error")
    assert sink.calls == []


async def test_stop_mid_stream_keeps_the_partial_text_without_reasoning(loopback):
    events = _turn(
        *_reasoning_events(0), *_message_events(1, "msg_1", ["Half an", " answer"]), usage=_usage(9, 0, 9)
    )
    first_text = next(i for i, frame in enumerate(events) if "output_text.delta" in frame)
    reply = Reply(sse=events, hold_after=first_text + 1)
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
                [make_text("Half an")], {"status": "stopped", "runtime": "openai", "fidelity": "portable"}
            ),
        )
    ]


async def test_another_runtimes_signed_thinking_never_reaches_openai(loopback):
    signature = "ErUBCkYIBRgCIkDm+/zZ0sig=="

    def clean(received: Received) -> Reply:
        assert signature.encode() not in received.raw
        assert b"secret chain of thought" not in received.raw
        assert b"EmwKAhgBEgy3va3pzix" not in received.raw
        assert received.body["input"][1] == {"role": "assistant", "content": "Tea, noted."}
        return Reply(sse=_text_turn())

    loopback.replies.append(clean)
    provider = get_provider(SETTINGS, config=_config(loopback))
    anthropic_turn = make_assistant(
        [
            {"type": "thinking", "thinking": "secret chain of thought", "signature": signature},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            make_text("Tea, noted."),
        ],
        {"runtime": "anthropic", "fidelity": "provider_replayable"},
    )

    await _collect(
        provider,
        Request(
            system_blocks=["s"],
            messages=[make_user("remember tea"), anthropic_turn, make_user("and now?")],
            tools=[],
            settings=SETTINGS,
        ),
    )

    assert loopback.failures == []
    assert len(loopback.received) == 1
