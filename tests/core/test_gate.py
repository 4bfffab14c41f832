"""The input gate as plain functions: text, ids, integers against their column, JSON depth."""

from __future__ import annotations

import json

import pytest

from chat.models import ChatThread
from conversations.models import AgentConversation
from opencompany.core import gate
from opencompany.core.errors import ApplicationError


def _refusal(call) -> tuple[str, dict]:
    with pytest.raises(ApplicationError) as caught:
        call()
    return caught.value.code, caught.value.extra


@pytest.mark.parametrize(
    ("value", "message"),
    [("a\x00b", gate.NUL_MESSAGE), ("a\ud800b", gate.SURROGATE_MESSAGE), ("\udfff", gate.SURROGATE_MESSAGE)],
)
def test_text_with_a_nul_or_a_lone_surrogate_is_refused_naming_the_field(value, message):
    assert _refusal(lambda: gate.text(value, field="text")) == (
        "invalid_request",
        {"fields": {"text": [message]}},
    )


def test_text_keeps_astral_characters_and_control_characters_other_than_nul():
    assert gate.text("tea \U0001f375\ttime\n", field="text") == "tea \U0001f375\ttime\n"


def test_an_identifier_must_be_a_non_empty_string():
    assert _refusal(lambda: gate.identifier("", field="run_id"))[1] == {
        "fields": {"run_id": ["Must be a non-empty string."]}
    }
    assert _refusal(lambda: gate.identifier(7, field="run_id"))[0] == "invalid_request"
    assert gate.identifier("run_abc", field="run_id") == "run_abc"


def test_integers_are_bounded_by_their_column_on_every_database():
    revision = ChatThread._meta.get_field("revision")  # PositiveIntegerField: 0 … 2**31 - 1

    assert gate.integer(2**31 - 1, field="expected_revision", column=revision) == 2**31 - 1
    assert _refusal(lambda: gate.integer(2**31, field="expected_revision", column=revision)) == (
        "invalid_request",
        {"fields": {"expected_revision": [f"Must be between 0 and {2**31 - 1}."]}},
    )
    assert (
        _refusal(lambda: gate.integer(-1, field="expected_revision", column=revision))[0] == "invalid_request"
    )
    assert gate.column_range(AgentConversation._meta.get_field("revision")) == (0, 2**63 - 1)


@pytest.mark.parametrize("value", [True, 1.0, "1", None])
def test_an_integer_must_be_a_json_integer(value):
    assert _refusal(lambda: gate.integer(value, field="n", column="IntegerField"))[1] == {
        "fields": {"n": ["Must be an integer."]}
    }


def test_json_at_the_depth_limit_parses_and_one_level_more_is_refused_naming_the_key():
    at_limit = '{"graph": ' + "[" * 63 + "]" * 63 + "}"
    too_deep = '{"graph": ' + "[" * 64 + "]" * 64 + "}"

    assert gate.loads(at_limit)["graph"] == json.loads(at_limit)["graph"]
    assert _refusal(lambda: gate.loads(too_deep)) == (
        "invalid_request",
        {"fields": {"graph": ["Nested deeper than 64 levels."]}, "max_depth": 64},
    )


def test_a_document_nested_far_past_any_recursion_limit_is_refused_before_parsing():
    code, extra = _refusal(lambda: gate.loads("[" * 200_000 + "]" * 200_000))

    assert (code, extra["fields"]) == ("invalid_request", {"body": ["Nested deeper than 64 levels."]})


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = json.dumps({"text": "[" * 500 + '\\"{' * 100})

    assert gate.loads(text) == json.loads(text)


def test_strings_in_a_document_are_checked_at_every_depth_and_in_keys():
    assert _refusal(lambda: gate.loads('{"graph": {"nodes": [{"label": "a\\u0000"}]}}'))[1] == {
        "fields": {"graph.nodes.0.label": [gate.NUL_MESSAGE]}
    }
    assert _refusal(lambda: gate.loads('{"tags": {"\\ud800": 1}}'))[1] == {
        "fields": {"tags": [gate.SURROGATE_MESSAGE]}
    }
    assert gate.loads('{"text": "\\ud83c\\udf75"}') == {"text": "\U0001f375"}


def test_malformed_and_unterminated_json_is_invalid_request():
    for raw in ('{"text": "never closed', "{nope", "[" * 100 + '"'):
        assert _refusal(lambda raw=raw: gate.loads(raw))[0] == "invalid_request"


def test_a_parsed_value_deeper_than_the_limit_is_refused_without_recursion():
    value: list = []
    for _ in range(100_000):
        value = [value]

    assert _refusal(lambda: gate.check_document(value, field="arguments"))[1] == {
        "fields": {"arguments": ["Nested deeper than 64 levels."]},
        "max_depth": 64,
    }


@pytest.mark.parametrize("raw", ['{"n": NaN}', '{"n": Infinity}', "[-Infinity]"])
def test_nan_and_infinity_are_not_json_values(raw):
    assert _refusal(lambda: gate.loads(raw)) == ("invalid_request", {"fields": {"body": ["Not valid JSON."]}})
