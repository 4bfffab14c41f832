from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from opencompany.core.json import json_size
from opencompany.llm import policies
from opencompany.llm.policies import (
    CLEARED_RESULT_TEXT,
    INTERRUPTED_RESULT_TEXT,
    SUMMARY_PREFIX,
    CompactionRefused,
    apply_compaction,
    cap_tool_results,
    clear_old_results,
    close_unanswered_tool_calls,
    plan_compaction,
)
from opencompany.llm.wire import (
    make_assistant,
    make_text,
    make_tool_call,
    make_tool_result,
    make_user,
    tool_calls_of,
    tool_result_of,
)


def _call(call_id, name="memory"):
    return make_tool_call(call_id, name, {"operation": "list"})


def _tool_turn(prefix, n_calls, result="r"):
    calls = [_call(f"{prefix}_{i}") for i in range(n_calls)]
    return [make_assistant(calls)] + [make_tool_result(c["id"], "memory", result, "ok") for c in calls]


# --- close_unanswered_tool_calls -------------------------------------------------------------------------


def test_close_returns_the_same_list_object_when_nothing_is_open():
    messages = [make_user("hi"), *_tool_turn("a", 2), make_assistant([make_text("done")])]
    snapshot = copy.deepcopy(messages)

    assert close_unanswered_tool_calls(messages) is messages
    assert messages == snapshot
    assert close_unanswered_tool_calls([make_user("only")]) == [make_user("only")]
    empty: list = []
    assert close_unanswered_tool_calls(empty) is empty


def test_close_answers_open_calls_of_the_last_turn_after_existing_results():
    assistant = make_assistant([_call("c1"), _call("c2"), _call("c3")])
    answered = make_tool_result("c2", "memory", "ok-2", "ok")
    later_user = make_user("are you there?")
    messages = [make_user("hi"), assistant, answered, later_user]

    closed = close_unanswered_tool_calls(messages)

    assert closed == [
        make_user("hi"),
        assistant,
        answered,
        make_tool_result("c1", "memory", INTERRUPTED_RESULT_TEXT, "interrupted"),
        make_tool_result("c3", "memory", INTERRUPTED_RESULT_TEXT, "interrupted"),
        later_user,
    ]
    assert messages == [make_user("hi"), assistant, answered, later_user]
    assert close_unanswered_tool_calls(closed) is closed


def test_close_only_repairs_the_last_assistant_turn():
    earlier_open = make_assistant([_call("old")])
    last = make_assistant([make_text("fine")])
    messages = [make_user("a"), earlier_open, make_user("b"), last]

    assert close_unanswered_tool_calls(messages) is messages


# --- caps -------------------------------------------------------------------------------------------------


def test_cap_cuts_long_results_with_a_note_and_keeps_the_original_total():
    long = make_tool_result("c1", "search", "x" * 50, "ok")
    short = make_tool_result("c2", "search", "y" * 5, "ok")
    messages = [make_user("q"), make_assistant([_call("c1"), _call("c2")]), long, short]

    capped = cap_tool_results(messages, max_chars=10)

    block = tool_result_of(capped[2])
    assert block["content"] == (
        "x" * 10 + "\n\n[Result truncated: showing the first 10 of 50 characters. "
        "Call the tool again with narrower parameters to get the part you need.]"
    )
    assert capped[2]["metadata"] == {"truncated": {"shown": 10, "total": 50}}
    assert capped[3] is short
    assert tool_result_of(long)["content"] == "x" * 50
    assert cap_tool_results(capped, max_chars=10) is capped
    recut = cap_tool_results(capped, max_chars=4)
    assert tool_result_of(recut[2])["content"].startswith(
        "xxxx\n\n[Result truncated: showing the first 4 of 50 characters."
    )
    assert cap_tool_results(messages, max_chars=0) is messages
    assert cap_tool_results(messages, max_chars=100) is messages


def _big_transcript():
    messages = []
    for turn in range(4):
        messages.append(make_user(f"turn {turn}"))
        messages += _tool_turn(f"t{turn}", 1, result="z" * 1000)
        messages.append(make_assistant([make_text(f"answer {turn}")]))
    return messages


def test_clear_old_results_clears_oldest_first_down_to_half_the_budget_and_never_the_latest_turn():
    messages = _big_transcript()
    size = json_size(messages)
    budget = size - 100  # just over budget: must clear down to half of it

    cleared = clear_old_results(messages, budget_bytes=budget)

    statuses = [tool_result_of(m)["content"] == CLEARED_RESULT_TEXT for m in cleared if m["role"] == "tool"]
    assert statuses == [True, True, True, False]
    assert json_size(cleared) > budget // 2  # the latest turn alone keeps it above; nothing else left
    placeholder = cleared[2]
    assert placeholder == {
        "role": "tool",
        "content": [
            {
                "type": "tool_result",
                "tool_call_id": "t0_0",
                "name": "memory",
                "content": CLEARED_RESULT_TEXT,
                "status": "ok",
            }
        ],
        "metadata": {"cleared": True},
    }
    assert cleared[-2] is messages[-2]


def test_clear_old_results_stops_once_under_half_the_budget():
    messages = []
    for turn, result_size in enumerate([30_000, 30_000, 1_000, 1_000]):
        messages += [make_user(f"turn {turn}"), *_tool_turn(f"t{turn}", 1, result="z" * result_size)]
    budget = 60_000  # over it; half is 30,000, reached after clearing the first two results

    cleared = clear_old_results(messages, budget_bytes=budget)

    flags = [tool_result_of(m)["content"] == CLEARED_RESULT_TEXT for m in cleared if m["role"] == "tool"]
    assert json_size(messages) > budget
    assert flags == [True, True, False, False]
    assert json_size(cleared) <= budget // 2


def test_clear_old_results_is_identity_under_budget_or_disabled():
    messages = _big_transcript()

    assert clear_old_results(messages, budget_bytes=10_000_000) is messages
    assert clear_old_results(messages, budget_bytes=0) is messages


# --- compaction --------------------------------------------------------------------------------------------


def test_plan_compaction_splits_before_the_latest_turn():
    head = [
        make_user("one"),
        make_assistant([make_text("a1")]),
        make_user("two"),
        *_tool_turn("x", 1),
        make_assistant([make_text("a2")]),
    ]
    latest = [make_user("three"), *_tool_turn("y", 2)]
    messages = head + latest

    plan = plan_compaction(messages)

    assert plan.boundary == len(head)
    assert plan.head == head
    assert plan.tail == latest
    assert plan_compaction(latest) is None
    assert plan_compaction(messages, keep_latest_turn=False).boundary == len(messages)


def test_plan_compaction_moves_the_boundary_back_to_keep_a_call_with_its_result():
    calls = make_assistant([_call("c1")])
    messages = [
        make_user("one"),
        make_assistant([make_text("a")]),
        calls,
        make_user("interjection"),
        make_tool_result("c1", "memory", "r", "ok"),
    ]

    plan = plan_compaction(messages)

    assert plan.boundary == 2
    assert plan.tail[0] is calls


def test_apply_compaction_puts_one_summary_user_message_first_and_keeps_the_latest_turn():
    head = [make_user("one " * 200), make_assistant([make_text("answer " * 200)])]
    latest = [make_user("now"), *_tool_turn("y", 1)]
    messages = head + latest
    plan = plan_compaction(messages)

    compacted = apply_compaction(messages, plan, "They talked about one thing.")

    assert compacted == [
        {
            "role": "user",
            "content": [{"type": "text", "text": f"{SUMMARY_PREFIX}\nThey talked about one thing."}],
            "metadata": {"summary": True},
        },
        *latest,
    ]


def test_apply_compaction_refuses_a_summary_that_does_not_shrink():
    messages = [make_user("hi"), make_assistant([make_text("yo")]), make_user("now")]
    plan = plan_compaction(messages)

    assert (
        apply_compaction(messages, plan, "a much longer summary than the tiny conversation it replaces " * 3)
        is None
    )
    assert apply_compaction(messages, plan, "   ") is None


def test_apply_compaction_refuses_a_transcript_that_changed_since_the_plan():
    messages = [make_user("hi " * 50), make_assistant([make_text("yo " * 50)]), make_user("now")]
    plan = plan_compaction(messages)
    changed = [make_user("different"), *messages[1:]]

    try:
        apply_compaction(changed, plan, "s")
    except CompactionRefused:
        pass
    else:
        raise AssertionError("expected CompactionRefused")


# --- property: compaction never separates a call from its result --------------------------------------------


@st.composite
def transcripts(draw):
    messages = []
    n = 0
    for _ in range(draw(st.integers(0, 6))):
        messages.append(make_user("u"))
        for _step in range(draw(st.integers(0, 3))):
            k = draw(st.integers(1, 3))
            ids = [f"c{n + i}" for i in range(k)]
            n += k
            messages.append(make_assistant([make_tool_call(i, "memory", {}) for i in ids]))
            answered = draw(st.integers(0, k))
            messages.extend(make_tool_result(i, "memory", "r", "ok") for i in ids[:answered])
            if answered < k and draw(st.booleans()):
                # a stray user message in the middle of a tool streak (e.g. a stopped run), then the rest
                messages.append(make_user("interjection"))
            messages.extend(make_tool_result(i, "memory", "r", "ok") for i in ids[answered:])
        if draw(st.booleans()):
            messages.append(make_assistant([make_text("a")]))
    return messages


@settings(max_examples=300, deadline=None)
@given(transcripts(), st.booleans())
def test_compaction_never_splits_a_tool_call_from_its_result(messages, keep_latest):
    plan = plan_compaction(messages, keep_latest_turn=keep_latest)
    if plan is None:
        return
    head_calls = {c["id"] for m in plan.head for c in tool_calls_of(m)}
    tail_calls = {c["id"] for m in plan.tail for c in tool_calls_of(m)}
    head_results = {tool_result_of(m)["tool_call_id"] for m in plan.head if m["role"] == "tool"}
    tail_results = {tool_result_of(m)["tool_call_id"] for m in plan.tail if m["role"] == "tool"}
    assert head_results <= head_calls
    assert tail_results <= tail_calls
    assert plan.head + plan.tail == messages
    compacted = apply_compaction(messages, plan, "s")
    if compacted is not None:
        assert compacted[1:] == plan.tail
        assert compacted[0]["role"] == "user"


def test_module_exports_the_policy_names_colleagues_re_export():
    for name in (
        "close_unanswered_tool_calls",
        "cap_tool_results",
        "clear_old_results",
        "plan_compaction",
        "apply_compaction",
        "Summarizer",
    ):
        assert hasattr(policies, name)
