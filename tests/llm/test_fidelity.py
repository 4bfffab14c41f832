from __future__ import annotations

from opencompany.llm.fidelity import (
    epoch_for,
    plan_handoff,
    portable_message,
    replays_opaque_state,
    runtime_of,
    stamp,
    turn_fidelity,
)
from opencompany.llm.wire import make_assistant, make_text, make_tool_call, make_tool_result, make_user

ANTHROPIC = {"runtime": "anthropic", "fidelity": "provider_replayable"}


def _anthropic_turn(epoch=1):
    return make_assistant(
        [
            {"type": "thinking", "thinking": "hidden", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            make_text("Saving."),
            make_tool_call("toolu_1", "memory", {"operation": "remember", "content": "tea"}),
        ],
        {**ANTHROPIC, "epoch": epoch},
    )


def test_stamp_records_runtime_and_fidelity_and_keeps_the_rest():
    message = make_assistant([make_text("hi")], {"status": "stopped"})

    stamped = stamp(message, runtime="gemini", fidelity="portable")

    assert stamped["metadata"] == {"status": "stopped", "runtime": "gemini", "fidelity": "portable"}
    assert message["metadata"] == {"status": "stopped"}


def test_a_turn_without_a_recorded_runtime_holding_signed_thinking_came_from_anthropic():
    legacy = make_assistant([{"type": "thinking", "thinking": "t", "signature": "s"}, make_text("x")])

    assert runtime_of(legacy) == "anthropic"
    assert runtime_of(make_assistant([make_text("x")])) is None
    assert runtime_of(make_user("x")) is None
    assert replays_opaque_state(legacy, "anthropic") is True
    assert replays_opaque_state(legacy, "openai") is False


def test_turn_fidelity_reads_what_the_turn_recorded():
    assert turn_fidelity(_anthropic_turn(epoch=3)) == {
        "runtime": "anthropic",
        "fidelity": "provider_replayable",
        "epoch": 3,
    }
    assert turn_fidelity(make_assistant([make_text("x")])) == {"runtime": None, "fidelity": None, "epoch": 1}
    assert turn_fidelity(make_user("x")) is None


def test_the_portable_form_keeps_text_and_tool_calls_and_drops_provider_state():
    gemini = make_assistant(
        [
            {"type": "thinking", "thinking": "t", "thought_signature": "c2ln"},
            {"type": "text", "text": "Hi.", "thought_signature": "c2ln"},
            {"type": "text", "text": "", "thought_signature": "c2ln"},
            {
                "type": "tool_call",
                "id": "g1",
                "local_id": True,
                "name": "memory",
                "arguments": {"operation": "list"},
            },
            {
                "type": "provider_block",
                "provider": "anthropic",
                "block": {"type": "text", "text": "Cited.", "citations": []},
            },
            {"type": "provider_block", "provider": "gemini", "block": {"executableCode": {"code": "1"}}},
        ],
        {"runtime": "gemini", "fidelity": "provider_replayable", "epoch": 2},
    )

    assert portable_message(gemini) == make_assistant(
        [
            make_text("Hi."),
            make_tool_call("g1", "memory", {"operation": "list"}),
            make_text("Cited."),
        ],
        {"runtime": "gemini", "fidelity": "portable", "epoch": 2},
    )
    assert portable_message(make_assistant([{"type": "reasoning", "encrypted_content": "x"}])) is None


def test_a_switch_plans_a_portable_handoff_of_the_other_runtimes_turns():
    messages = [
        make_user("remember tea"),
        _anthropic_turn(),
        make_tool_result("toolu_1", "memory", "ok"),
        make_assistant([{"type": "thinking", "thinking": "only thinking", "signature": "s"}], ANTHROPIC),
        make_user("and now?"),
    ]

    handoff = plan_handoff(messages, "openai")

    assert handoff is not None
    assert handoff.from_runtimes == ("anthropic",)
    assert handoff.epoch == 2
    assert handoff.messages == [
        make_user("remember tea"),
        make_assistant(
            [
                make_text("Saving."),
                make_tool_call("toolu_1", "memory", {"operation": "remember", "content": "tea"}),
            ],
            {"runtime": "anthropic", "fidelity": "portable", "epoch": 1},
        ),
        make_tool_result("toolu_1", "memory", "ok"),
        make_user("and now?"),
    ]
    assert "sig" not in str(handoff.messages)
    assert messages[1]["content"][0]["signature"] == "sig"  # the input is not changed


def test_no_handoff_for_the_same_runtime_or_for_turns_already_portable():
    assert plan_handoff([make_user("a"), _anthropic_turn()], "anthropic") is None
    portable = plan_handoff([make_user("a"), _anthropic_turn()], "openai")
    assert portable is not None
    assert plan_handoff(portable.messages, "openai") is None
    assert plan_handoff(portable.messages, "gemini") is None
    offline = make_assistant([make_text("demo")], {"runtime": "offline", "fidelity": "portable"})
    assert plan_handoff([make_user("a"), offline], "anthropic") is None


def test_the_epoch_moves_on_when_the_runtime_changes_and_stays_otherwise():
    first = _anthropic_turn(epoch=1)
    assert epoch_for([], "openai") == 1
    assert epoch_for([make_user("a"), first], "anthropic") == 1
    assert epoch_for([make_user("a"), first], "openai") == 2
    second = make_assistant(
        [make_text("x")], {"runtime": "openai", "fidelity": "provider_replayable", "epoch": 2}
    )
    assert epoch_for([first, second], "openai") == 2
    assert epoch_for([first, second], "anthropic") == 3
    legacy = make_assistant([make_text("x")])
    assert epoch_for([legacy], "gemini") == 1
