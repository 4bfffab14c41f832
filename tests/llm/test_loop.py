from __future__ import annotations

import asyncio
import hashlib

from opencompany.llm.context import CompactionPolicy
from opencompany.llm.loop import NOT_RUN_TEXT, CompactionEvent, LoopPolicies, ToolResultEvent, run_agent_loop
from opencompany.llm.policies import SUMMARIZE_INSTRUCTION, close_unanswered_tool_calls
from opencompany.llm.providers.base import (
    ModelSettings,
    ProviderErrorEvent,
    Request,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from opencompany.llm.tools import ToolContext, ToolSpec
from opencompany.llm.wire import make_assistant, make_text, make_tool_result, make_user, tool_result_of

from .helpers import FakeMemory, FakeNotes, FakeSink, ScriptedProvider, answer, call, calls

SETTINGS = ModelSettings(provider="scripted", model="m", context_window=1_000_000)
CONTEXT = ToolContext(
    run_id="run_1", workflow_id="wf_1", generation=1, agent_node_id="wf_1:aiAgent:1", owner_id=7
)


def _request(messages=None, system=("You are Ada.", "Notes: none"), settings=SETTINGS):
    return Request(
        system_blocks=list(system), messages=list(messages or [make_user("hi")]), tools=[], settings=settings
    )


async def test_commits_assistant_then_each_result_then_final_in_order():
    memory, notes = FakeMemory(), FakeNotes()
    sink = FakeSink()
    seen_commits_at_second_request = []

    def second(request):
        seen_commits_at_second_request.append(list(sink.kinds))
        return answer("All done.", Usage(30, 4))

    provider = ScriptedProvider(
        [
            calls(
                call("c1", "memory", operation="remember", content="tea"),
                call("c2", "notes", operation="add", text="x"),
                text="On it.",
                usage=Usage(20, 6, 5, 1),
            ),
            second,
        ]
    )

    result = await run_agent_loop(
        _request(), provider, [memory.spec(), notes.spec()], sink, asyncio.Event(), tool_context=CONTEXT
    )

    assert result.status == "finished"
    assert sink.kinds == ["assistant", "tool_result", "tool_result", "final"]
    assert seen_commits_at_second_request == [["assistant", "tool_result", "tool_result"]]
    assert provider.requests[1].messages == [make_user("hi"), *[payload for _, payload in sink.calls[:3]]]
    assert [tool_result_of(p)["status"] for k, p in sink.calls if k == "tool_result"] == ["ok", "ok"]
    assert sink.calls[3][1] == make_assistant([make_text("All done.")])
    assert sink.usage == Usage(50, 10, 5, 1)
    assert result.usage == Usage(50, 10, 5, 1)
    assert result.iterations == 2
    assert result.final_message == sink.calls[3][1]
    assert result.messages == [make_user("hi"), *[p for _, p in sink.calls]]
    assert notes.entries == ["x"]
    assert memory.contexts[0].tool_call_id == "c1"
    assert memory.contexts[0].run_id == "run_1"
    assert [r.system_blocks for r in provider.requests] == [["You are Ada.", "Notes: none"]] * 2
    assert [t.name for t in provider.requests[0].tools] == ["memory", "notes"]


async def test_a_sink_failure_on_the_assistant_message_runs_no_tool_and_commits_nothing_more():
    memory = FakeMemory()
    sink = FakeSink(fail_at=1)
    provider = ScriptedProvider(
        [calls(call("c1", "memory", operation="remember", content="tea")), answer("never")]
    )

    result = await run_agent_loop(
        _request(), provider, [memory.spec()], sink, asyncio.Event(), tool_context=CONTEXT
    )

    assert (result.status, result.error_code) == ("error", "persist_failed")
    assert sink.kinds == ["assistant:failed"]
    assert memory.items == {}
    assert len(provider.requests) == 1


async def test_a_sink_failure_on_a_tool_result_stops_before_the_next_tool():
    memory = FakeMemory()
    sink = FakeSink(fail_at=2)
    provider = ScriptedProvider(
        [
            calls(
                call("c1", "memory", operation="remember", content="one"),
                call("c2", "memory", operation="remember", content="two"),
            ),
            answer("never"),
        ]
    )

    result = await run_agent_loop(
        _request(), provider, [memory.spec()], sink, asyncio.Event(), tool_context=CONTEXT
    )

    assert (result.status, result.error_code) == ("error", "persist_failed")
    assert sink.kinds == ["assistant", "tool_result:failed"]
    assert [i["content"] for i in memory.items.values()] == ["one"]
    assert len(provider.requests) == 1


async def test_a_sink_failure_on_the_final_answer_is_persist_failed():
    sink = FakeSink(fail_at=1)

    result = await run_agent_loop(
        _request(), ScriptedProvider([answer("hello")]), [], sink, asyncio.Event(), tool_context=CONTEXT
    )

    assert (result.status, result.error_code) == ("error", "persist_failed")


async def test_unknown_tools_invalid_arguments_and_tool_exceptions_become_error_results():
    def boom(context, arguments):
        raise RuntimeError("secret connection string")

    exploding = ToolSpec("explode", "Fails.", {"type": "object"}, boom)
    memory = FakeMemory()
    sink = FakeSink()
    provider = ScriptedProvider(
        [
            calls(
                call("c1", "nope"),
                call("c2", "memory", operation="shout"),
                call("c3", "memory", operation="remember", content="ok", owner_id=9),
                call("c4", "explode"),
            ),
            answer("sorry"),
        ]
    )

    result = await run_agent_loop(
        _request(), provider, [memory.spec(), exploding], sink, asyncio.Event(), tool_context=CONTEXT
    )

    results = [tool_result_of(p) for k, p in sink.calls if k == "tool_result"]
    assert result.status == "finished"
    assert [r["status"] for r in results] == ["error"] * 4
    assert (
        results[0]["content"]
        == '{"error": {"code": "unknown_tool", "message": "There is no tool named \'nope\'. Available tools: explode, memory."}}'
    )
    assert results[1]["content"] == (
        '{"error": {"code": "invalid_arguments", "message": "The arguments do not match the schema: '
        "arguments.operation: 'shout' is not one of ['remember', 'recall', 'list', 'forget']\"}}"
    )
    assert "Additional properties are not allowed ('owner_id' was unexpected)" in results[2]["content"]
    assert (
        results[3]["content"]
        == '{"error": {"code": "tool_failed", "message": "The tool failed unexpectedly (RuntimeError)."}}'
    )
    assert "secret" not in results[3]["content"]
    assert memory.items == {}


async def test_long_tool_results_are_capped():
    big = ToolSpec("big", "Big.", {"type": "object"}, lambda context, arguments: {"data": "x" * 500})
    sink = FakeSink()
    provider = ScriptedProvider([calls(call("c1", "big")), answer("ok")])

    await run_agent_loop(
        _request(), provider, [big], sink, asyncio.Event(), tool_context=CONTEXT, tool_result_max_chars=100
    )

    content = tool_result_of(sink.calls[1][1])["content"]
    assert content.startswith(
        '{"data": "' + "x" * 90 + "\n\n[Result truncated: showing the first 100 of 512 characters."
    )
    assert sink.calls[1][1]["metadata"] == {"truncated": {"shown": 100, "total": 512}}


async def test_stop_during_streaming_commits_the_partial_text_marked_stopped():
    sink = FakeSink()
    provider = ScriptedProvider(
        [[TextDelta("Once upon "), TextDelta("a time"), TextDelta(" never sent")]], hang_after=2
    )
    stop = asyncio.Event()

    task = asyncio.create_task(run_agent_loop(_request(), provider, [], sink, stop, tool_context=CONTEXT))
    await asyncio.wait_for(provider.started.wait(), 5)
    stop.set()
    result = await asyncio.wait_for(task, 5)

    assert result.status == "stopped"
    assert sink.calls == [
        (
            "final",
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Once upon a time"}],
                "metadata": {"status": "stopped", "runtime": "scripted", "fidelity": "portable"},
            },
        )
    ]
    assert result.final_message["metadata"] == {
        "status": "stopped",
        "runtime": "scripted",
        "fidelity": "portable",
    }


async def test_stop_before_any_text_commits_nothing():
    sink = FakeSink()
    provider = ScriptedProvider([[TextDelta("never")]], hang_after=0)
    stop = asyncio.Event()

    task = asyncio.create_task(run_agent_loop(_request(), provider, [], sink, stop, tool_context=CONTEXT))
    await asyncio.wait_for(provider.started.wait(), 5)
    stop.set()
    result = await asyncio.wait_for(task, 5)

    assert result.status == "stopped"
    assert sink.calls == []


async def test_stop_between_two_tool_calls_answers_the_second_with_not_run():
    stop = asyncio.Event()

    def first_tool(context, arguments):
        stop.set()  # the owner presses Stop while the first tool runs
        return {"done": 1}

    never_called = []
    tools = [
        ToolSpec("first", "", {"type": "object"}, first_tool),
        ToolSpec("second", "", {"type": "object"}, lambda c, a: never_called.append(1) or {}),
    ]
    initial = [make_user("do two things")]
    sink = FakeSink(initial)
    provider = ScriptedProvider([calls(call("c1", "first"), call("c2", "second")), answer("never")])

    result = await run_agent_loop(_request(initial), provider, tools, sink, stop, tool_context=CONTEXT)

    assert result.status == "stopped"
    assert sink.kinds == ["assistant", "tool_result", "tool_result"]
    assert sink.calls[1][1] == make_tool_result("c1", "first", '{"done": 1}', "ok")
    assert sink.calls[2][1] == make_tool_result("c2", "second", NOT_RUN_TEXT, "not_run")
    assert never_called == []
    assert len(provider.requests) == 1
    assert close_unanswered_tool_calls(sink.transcript) is sink.transcript


async def test_iteration_limit():
    memory = FakeMemory()
    provider = ScriptedProvider([calls(call(f"c{i}", "memory", operation="list")) for i in range(3)])
    sink = FakeSink()

    result = await run_agent_loop(
        _request(), provider, [memory.spec()], sink, asyncio.Event(), tool_context=CONTEXT, max_iterations=3
    )

    assert result.status == "iteration_limit"
    assert result.iterations == 3
    assert sink.kinds == ["assistant", "tool_result"] * 3


async def test_provider_error_event_ends_the_run_with_its_code():
    provider = ScriptedProvider(
        [[TextDelta("partial"), ProviderErrorEvent("provider_error", "overloaded", 529, 2.0)]]
    )
    sink = FakeSink()

    result = await run_agent_loop(_request(), provider, [], sink, asyncio.Event(), tool_context=CONTEXT)

    assert (result.status, result.error_code, result.error_extra) == (
        "error",
        "provider_error",
        {"status": 529, "retry_after": 2.0},
    )
    assert sink.calls == []


async def test_events_are_forwarded_and_a_failing_callback_is_ignored():
    memory = FakeMemory()
    seen = []

    async def on_event(event):
        seen.append(type(event).__name__)
        if isinstance(event, ToolCallEvent):
            raise RuntimeError("websocket gone")

    provider = ScriptedProvider(
        [calls(call("c1", "memory", operation="list"), text="Looking"), answer("Found nothing")]
    )

    result = await run_agent_loop(
        _request(),
        provider,
        [memory.spec()],
        FakeSink(),
        asyncio.Event(),
        tool_context=CONTEXT,
        on_event=on_event,
    )

    assert result.status == "finished"
    assert seen == [
        "TextDelta",
        "ToolCallEvent",
        "Usage",
        "ToolResultEvent",
        "TextDelta",
        "TextDelta",
        "Usage",
    ]
    assert ToolResultEvent.__name__ in seen


class RecordingSummarizer:
    def __init__(self, text="Earlier: the owner likes tea."):
        self.calls = []
        self.text = text

    async def summarize(self, messages):
        self.calls.append(list(messages))
        return self.text


def _long_history():
    history = []
    for i in range(6):
        history += [
            make_user(f"question {i} " + "words " * 100),
            make_assistant([make_text(f"answer {i} " + "more " * 100)]),
        ]
    return history


async def test_compaction_summarizes_only_earlier_turns_and_keeps_system_blocks_and_the_latest_turn():
    history = _long_history()
    latest = make_user("what do I like?")
    settings_obj = ModelSettings(provider="scripted", model="m", context_window=2_000)
    summarizer = RecordingSummarizer()
    sink = FakeSink([*history, latest])
    provider = ScriptedProvider([answer("Tea.")])
    events = []

    result = await run_agent_loop(
        _request([*history, latest], settings=settings_obj),
        provider,
        [],
        sink,
        asyncio.Event(),
        tool_context=CONTEXT,
        policies=LoopPolicies(summarizer=summarizer),
        on_event=events.append,
    )

    assert result.status == "finished"
    assert summarizer.calls == [history]
    candidate = sink.calls[0][1]
    assert (candidate.boundary, candidate.messages, candidate.findings) == (
        12,
        [latest],
        "Earlier: the owner likes tea.",
    )
    assert candidate.system_digest == hashlib.sha256(b"You are Ada.").hexdigest()
    assert candidate.tokens_after < candidate.tokens_before
    assert sink.kinds == ["compact", "final"]
    assert provider.requests[0].system_blocks == [
        "You are Ada.",
        "Notes: none\nFindings: Earlier: the owner likes tea.",
    ]
    assert provider.requests[0].messages == [latest]
    assert result.compactions == 1
    assert [e for e in events if isinstance(e, CompactionEvent)] == [CompactionEvent(13, 1)]


async def test_compaction_during_a_tool_streak_keeps_the_latest_turn_verbatim_with_the_default_summarizer():
    history = _long_history()
    latest = [make_user("remember tea")]
    memory = FakeMemory()
    settings_obj = ModelSettings(provider="scripted", model="m", context_window=3_000)
    provider = ScriptedProvider(
        [
            calls(
                call("c1", "memory", operation="remember", content="tea"), usage=Usage(2_900, 5)
            ),  # pressure crosses 0.8
            answer("The owner asked questions 0-5."),  # the summarizer request
            answer("Saved.", Usage(300, 2)),
        ]
    )
    sink = FakeSink([*history, *latest])

    result = await run_agent_loop(
        _request([*history, *latest], settings=settings_obj),
        provider,
        [memory.spec()],
        sink,
        asyncio.Event(),
        tool_context=CONTEXT,
    )

    assert result.status == "finished"
    summarize_request, after = provider.requests[1], provider.requests[2]
    assert summarize_request.system_blocks == [SUMMARIZE_INSTRUCTION]
    assert summarize_request.tools == []
    assert "question 5" in summarize_request.messages[0]["content"][0]["text"]
    assert "remember tea" not in summarize_request.messages[0]["content"][0]["text"]
    assert after.system_blocks == ["You are Ada.", "Notes: none\nFindings: The owner asked questions 0-5."]
    assert after.messages == [*latest, sink.calls[0][1], sink.calls[1][1]]
    assert sink.kinds == ["assistant", "tool_result", "compact", "final"]
    assert result.usage.input_tokens == 2_900 + 10 + 300
    assert [(r.kind, r.status) for r in sink.records] == [
        ("step", "ok"),
        ("compaction", "ok"),
        ("step", "ok"),
    ]
    assert [r.pressure for r in sink.records if r.kind == "step"] == [2_900, 300]


async def test_a_failing_summarizer_leaves_the_conversation_as_it_was():
    class Broken:
        async def summarize(self, messages):
            raise RuntimeError("model down")

    history = _long_history()
    sink = FakeSink()
    provider = ScriptedProvider([answer("ok")])
    settings_obj = ModelSettings(provider="scripted", model="m", context_window=2_000)

    result = await run_agent_loop(
        _request([*history, make_user("q")], settings=settings_obj),
        provider,
        [],
        sink,
        asyncio.Event(),
        tool_context=CONTEXT,
        policies=LoopPolicies(summarizer=Broken()),
    )

    assert result.status == "finished"
    assert result.compaction_failures == 1
    assert sink.kinds == ["final"]
    assert provider.requests[0].messages == [*history, make_user("q")]
    assert [(a.outcome, a.reason) for a in sink.attempts] == [("failed", "summarizer_failed")]


async def test_a_summary_that_does_not_reduce_the_tokens_is_refused_and_recorded():
    history = _long_history()
    sink = FakeSink()
    provider = ScriptedProvider([answer("ok")])
    settings_obj = ModelSettings(provider="scripted", model="m", context_window=2_000)

    result = await run_agent_loop(
        _request([*history, make_user("q")], settings=settings_obj),
        provider,
        [],
        sink,
        asyncio.Event(),
        tool_context=CONTEXT,
        policies=LoopPolicies(
            summarizer=RecordingSummarizer("x" * 20_000),
            compaction=CompactionPolicy(findings_max_chars=20_000),
        ),
    )

    assert result.status == "finished"
    assert result.compactions == 0
    assert sink.kinds == ["final"]
    assert provider.requests[0].messages == [*history, make_user("q")]
    (attempt,) = sink.attempts
    assert (attempt.outcome, attempt.reason) == ("refused", "not_smaller")
    assert attempt.tokens_after >= attempt.tokens_before


async def test_older_tool_results_are_cleared_past_the_byte_budget_and_saved_whole():
    big_old = [
        make_user("first"),
        make_assistant([call("old1", "memory", operation="list")]),
        make_tool_result("old1", "memory", "z" * 5_000, "ok"),
        make_assistant([make_text("ok")]),
    ]
    memory = FakeMemory()
    sink = FakeSink()
    provider = ScriptedProvider([calls(call("c1", "memory", operation="list")), answer("done")])

    result = await run_agent_loop(
        _request([*big_old, make_user("again")]),
        provider,
        [memory.spec()],
        sink,
        asyncio.Event(),
        tool_context=CONTEXT,
        policies=LoopPolicies(transcript_budget_bytes=4_000),
    )

    assert result.status == "finished"
    assert sink.kinds == ["assistant", "tool_result", "replace_all", "final"]
    saved = sink.calls[2][1]
    assert tool_result_of(saved[2])["content"].startswith("[Earlier tool result cleared")
    assert saved[5:] == [sink.calls[0][1], sink.calls[1][1]]  # the latest turn is untouched
    assert provider.requests[1].messages == saved
