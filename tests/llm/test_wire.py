from __future__ import annotations

import hashlib
import json

import pytest

from opencompany.core.json import canonical_json
from opencompany.llm import wire
from opencompany.llm.wire import WireError

SIGNATURE = "EqQBCkgIARABGAIiQL0+/sig==" * 40
ENCRYPTED = "gAAAAABo" + "x9/+=" * 500

ASSISTANT = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "Let me think… ünïcode", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "encrypted_content": ENCRYPTED,
            "summary": [{"type": "summary_text", "text": "s"}],
        },
        {"type": "text", "text": "Here you go."},
        {
            "type": "tool_call",
            "id": "call_1",
            "name": "memory",
            "arguments": {"operation": "recall", "query": "tea"},
        },
        {
            "type": "tool_call",
            "id": "call_2",
            "name": "memory",
            "raw_arguments": '{"operation": "rec',
            "parse_error": "invalid JSON",
        },
        {"type": "citation_bundle", "nested": {"a": [1, 2.5, None, True]}, "x": "y"},
    ],
    "metadata": {"provider": "anthropic"},
}


RESULT_BLOCK = {"type": "tool_result", "tool_call_id": "c", "name": "t", "content": "x", "status": "ok"}


def test_every_block_kind_round_trips_exactly_through_encode_and_decode():
    decoded = wire.decode(wire.encode(ASSISTANT))

    assert decoded == ASSISTANT
    assert decoded["content"][0]["signature"] == SIGNATURE
    assert decoded["content"][2]["encrypted_content"] == ENCRYPTED
    assert wire.canonical(decoded) == wire.canonical(ASSISTANT)


def test_unknown_block_is_kept_untouched():
    message = {
        "role": "user",
        "content": [{"type": "future_thing", "payload": {"k": [1, {"z": "é"}]}}],
        "metadata": {},
    }

    assert wire.decode(wire.encode(message)) == message


def test_validate_returns_a_normalized_copy_and_leaves_the_input_alone():
    original = {"role": "user", "content": "hello", "ts": "2026-10-04T09:00:00+00:00", "version": 2}

    normalized = wire.validate_message(original)

    assert normalized == {"role": "user", "content": [{"type": "text", "text": "hello"}], "metadata": {}}
    assert original["content"] == "hello"
    normalized_assistant = wire.validate_message(ASSISTANT)
    normalized_assistant["content"][0]["thinking"] = "changed"
    assert ASSISTANT["content"][0]["thinking"] == "Let me think… ünïcode"


def test_tool_result_round_trips_with_each_status():
    for status in ("ok", "error", "not_run", "interrupted"):
        message = wire.make_tool_result("call_1", "memory", '{"x": 1}', status)
        assert wire.decode(wire.encode(message)) == message


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"role": "robot", "content": []}, "'role' must be one of"),
        ({"role": "user", "content": [{"text": "no type"}]}, "non-empty string 'type'"),
        ({"role": "user", "content": [{"type": "text", "text": 3}]}, "field 'text' must be a string"),
        ({"role": "user", "content": {"type": "text"}}, "'content' must be a list"),
        ({"role": "user", "content": [], "metadata": []}, "'metadata' must be an object"),
        (
            {"role": "user", "content": [wire.make_tool_call("c", "t", {})]},
            "tool_call blocks belong to assistant",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_call", "id": "c", "name": "t"}]},
            "needs 'arguments' or",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_call", "id": "", "name": "t", "arguments": {}}]},
            "'id' must not be empty",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_call", "id": "c", "name": "t", "arguments": [1]}],
            },
            "'arguments' must be an object",
        ),
        ({"role": "tool", "content": []}, "exactly one tool_result block"),
        (
            {
                "role": "tool",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_call_id": "c",
                        "name": "t",
                        "content": "x",
                        "status": "done",
                    }
                ],
            },
            "'status' must be one of",
        ),
        ({"role": "user", "content": [{"type": "future", "value": float("nan")}]}, "not JSON-serializable"),
    ],
)
@pytest.mark.parametrize("check", [wire.validate_message, wire.encode_message])
def test_invalid_messages_are_refused_with_a_clear_message(message, fragment, check):
    with pytest.raises(WireError) as excinfo:
        check(message)

    assert fragment in str(excinfo.value)


@pytest.mark.parametrize(
    "message",
    [ASSISTANT, {"role": "user", "content": "plain", "ts": 5}, {"role": "tool", "content": [RESULT_BLOCK]}],
)
def test_encode_message_gives_the_validated_message_and_its_canonical_text_in_one_pass(message):
    normalized, text = wire.encode_message(message, index=3)

    assert normalized == wire.validate_message(message)
    assert text == wire.canonical(wire.validate_message(message))


@pytest.mark.parametrize(
    ("message", "where"),
    [
        (
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "x", "v": {1, 2}}]},
            "content[1]",
        ),
        ({"role": "user", "content": "a", "metadata": {"at": object()}}, "message[2].metadata"),
    ],
)
def test_encode_message_names_the_part_that_is_not_json(message, where):
    with pytest.raises(WireError, match="not JSON-serializable") as excinfo:
        wire.encode_message(message, index=2)

    assert where in str(excinfo.value)


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"kind": "bytes", "ref": "x"}},
        {"type": "image", "data": "iVBORw0KGgo="},
        {"type": "image", "image_url": "data:image/png;base64,iVBOR"},
        {"type": "document", "source": {"type": "file", "data": "JVBERi0="}},
    ],
)
def test_inline_image_bytes_are_refused(block):
    with pytest.raises(WireError, match="not allowed"):
        wire.validate_message({"role": "user", "content": [block]})


def test_image_by_reference_is_accepted_untouched():
    block = {"type": "image", "source": {"kind": "file_ref", "file_id": "file_123"}}

    assert wire.validate_message({"role": "user", "content": [block]})["content"] == [block]


def test_decode_refuses_invalid_json():
    with pytest.raises(WireError, match="not valid JSON"):
        wire.decode('{"role": "user", ')


def test_validate_messages_names_the_bad_index():
    with pytest.raises(WireError, match=r"message\[1\]"):
        wire.validate_messages([wire.make_user("hi"), {"role": "user", "content": [1]}])


def test_canonical_is_sorted_and_compact_and_matches_core():
    message = {"role": "user", "metadata": {"b": 1, "a": "é"}, "content": [{"text": "x", "type": "text"}]}

    assert wire.canonical(message) == canonical_json(message)
    assert (
        wire.canonical(message)
        == '{"content":[{"text":"x","type":"text"}],"metadata":{"a":"é","b":1},"role":"user"}'
    )


def test_digest_chain_links_each_message_to_the_previous_digest():
    first, second = wire.make_user("one"), wire.make_user("two")

    d1 = wire.digest_chain("", first)
    d2 = wire.digest_chain(d1, second)

    assert d1 == hashlib.sha256(wire.canonical(first).encode()).hexdigest()
    assert d2 == hashlib.sha256((d1 + wire.canonical(second)).encode()).hexdigest()
    assert wire.digests_of([first, second]) == [d1, d2]


def test_parse_tool_arguments_keeps_malformed_json_raw():
    good = wire.parse_tool_arguments("c1", "memory", '{"operation": "list"}')
    empty = wire.parse_tool_arguments("c2", "memory", "")
    broken = wire.parse_tool_arguments("c3", "memory", '{"operation": "li')
    not_object = wire.parse_tool_arguments("c4", "memory", "[1, 2]")
    nan = wire.parse_tool_arguments("c5", "memory", '{"x": NaN}')

    assert good == {"type": "tool_call", "id": "c1", "name": "memory", "arguments": {"operation": "list"}}
    assert empty["arguments"] == {}
    assert broken["raw_arguments"] == '{"operation": "li'
    assert broken["parse_error"].startswith("invalid JSON")
    assert "arguments" not in broken
    assert not_object["parse_error"] == "arguments must be a JSON object, got list"
    assert nan["raw_arguments"] == '{"x": NaN}'
    for block in (good, empty, broken, not_object, nan):
        message = wire.make_assistant([block])
        assert wire.decode(wire.encode(message)) == message


def test_helpers_build_valid_messages():
    assistant = wire.make_assistant(
        [wire.make_text("a"), wire.make_text("b"), wire.make_tool_call("c", "t", {"x": 1})]
    )
    result = wire.make_tool_result("c", "t", "done", "ok")

    assert wire.text_of(assistant) == "ab"
    assert wire.tool_calls_of(assistant) == [
        {"type": "tool_call", "id": "c", "name": "t", "arguments": {"x": 1}}
    ]
    assert wire.text_of(result) == "done"
    assert wire.tool_result_of(result)["status"] == "ok"
    assert wire.validate_messages([wire.make_user("hi"), assistant, result])[1] == assistant
    with pytest.raises(WireError):
        wire.make_tool_result("c", "t", "x", "weird")
    assert json.loads(wire.encode(result))["role"] == "tool"


def test_parse_tool_arguments_keeps_deeply_nested_or_nul_arguments_raw_without_parsing_them():
    deep = '{"tags": ' + "[" * 100_000 + "]" * 100_000 + "}"

    nested = wire.parse_tool_arguments("c1", "memory", deep)
    nul = wire.parse_tool_arguments("c2", "memory", '{"content": "a\\u0000"}')

    assert (nested["raw_arguments"], nested["parse_error"]) == (
        deep,
        "tags: Nested deeper than 64 levels.",
    )
    assert nul["parse_error"] == "arguments.content: Null characters are not allowed."
    assert ("arguments" in nested, "arguments" in nul) == (False, False)
