"""The committer both the agent loop and the program turn write through: one order, one set of codes."""

from __future__ import annotations

import asyncio

import pytest

from opencompany.llm.commit import CommitFailed, Committer
from opencompany.llm.loop import run_agent_loop
from opencompany.llm.providers.base import ModelSettings, Request, Usage
from opencompany.llm.runtimes.base import Call, Done, Text
from opencompany.llm.runtimes.turn import UNREPORTED_TEXT, _Turn
from opencompany.llm.tools import ToolContext
from opencompany.llm.wire import make_assistant, make_text, make_tool_call, make_tool_result, make_user

from .helpers import FakeMemory, FakeSink, ScriptedProvider, answer, call, calls

SETTINGS = ModelSettings(provider="scripted", model="m", context_window=1_000_000)
CONTEXT = ToolContext(
    run_id="run_1", workflow_id="wf_1", generation=1, agent_node_id="wf_1:aiAgent:1", owner_id=7
)
CALL = make_tool_call("c1", "memory", {"operation": "list"})


class _Runtime:
    name = "claude_code"
    display_name = "Claude Code"
    fidelity = "observable"
    resumable = True


def _request() -> Request:
    return Request(system_blocks=["You are Ada."], messages=[make_user("hi")], tools=[], settings=SETTINGS)


@pytest.mark.parametrize(
    ("fail_code", "code"), [(None, "persist_failed"), ("context_changed", "context_changed")]
)
async def test_the_loop_ends_on_the_committers_code_and_writes_nothing_after_it(fail_code, code):
    memory = FakeMemory()
    sink = FakeSink(fail_at=2, fail_code=fail_code)
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

    assert (result.status, result.error_code) == ("error", code)
    assert sink.kinds == ["assistant", "tool_result:failed"]
    assert len(provider.requests) == 1


@pytest.mark.parametrize(
    ("fail_code", "code"), [(None, "persist_failed"), ("context_changed", "context_changed")]
)
async def test_the_program_turn_ends_on_the_same_code_at_the_same_boundary(fail_code, code):
    sink = FakeSink(fail_at=2, fail_code=fail_code)
    turn = _Turn(_Runtime(), Committer(sink, run_id="run_1", unanswered=UNREPORTED_TEXT), None, 100_000)  # type: ignore[arg-type]

    for event in (Call(CALL), Text("Answer."), Done()):
        await turn.handle(event)
    with pytest.raises(CommitFailed) as failed:
        await turn.finish(stopped=False)

    assert failed.value.code == code
    assert sink.kinds == ["assistant", "tool_result:failed"]


async def test_an_assistant_message_or_final_answer_first_answers_the_calls_still_open():
    sink = FakeSink()
    committer = Committer(sink, run_id="run_1", messages=[make_user("hi")], unanswered="No result.")
    with_call = make_assistant([CALL])

    await committer.assistant(with_call)
    await committer.final(make_assistant([make_text("Done.")]), Usage(3, 1))

    assert sink.kinds == ["assistant", "tool_result", "final"]
    assert sink.calls[1][1] == make_tool_result("c1", "memory", "No result.", "interrupted")
    assert committer.open_calls == {}
    assert [m["role"] for m in committer.messages] == ["user", "assistant", "tool", "assistant"]
    assert committer.commits == 3


async def test_a_result_for_a_call_that_is_not_open_and_a_second_final_answer_are_refused():
    sink = FakeSink()
    committer = Committer(sink, run_id="run_1")

    with pytest.raises(ValueError, match="no open tool call"):
        await committer.tool_result(make_tool_result("c9", "memory", "[]", "ok"))
    await committer.final(make_assistant([make_text("Done.")]), Usage())
    with pytest.raises(RuntimeError, match="already committed"):
        await committer.final(make_assistant([make_text("Again.")]), Usage())

    assert sink.kinds == ["final"]
