from __future__ import annotations

import pytest

from opencompany.llm import tools
from opencompany.llm.tools import ToolContext, ToolSpec

from .helpers import MEMORY_SCHEMA


def _noop(context, arguments):
    return {}


@pytest.fixture
def clean_registry(monkeypatch):
    """Tools registered by a test live in a copy of the registry, dropped afterwards."""
    monkeypatch.setattr(tools, "_registry", dict(tools._registry))


def test_register_get_and_list_tools(clean_registry):
    spec = ToolSpec("llm_test_echo", "Echo.", {"type": "object"}, _noop)

    assert tools.register_tool(spec) is spec
    assert tools.get_tool("llm_test_echo") is spec
    assert tools.registered_tools()["llm_test_echo"] is spec
    assert tools.get_tool("llm_test_missing") is None


def test_registering_the_same_name_again_replaces_it(clean_registry):
    first = ToolSpec("llm_test_twice", "One.", {"type": "object"}, _noop)
    second = ToolSpec("llm_test_twice", "Two.", {"type": "object"}, _noop)

    tools.register_tool(first)
    tools.register_tool(second)

    assert tools.get_tool("llm_test_twice") is second


def test_an_invalid_schema_is_refused_at_registration(clean_registry):
    spec = ToolSpec("llm_test_bad", "Bad.", {"type": "no-such-type"}, _noop)

    with pytest.raises(ValueError, match="invalid input schema"):
        tools.register_tool(spec)
    assert tools.get_tool("llm_test_bad") is None


def test_validate_arguments_names_each_field_path():
    spec = ToolSpec("memory", "Memory.", MEMORY_SCHEMA, _noop)

    errors = tools.validate_arguments(spec, {"operation": "shout", "content": "", "owner_id": 7})

    assert errors == [
        "arguments: Additional properties are not allowed ('owner_id' was unexpected)",
        "arguments.content: '' should be non-empty",
        "arguments.operation: 'shout' is not one of ['remember', 'recall', 'list', 'forget']",
    ]


def test_validate_arguments_reports_missing_required_fields_and_nested_paths():
    schema = {
        "type": "object",
        "properties": {
            "patch": {
                "type": "object",
                "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
            }
        },
        "required": ["memory_id"],
    }
    spec = ToolSpec("t", "T.", schema, _noop)

    errors = tools.validate_arguments(spec, {"patch": {"tags": ["a", 3]}})

    assert errors == [
        "arguments: 'memory_id' is a required property",
        "arguments.patch.tags[1]: 3 is not of type 'string'",
    ]
    assert tools.validate_arguments(spec, {"memory_id": "m"}) == []


def test_the_validator_is_built_once_per_spec():
    spec = ToolSpec("memory", "Memory.", MEMORY_SCHEMA, _noop)

    tools.validate_arguments(spec, {"operation": "list"})
    first = tools._validators[id(spec)][1]
    tools.validate_arguments(spec, {"operation": "list"})

    assert tools._validators[id(spec)][1] is first


def test_tool_error_shape():
    assert tools.tool_error("not_found", "No such memory.") == {
        "error": {"code": "not_found", "message": "No such memory."}
    }


def test_tool_context_carries_server_side_scope():
    context = ToolContext(
        run_id="run_1", workflow_id="wf_1", generation=2, agent_node_id="wf_1:aiAgent:1", owner_id=5
    )

    assert context.extras == {}
    assert context.tool_call_id is None
    assert tools.tools_by_name([ToolSpec("a", "", {}, _noop)])["a"].name == "a"


def test_validate_arguments_refuses_a_nul_a_lone_surrogate_and_deep_nesting_before_the_schema():
    spec = ToolSpec("memory", "Memory.", MEMORY_SCHEMA, _noop)
    deep: list = []
    for _ in range(5_000):
        deep = [deep]

    assert tools.validate_arguments(spec, {"operation": "remember", "content": "a\x00"}) == [
        "arguments.content: Null characters are not allowed."
    ]
    assert tools.validate_arguments(spec, {"operation": "remember", "tags": ["\udc00"]}) == [
        "arguments.tags.0: Lone surrogate characters are not allowed."
    ]
    assert tools.validate_arguments(spec, {"operation": "remember", "tags": deep}) == [
        "arguments: Nested deeper than 64 levels."
    ]
