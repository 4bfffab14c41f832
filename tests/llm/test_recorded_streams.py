"""The providers against streams recorded by the SDK teams and streams written from the providers'
documented examples (tests/llm/fixtures/PROVENANCE.md), replayed byte for byte by a loopback server:
what is stored, and what the next request carries."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers import CompatCapabilities, ModelSettings, ProviderConfig, Request
from opencompany.llm.providers.base import ToolCallEvent
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext, ToolSpec
from opencompany.llm.wire import make_assistant, make_user

from .conformance import ChatCompletionsField, recorded_gemini, stream
from .helpers import FakeMemory, FakeSink
from .loopback import LoopbackServer, Received, Reply

ANTHROPIC = ModelSettings(provider="anthropic", model="claude-opus-4-7", max_output_tokens=1024)
RESPONSES = ModelSettings(provider="openai", model="gpt-5")
COMPATIBLE = ModelSettings(provider="openai_compatible", model="gpt-4o-2024-08-06")
VERIFIED = CompatCapabilities(tools=True, json_arguments=True, streaming_usage=True, continuation=True)
CONTEXT = ToolContext(run_id="r1")


def _config(server: LoopbackServer, caps: CompatCapabilities | None = VERIFIED) -> ProviderConfig:
    return ProviderConfig(
        options={
            "anthropic_api_key": "sk-ant",
            "anthropic_base_url": server.base_url,
            "openai_api_key": "sk",
            "openai_base_url": server.base_url + "/v1",
            "openai_compatible_base_url": server.base_url + "/v1",
            "gemini_api_key": "gm",
            "gemini_base_url": server.base_url,
        },
        openai_compatible_capabilities=caps,
    )


async def _run(
    provider: Any, transcript: list[dict[str, Any]], settings: ModelSettings, tools: list[ToolSpec]
):
    sink = FakeSink(transcript)
    result = await run_agent_loop(
        Request(["s"], list(transcript), [], settings),
        provider,
        tools,
        sink,
        asyncio.Event(),
        tool_context=CONTEXT,
    )
    return result, sink


def _recorder(calls: list[dict[str, Any]], answer: dict[str, Any]) -> Any:
    def execute(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        calls.append(arguments)
        return answer

    return execute


def _weather_tool(calls: list[dict[str, Any]]) -> ToolSpec:
    schema = {"type": "object", "additionalProperties": True}

    def execute(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        calls.append(arguments)
        return {"temperature_c": 9}

    return ToolSpec("GetWeatherArgs", "Weather.", schema, execute)


# --- 1. reasoning_content (documented DeepSeek thinking mode) ----------------------------------------------


async def test_reasoning_content_is_kept_and_sent_back_after_tool_calls(loopback: LoopbackServer) -> None:
    enforcer = ChatCompletionsField(
        [stream("documented/deepseek_reasoning_tool_call.sse", 1), stream("documented/deepseek_text.sse", 1)],
        "reasoning_content",
    )
    loopback.replies.extend([enforcer] * 2)
    caps = CompatCapabilities(
        tools=True,
        json_arguments=True,
        streaming_usage=True,
        continuation=True,
        continuation_fields=("reasoning_content",),
    )
    provider: Any = get_provider(COMPATIBLE, config=_config(loopback, caps))

    result, sink = await _run(provider, [make_user("Keep fact 1.")], COMPATIBLE, [FakeMemory().spec()])

    assert (result.status, enforcer.refusals) == ("finished", [])
    stored = sink.calls[0][1]
    assert stored["content"][0] == {
        "type": "reasoning",
        "field": "reasoning_content",
        "text": "The owner wants this kept; I will call memory (1).",
    }
    assert stored["metadata"]["fidelity"] == "provider_replayable"
    sent = json.loads(loopback.received[1].raw)["messages"][2]
    assert sent["reasoning_content"] == "The owner wants this kept; I will call memory (1)."
    assert sent["tool_calls"][0]["function"]["arguments"] == '{"operation":"remember","content":"fact 1"}'


# --- 2. Gemini's OpenAI-compatible extra_content (documented) -----------------------------------------------


async def test_gemini_openai_compatible_thought_signatures_are_kept_per_call_and_sent_back(
    loopback: LoopbackServer,
) -> None:
    enforcer = ChatCompletionsField(
        [stream("documented/gemini_openai_tool_call.sse", 1), stream("documented/gemini_openai_text.sse", 1)],
        "extra_content",
    )
    loopback.replies.extend([enforcer] * 2)
    caps = CompatCapabilities(
        tools=True,
        json_arguments=True,
        streaming_usage=True,
        continuation=True,
        continuation_fields=("extra_content",),
    )
    provider: Any = get_provider(COMPATIBLE, config=_config(loopback, caps))

    result, sink = await _run(provider, [make_user("Keep fact 1.")], COMPATIBLE, [FakeMemory().spec()])

    assert (result.status, enforcer.refusals) == ("finished", [])
    [call] = sink.calls[0][1]["content"]
    assert call["extra_content"] == {"google": {"thought_signature": "CtgBAdHtim9MhSignatureA1"}}
    sent = json.loads(loopback.received[1].raw)["messages"][2]["tool_calls"][0]
    assert sent["extra_content"] == {"google": {"thought_signature": "CtgBAdHtim9MhSignatureA1"}}


async def test_a_turn_with_an_extension_field_the_probe_did_not_verify_is_portable(
    loopback: LoopbackServer,
) -> None:
    loopback.replies.append(Reply(raw=stream("documented/gemini_openai_tool_call.sse", 1)))
    provider: Any = get_provider(COMPATIBLE, config=_config(loopback))  # verified, but no extension field

    events = [
        e async for e in provider.stream(Request(["s"], [make_user("hi")], [FakeMemory().spec()], COMPATIBLE))
    ]

    assert events[-1].message["metadata"]["fidelity"] == "portable"


# --- 3. Anthropic refusal (anthropic-sdk-python recording) -------------------------------------------------


async def test_a_refusal_is_stored_as_one_and_the_refused_exchange_is_not_sent_again(
    loopback: LoopbackServer,
) -> None:
    def next_turn(received: Received) -> Reply:
        assert received.body["messages"] == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "A different question.", "cache_control": {"type": "ephemeral"}}
                ],
            }
        ]
        return Reply(raw=stream("anthropic/tool_use_response.txt"))

    loopback.replies.extend([Reply(raw=stream("anthropic/refusal_response.txt")), next_turn])
    provider: Any = get_provider(ANTHROPIC, config=_config(loopback))

    first, sink = await _run(provider, [make_user("Something refused.")], ANTHROPIC, [])
    assert first.status == "finished"
    refused = sink.transcript[-1]
    assert refused == make_assistant(
        [],
        {
            "refusal": {
                "type": "refusal",
                "category": "cyber",
                "explanation": "This request was refused due to policy.",
            },
            "runtime": "anthropic",
            "fidelity": "provider_replayable",
        },
    )
    # The next firing: the refused exchange stays stored but is left out of the request.
    assert provider.request_fidelity(Request(["s"], [*sink.transcript, make_user("x")], [], ANTHROPIC)) == (
        "provider_replayable"
    )
    second = FakeSink([*sink.transcript, make_user("A different question.")])
    events = [e async for e in provider.stream(Request(["s"], list(second.transcript), [], ANTHROPIC))]
    assert loopback.failures == []
    # tool_use_response.txt records a `caller`: kept on the call.
    [call] = [e.block for e in events if isinstance(e, ToolCallEvent)]
    assert call == {
        "type": "tool_call",
        "id": "toolu_01NRLabsLyVHZPKxbKvkfSMn",
        "name": "get_weather",
        "arguments": {"location": "Paris"},
        "caller": {"type": "direct"},
    }


# --- 4. Anthropic server tool blocks (anthropic-sdk-python recording) --------------------------------------


async def test_a_server_tool_use_keeps_its_streamed_input_whole(loopback: LoopbackServer) -> None:
    loopback.replies.append(Reply(raw=stream("anthropic/stream-a-toolrefusal.sse")))
    provider: Any = get_provider(ANTHROPIC, config=_config(loopback))

    events = [e async for e in provider.stream(Request(["s"], [make_user("eclipse?")], [], ANTHROPIC))]

    message = events[-1].message
    server_use = message["content"][0]
    assert server_use == {
        "type": "provider_block",
        "provider": "anthropic",
        "block": {
            "type": "server_tool_use",
            "id": "srvtoolu_fixture_a_0001",
            "name": "web_search",
            "input": {"query": "solar eclipse viewing safety news 2026"},
        },
    }
    assert message["content"][1]["block"]["type"] == "web_search_tool_result"
    assert message["metadata"]["refusal"]["type"] == "refusal"


async def test_a_server_tool_use_goes_back_with_its_input(loopback: LoopbackServer) -> None:
    loopback.replies.append(Reply(raw=stream("documented/anthropic_server_tool_end_turn.sse")))
    loopback.replies.append(Reply(raw=stream("anthropic/tool_use_response.txt")))
    provider: Any = get_provider(ANTHROPIC, config=_config(loopback))

    first = [e async for e in provider.stream(Request(["s"], [make_user("eclipse?")], [], ANTHROPIC))]
    transcript = [make_user("eclipse?"), first[-1].message, make_user("and then?")]
    [e async for e in provider.stream(Request(["s"], transcript, [], ANTHROPIC))]

    assert first[-1].message["metadata"] == {"runtime": "anthropic", "fidelity": "provider_replayable"}
    replayed = json.loads(loopback.received[1].raw)["messages"][1]["content"][0]
    assert replayed == {
        "type": "server_tool_use",
        "id": "srvtoolu_fixture_a_0001",
        "name": "web_search",
        "input": {"query": "solar eclipse viewing safety news 2026"},
    }


# --- 5. A tool call cut off by max_tokens (anthropic-sdk-python recording) ---------------------------------


async def test_a_call_cut_off_by_max_tokens_is_not_run_is_answered_so_and_replays_as_text(
    loopback: LoopbackServer,
) -> None:
    def next_request(received: Received) -> Reply:
        assistant, results = received.body["messages"][1:3]
        assert [b["type"] for b in assistant["content"]] == ["text", "text"]
        assert assistant["content"][1]["text"].startswith(
            '[a call of make_file was cut off: {"filename": "taxes.txt'
        )
        assert results["content"][0]["type"] == "text"
        assert '"call_cut_off"' in results["content"][0]["text"]
        return Reply(raw=stream("anthropic/refusal_response.txt"))

    loopback.replies.extend(
        [Reply(raw=stream("anthropic/incomplete_partial_json_response.txt")), next_request]
    )
    ran: list[dict[str, Any]] = []
    spec = ToolSpec("make_file", "Make a file.", {"type": "object"}, _recorder(ran, {"ok": True}))
    provider: Any = get_provider(ANTHROPIC, config=_config(loopback))

    result, sink = await _run(provider, [make_user("Write taxes.txt")], ANTHROPIC, [spec])

    assert loopback.failures == []
    assert result.status == "finished"
    assert ran == []
    call = sink.calls[0][1]["content"][1]
    assert call["cut_off"] is True
    assert call["raw_arguments"].endswith('"\\n\\"Filing taxes') or call["raw_arguments"].endswith(
        '\n"Filing taxes'
    )
    tool = sink.calls[1][1]["content"][0]
    assert (tool["status"], json.loads(tool["content"])["error"]["code"]) == ("error", "call_cut_off")


# --- 6. Responses without output_item.done (documented gateway stream) -------------------------------------


async def test_a_responses_stream_without_output_item_done_is_assembled_not_stored_empty(
    loopback: LoopbackServer,
) -> None:
    loopback.replies.append(Reply(raw=stream("documented/responses_without_output_item_done.sse")))
    provider: Any = get_provider(RESPONSES, config=_config(loopback))

    events = [e async for e in provider.stream(Request(["s"], [make_user("tea")], [], RESPONSES))]

    assert events[-1].message == make_assistant(
        [{"type": "text", "text": "Tea, noted.", "item_id": "msg_gw1"}],
        {"runtime": "openai", "fidelity": "provider_replayable"},
    )


# --- 7. Exact argument text (openai-python recording) ------------------------------------------------------


async def test_tool_arguments_go_back_as_the_exact_text_received(loopback: LoopbackServer) -> None:
    recorded = stream("openai/c6aa7e397b7123c3501f25df3a05d4daf7e8ad6d61ffa406ab5361fe36a8d5b1.bin")
    loopback.replies.extend([Reply(raw=recorded), Reply(raw=stream("documented/gemini_openai_text.sse", 1))])
    calls: list[dict[str, Any]] = []
    provider: Any = get_provider(COMPATIBLE, config=_config(loopback))

    result, _sink = await _run(
        provider, [make_user("Weather in Edinburgh?")], COMPATIBLE, [_weather_tool(calls)]
    )

    assert result.status == "finished"
    assert calls == [{"city": "Edinburgh", "country": "UK", "units": "c"}]
    sent = json.loads(loopback.received[1].raw)["messages"][2]["tool_calls"][0]["function"]
    assert sent == {"name": "GetWeatherArgs", "arguments": '{"city":"Edinburgh","country":"UK","units":"c"}'}


# --- 8. Request records labelled with what they carried, failed calls included ------------------------------


async def test_each_request_record_carries_the_fidelity_of_what_it_sent(loopback: LoopbackServer) -> None:
    loopback.replies.extend(
        [
            Reply(raw=stream("documented/deepseek_reasoning_tool_call.sse", 1)),
            Reply(raw=stream("documented/gemini_openai_text.sse", 1)),
            Reply(status=500, body={"error": {"message": "overloaded"}}),
        ]
    )
    provider: Any = get_provider(COMPATIBLE, config=_config(loopback))  # reasoning_content not verified

    first, sink = await _run(provider, [make_user("Keep fact 1.")], COMPATIBLE, [FakeMemory().spec()])
    second, failed = await _run(provider, [*sink.transcript, make_user("More?")], COMPATIBLE, [])

    assert (first.status, second.status) == ("finished", "error")
    # The first request carried nothing but the owner's message; the second carried a turn whose
    # reasoning field was never verified, though its own answer is replayable; the failed one too.
    assert [(r.runtime, r.fidelity, r.status) for r in [*sink.records, *failed.records]] == [
        ("openai_compatible", "provider_replayable", "ok"),
        ("openai_compatible", "portable", "ok"),
        ("openai_compatible", "portable", "error"),
    ]
    assert sink.transcript[-1]["metadata"]["fidelity"] == "provider_replayable"


# --- Gemini native (js-genai recording) ---------------------------------------------------------------------


async def test_a_recorded_gemini_function_call_round_trip_sends_what_the_sdk_team_recorded(
    loopback: LoopbackServer,
) -> None:
    recording = "Chats_Tests_chats_function_calling_Google_AI_with_function_calling_stream.json"
    first, second = recorded_gemini(recording)
    settings = ModelSettings(provider="gemini", model="gemini-2.0-flash")
    loopback.replies.extend([Reply(raw=first), Reply(raw=second)])
    provider: Any = get_provider(settings, config=_config(loopback))
    calls: list[dict[str, Any]] = []
    divide = ToolSpec(
        "customDivide",
        "Custom divide function",
        {"type": "object"},
        _recorder(calls, {"result": 50}),
    )

    result, sink = await _run(provider, [make_user("what is the result of 100/2")], settings, [divide])

    assert result.status == "error"  # the recording's second answer is another call, then no reply
    assert calls[0] == {"denominator": 2, "numerator": 100}
    recorded = json.loads(loopback.received[0].raw)["contents"]
    assert recorded == [{"parts": [{"text": "what is the result of 100/2"}], "role": "user"}]
    sent = json.loads(loopback.received[1].raw)["contents"][1]
    assert sent == {
        "parts": [{"functionCall": {"args": {"denominator": 2, "numerator": 100}, "name": "customDivide"}}],
        "role": "model",
    }
    assert sink.calls[0][1]["content"][0]["arguments"] == {"denominator": 2, "numerator": 100}
