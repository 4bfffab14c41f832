from __future__ import annotations

import pytest

from opencompany.llm.providers import CompatCapabilities, ProviderError
from opencompany.llm.providers.openai_compatible_probe import probe_openai_compatible

from .loopback import LoopbackServer, Received, Reply, openai_sse

USAGE = {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
REFUSED = Reply(
    status=400, body={"error": {"message": "unsupported parameter", "type": "invalid_request_error"}}
)


def _chunk(delta=None, finish=None, usage=None):
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}
    if delta is not None or finish is not None:
        chunk["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _call(index, call_id, arguments):
    tc = {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": "record_probe", "arguments": arguments},
    }
    return _chunk({"tool_calls": [tc]})


def _server(*, usage=True, parallel=True, tools=True, arguments=('{"value": "alpha"}', '{"value": "beta"}')):
    """A compatible server with the given support; it refuses what it lacks with HTTP 400."""

    def answer(received: Received) -> Reply:
        body = received.body
        assert received.path == "/v1/chat/completions"
        assert body["model"] == "local-model"
        assert body["stream"] is True
        if "stream_options" in body and not usage:
            return REFUSED
        if "parallel_tool_calls" in body and not parallel:
            return REFUSED
        if "tools" in body and not tools:
            return REFUSED
        tail = [_chunk(usage=USAGE)] if "stream_options" in body else []
        if "tools" in body:
            calls = [_call(i, f"call_{i}", a) for i, a in enumerate(arguments)]
            return Reply(sse=openai_sse(*calls, _chunk({}, finish="tool_calls"), *tail))
        return Reply(sse=openai_sse(_chunk({"content": "ready"}), _chunk({}, finish="stop"), *tail))

    return answer


async def _probe(loopback):
    return await probe_openai_compatible(
        api_key="unused", base_url=loopback.base_url + "/v1", model="local-model", timeout_s=10
    )


async def test_a_server_that_supports_everything_passes_and_is_replayable(loopback):
    loopback.replies.extend([_server(), _server(), _server()])

    caps = await _probe(loopback)

    assert caps == CompatCapabilities(
        tools=True, json_arguments=True, streaming_usage=True, parallel_tool_calls=True, continuation=True
    )
    assert caps.fidelity == "provider_replayable"
    assert loopback.failures == []
    text, tools, follow_up = (r.body for r in loopback.received)
    assert follow_up["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": "record_probe", "arguments": a}}
                for i, a in enumerate(('{"value": "alpha"}', '{"value": "beta"}'))
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": '{"recorded": true}'},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"recorded": true}'},
    ]
    assert text["stream_options"] == {"include_usage": True}
    assert "tools" not in text
    assert tools["parallel_tool_calls"] is True
    assert tools["tools"][0]["function"]["name"] == "record_probe"


async def test_a_server_refusing_stream_options_and_parallel_calls_is_asked_again_without_them(loopback):
    server = _server(usage=False, parallel=False)
    loopback.replies.extend([server] * 5)

    caps = await _probe(loopback)

    assert caps == CompatCapabilities(
        tools=True, json_arguments=True, streaming_usage=False, parallel_tool_calls=False, continuation=True
    )
    assert caps.fidelity == "portable"
    assert [("stream_options" in r.body, "parallel_tool_calls" in r.body) for r in loopback.received] == [
        (True, False),
        (False, False),
        (False, True),
        (False, False),
        (False, False),
    ]


async def test_a_server_refusing_tools_lacks_tools_and_json_arguments(loopback):
    loopback.replies.extend([_server(tools=False)] * 3)

    caps = await _probe(loopback)

    assert caps == CompatCapabilities(
        tools=False, json_arguments=False, streaming_usage=True, parallel_tool_calls=False
    )
    assert len(loopback.received) == 3


async def test_a_tool_call_whose_arguments_are_not_a_json_object_fails_json_arguments(loopback):
    loopback.replies.extend([_server(), _server(arguments=("value=alpha",)), _server()])

    caps = await _probe(loopback)

    assert (caps.tools, caps.json_arguments, caps.fidelity) == (True, False, "portable")


async def test_a_model_that_makes_no_call_is_not_credited_with_json_arguments(loopback):
    loopback.replies.extend([_server(), _server(arguments=())])

    caps = await _probe(loopback)

    assert (caps.tools, caps.json_arguments) == (True, False)


async def test_a_failing_server_is_a_provider_error_and_nothing_is_concluded(loopback):
    loopback.replies.append(Reply(status=503, body={"error": {"message": "loading model"}}))

    with pytest.raises(ProviderError) as excinfo:
        await _probe(loopback)

    assert (excinfo.value.code, excinfo.value.status) == ("provider_error", 503)
    assert len(loopback.received) == 1


async def test_an_unreachable_server_is_a_provider_error():
    server = LoopbackServer()
    server.httpd.server_close()

    with pytest.raises(ProviderError) as excinfo:
        await probe_openai_compatible(api_key="k", base_url=server.base_url + "/v1", model="m", timeout_s=5)

    assert (excinfo.value.code, excinfo.value.status) == ("provider_error", None)


async def test_a_server_refusing_a_plain_streamed_request_is_a_provider_error(loopback):
    loopback.replies.extend([REFUSED, REFUSED])

    with pytest.raises(ProviderError) as excinfo:
        await _probe(loopback)

    assert (excinfo.value.code, excinfo.value.status) == ("provider_error", 400)
    assert len(loopback.received) == 2


def _thinking_server(*, takes_it_back: bool):
    """A thinking-mode server (DeepSeek's documented rule): its tool-call turn streams
    ``reasoning_content``, and a request carrying that turn without it is refused; with
    ``takes_it_back=False`` it refuses the field itself."""

    def answer(received: Received) -> Reply:
        body = received.body
        tail = [_chunk(usage=USAGE)] if "stream_options" in body else []
        for message in body["messages"]:
            if message.get("tool_calls"):
                carried = message.get("reasoning_content") == "Call it twice."
                if carried != takes_it_back:
                    return REFUSED
                return Reply(sse=openai_sse(_chunk({"content": "done"}), _chunk({}, finish="stop"), *tail))
        if "tools" in body:
            calls = [_call(0, "call_0", '{"value": "alpha"}'), _call(1, "call_1", '{"value": "beta"}')]
            thinking = _chunk({"reasoning_content": "Call it twice."})
            return Reply(sse=openai_sse(thinking, *calls, _chunk({}, finish="tool_calls"), *tail))
        return Reply(sse=openai_sse(_chunk({"content": "ready"}), _chunk({}, finish="stop"), *tail))

    return answer


async def test_a_server_emitting_reasoning_content_is_replayable_once_its_round_trip_is_verified(loopback):
    loopback.replies.extend([_thinking_server(takes_it_back=True)] * 3)

    caps = await _probe(loopback)

    assert (caps.continuation, caps.continuation_fields, caps.fidelity) == (
        True,
        ("reasoning_content",),
        "provider_replayable",
    )
    assert loopback.received[2].body["messages"][1]["reasoning_content"] == "Call it twice."


async def test_a_server_refusing_the_continuation_round_trip_is_portable(loopback):
    loopback.replies.extend([_thinking_server(takes_it_back=False)] * 3)

    caps = await _probe(loopback)

    assert (caps.tools, caps.json_arguments, caps.streaming_usage) == (True, True, True)
    assert (caps.continuation, caps.continuation_fields, caps.fidelity) == (False, (), "portable")


async def test_a_server_putting_thought_signatures_in_extra_content_verifies_that_field(loopback):
    """Gemini's OpenAI-compatible endpoint: each call's ``extra_content`` must come back with it."""
    signature = {"google": {"thought_signature": "CtgBsig"}}

    def answer(received: Received) -> Reply:
        body = received.body
        tail = [_chunk(usage=USAGE)] if "stream_options" in body else []
        for message in body["messages"]:
            for call in message.get("tool_calls") or ():
                if call.get("extra_content") != signature:
                    return REFUSED
            if message.get("tool_calls"):
                return Reply(sse=openai_sse(_chunk({"content": "done"}), _chunk({}, finish="stop"), *tail))
        if "tools" in body:
            call = {
                "index": 0,
                "id": "call_0",
                "type": "function",
                "function": {"name": "record_probe", "arguments": '{"value":"alpha"}'},
                "extra_content": signature,
            }
            return Reply(
                sse=openai_sse(_chunk({"tool_calls": [call]}), _chunk({}, finish="tool_calls"), *tail)
            )
        return Reply(sse=openai_sse(_chunk({"content": "ready"}), _chunk({}, finish="stop"), *tail))

    loopback.replies.extend([answer] * 3)

    caps = await _probe(loopback)

    assert (caps.continuation, caps.continuation_fields, caps.fidelity) == (
        True,
        ("extra_content",),
        "provider_replayable",
    )
    sent = loopback.received[2].body["messages"][1]["tool_calls"][0]
    assert (sent["extra_content"], sent["function"]["arguments"]) == (signature, '{"value":"alpha"}')
