import hashlib
from typing import Any

import pytest

from graphs.specs import (
    NodeSpec,
    ParameterError,
    Port,
    all_node_specs,
    get_node_spec,
    node_specs_payload,
    parameter_error,
    register_builtin_node_specs,
    register_node_spec,
)
from opencompany.core.json import canonical_json


def _spec(type_: str, **overrides: Any) -> NodeSpec:
    fields: dict[str, Any] = {
        "type": type_,
        "display_name": "Widget",
        "description": "A test node.",
        "group": ("test",),
        "ports": (Port("output-main", "output", "Out", "main"),),
    }
    fields.update(overrides)
    return NodeSpec(**fields)


def test_builtin_types_are_registered_without_explicit_setup():
    types = [spec.type for spec in all_node_specs()]

    assert {"chatTrigger", "aiAgent", "teamLead", "context", "simpleMemory"} <= set(types)
    assert types == sorted(types)


def test_register_builtins_twice_is_idempotent():
    before = node_specs_payload()

    register_builtin_node_specs()
    register_builtin_node_specs()

    assert node_specs_payload() == before


def test_context_capability_is_declared_by_agents_only():
    requiring = sorted(spec.type for spec in all_node_specs() if spec.requires_context)

    assert {"aiAgent", "teamLead"} <= set(requiring)
    assert get_node_spec("context").requires_context is False
    assert get_node_spec("simpleMemory").requires_context is False
    assert get_node_spec("chatTrigger").requires_context is False


def test_agent_ports_and_team_lead_extra_port():
    agent = get_node_spec("aiAgent")
    lead = get_node_spec("teamLead")

    assert agent.input_port_names == frozenset(
        {"input-main", "input-tools", "input-context", "input-skill", "input-task"}
    )
    assert agent.output_port_names == frozenset({"output-main", "output-top"})
    assert lead.input_port_names == agent.input_port_names | {"input-teammates"}
    assert lead.accepts_teammates is True
    assert agent.accepts_teammates is False
    assert lead.parameters_schema == agent.parameters_schema


def test_context_and_memory_specs():
    context = get_node_spec("context")
    memory = get_node_spec("simpleMemory")

    assert [(p.name, p.direction) for p in context.ports] == [("output-context", "output")]
    assert context.is_context_panel is True
    assert context.system_managed is True
    assert context.parameters_schema["properties"] == {}
    assert context.parameters_schema["additionalProperties"] is False
    assert [(p.name, p.direction) for p in memory.ports] == [("output-tool", "output")]
    assert memory.tool_name == "memory"
    assert memory.parameters_schema["properties"]["reset_policy"] == {
        "type": "string",
        "enum": ["preserve", "clear"],
        "default": "preserve",
    }


def test_unknown_type_has_no_spec():
    assert get_node_spec("noSuchNode") is None


def test_reregistering_an_equal_spec_is_a_noop():
    register_node_spec(_spec("testIdempotentWidget"))

    register_node_spec(_spec("testIdempotentWidget"))

    assert get_node_spec("testIdempotentWidget") == _spec("testIdempotentWidget")


def test_conflicting_registration_is_refused_and_keeps_the_first():
    register_node_spec(_spec("testConflictWidget"))

    with pytest.raises(ValueError, match="already registered"):
        register_node_spec(_spec("testConflictWidget", display_name="Other"))

    assert get_node_spec("testConflictWidget").display_name == "Widget"


def test_schema_without_additional_properties_false_is_refused():
    with pytest.raises(ValueError, match="additionalProperties"):
        register_node_spec(_spec("testOpenSchema", parameters_schema={"type": "object", "properties": {}}))

    assert get_node_spec("testOpenSchema") is None


def test_group_must_be_a_tuple_of_strings():
    with pytest.raises(ValueError, match="group"):
        register_node_spec(_spec("testStringGroup", group="agent"))


def test_payload_is_a_copy_callers_may_modify():
    payload = node_specs_payload()
    payload["specs"][0]["inputs"]["properties"]["injected"] = {"type": "string"}

    assert all("injected" not in spec["inputs"]["properties"] for spec in node_specs_payload()["specs"])
    assert all("injected" not in spec.parameters_schema["properties"] for spec in all_node_specs())


def test_duplicate_port_is_refused():
    ports = (Port("output-main", "output", "A", "main"), Port("output-main", "output", "B", "main"))

    with pytest.raises(ValueError, match="declared twice"):
        register_node_spec(_spec("testDuplicatePort", ports=ports))


def test_payload_hash_is_the_sha256_prefix_of_the_canonical_specs():
    payload = node_specs_payload()

    expected = hashlib.sha256(canonical_json(payload["specs"]).encode("utf-8")).hexdigest()[:16]
    assert payload["hash"] == expected
    assert len(payload["hash"]) == 16


def test_payload_hash_changes_when_a_spec_is_added():
    before = node_specs_payload()["hash"]

    register_node_spec(_spec("testHashWidget"))

    assert node_specs_payload()["hash"] != before


def test_wire_format_uses_camel_case_and_only_true_hints():
    specs = {spec["type"]: spec for spec in node_specs_payload()["specs"]}

    agent = specs["aiAgent"]
    assert set(agent) == {
        "type",
        "displayName",
        "description",
        "group",
        "version",
        "inputs",
        "handles",
        "uiHints",
    }
    assert agent["uiHints"] == {"requiresContext": True}
    assert {"name": "input-context", "kind": "input", "label": "Context", "role": "context"} in agent[
        "handles"
    ]
    assert specs["teamLead"]["uiHints"] == {"requiresContext": True, "acceptsTeammates": True}
    assert specs["context"]["uiHints"] == {"isContextPanel": True, "systemManaged": True}
    assert specs["simpleMemory"]["toolName"] == "memory"
    assert specs["chatTrigger"]["uiHints"] == {}
    assert specs["chatTrigger"]["handles"] == [
        {"name": "output-main", "kind": "output", "label": "Message", "role": "main"}
    ]


@pytest.mark.parametrize(
    "parameters",
    [
        {},
        {"provider": "anthropic", "model": "claude", "temperature": 2, "max_output_tokens": 1},
        {"temperature": 0.0, "context_window": 1024, "compaction_ratio": 0.05, "tool_result_max_chars": 0},
        {"compaction_ratio": 0.99, "context_window": 10_000_000, "system_prompt": "x" * 100_000},
        {"max_output_tokens": 5.0},
    ],
)
def test_valid_agent_parameters(parameters):
    assert parameter_error(get_node_spec("aiAgent"), parameters) is None


@pytest.mark.parametrize(
    ("parameters", "path"),
    [
        ({"provider": "mistral"}, "provider"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"temperature": float("nan")}, None),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": 1.5}, "max_output_tokens"),
        ({"context_window": 1023}, "context_window"),
        ({"compaction_ratio": 1}, "compaction_ratio"),
        ({"compaction_ratio": 0}, "compaction_ratio"),
        ({"tool_result_max_chars": -1}, "tool_result_max_chars"),
        ({"model": "m" * 201}, "model"),
        ({"system_prompt": "x" * 100_001}, "system_prompt"),
        ({"api_key": "sk-1"}, "api_key"),
        ([], ""),
    ],
)
def test_invalid_agent_parameters_report_the_path(parameters, path):
    problem = parameter_error(get_node_spec("aiAgent"), parameters)

    if path is None:
        # NaN is not rejected by JSON Schema bounds; the graph pipeline never produces it from JSON.
        assert problem is None
    else:
        assert isinstance(problem, ParameterError)
        assert problem.path == path


def test_memory_reset_policy_is_an_enum():
    memory = get_node_spec("simpleMemory")

    assert parameter_error(memory, {"reset_policy": "clear"}) is None
    assert parameter_error(memory, {"reset_policy": "wipe"}).path == "reset_policy"


def test_context_accepts_no_parameters():
    problem = parameter_error(get_node_spec("context"), {"compaction_mode": "auto"})

    assert problem.path == "compaction_mode"
    assert "compaction_mode" in problem.message


def test_schema_outside_the_fast_subset_still_validates_with_jsonschema():
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
    }
    spec = _spec("testArrayParams", parameters_schema=schema)
    register_node_spec(spec)

    assert parameter_error(spec, {"tags": ["a", "b"]}) is None
    assert parameter_error(spec, {"tags": ["a", 1]}).path == "tags.1"
