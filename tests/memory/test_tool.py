"""The `memory` tool: locked schema, server-side scope, validation before execution, error results."""

from __future__ import annotations

import pytest

from memory.models import MemoryItem, MemoryReceipt
from memory.tools import MEMORY_TOOL, MEMORY_TOOL_SCHEMA
from opencompany.llm.tools import ToolContext, get_tool


def _context(workflow, node, *, run_id="run_1", call_id="call_1"):
    return ToolContext(
        run_id=run_id,
        workflow_id=workflow.pk,
        generation=1,
        agent_node_id=f"{workflow.pk}:aiAgent:1",
        owner_id=workflow.owner_id,
        extras={"memory_node_id": node, "tool_call_id": call_id},
    )


def _mem(workflow, n=1):
    return f"{workflow.pk}:simpleMemory:{n}"


def test_tool_is_registered_with_a_locked_schema_and_a_recall_first_description():
    spec = get_tool("memory")

    assert spec is MEMORY_TOOL
    assert MEMORY_TOOL_SCHEMA["additionalProperties"] is False
    assert MEMORY_TOOL_SCHEMA["properties"]["patch"]["additionalProperties"] is False
    assert not {"namespace", "workflow_id", "memory_node_id", "owner_id"} & set(
        MEMORY_TOOL_SCHEMA["properties"]
    )
    assert "never say you do not know" in spec.description


def test_two_memory_nodes_and_two_owners_never_see_each_others_items(two_memory_workflow, other_workflow):
    wf = two_memory_workflow
    MEMORY_TOOL.execute(
        _context(wf, _mem(wf, 1), call_id="a"), {"operation": "remember", "content": "alpha espresso"}
    )
    MEMORY_TOOL.execute(
        _context(wf, _mem(wf, 2), call_id="b"), {"operation": "remember", "content": "beta espresso"}
    )
    MEMORY_TOOL.execute(
        _context(other_workflow, _mem(other_workflow), call_id="c"),
        {"operation": "remember", "content": "gamma espresso"},
    )

    def contents(workflow, node):
        found = MEMORY_TOOL.execute(
            _context(workflow, node, call_id="r"), {"operation": "recall", "query": "espresso"}
        )
        return [i["content"] for i in found["items"]]

    assert contents(wf, _mem(wf, 1)) == ["alpha espresso"]
    assert contents(wf, _mem(wf, 2)) == ["beta espresso"]
    assert contents(other_workflow, _mem(other_workflow)) == ["gamma espresso"]


def test_tool_call_naming_scope_fields_is_rejected_by_the_schema(workflow, other_workflow):
    context = _context(workflow, _mem(workflow))

    result = MEMORY_TOOL.execute(
        context,
        {"operation": "remember", "content": "x", "memory_node_id": _mem(other_workflow), "namespace": "n"},
    )

    assert result["error"]["code"] == "invalid_request"
    assert "Additional properties are not allowed" in result["error"]["message"]
    assert MemoryItem.objects.exists() is False


def test_context_of_another_owner_cannot_reach_a_workflow(workflow, other_owner):
    context = ToolContext(
        run_id="r",
        workflow_id=workflow.pk,
        owner_id=other_owner.pk,
        extras={"memory_node_id": _mem(workflow)},
    )

    result = MEMORY_TOOL.execute(context, {"operation": "list"})

    assert result["error"]["code"] == "not_found"


def test_node_that_is_not_a_memory_node_is_not_found(workflow):
    result = MEMORY_TOOL.execute(_context(workflow, f"{workflow.pk}:aiAgent:1"), {"operation": "list"})

    assert result["error"]["code"] == "not_found"


def test_tool_operation_id_is_run_id_and_tool_call_id(workflow):
    context = _context(workflow, _mem(workflow), run_id="run_7", call_id="call_3")

    first = MEMORY_TOOL.execute(context, {"operation": "remember", "content": "x"})
    again = MEMORY_TOOL.execute(context, {"operation": "remember", "content": "x"})

    assert first["receipt"] == {"operation_id": "run_7:call_3", "applied": True}
    assert again["receipt"] == {"operation_id": "run_7:call_3", "applied": False}
    assert MemoryReceipt.objects.get().operation_id == "run_7:call_3"
    assert MemoryItem.objects.get().created_by == "agent:run_7"


def test_full_operation_cycle_through_the_tool(workflow):
    context = _context(workflow, _mem(workflow))
    remembered = MEMORY_TOOL.execute(
        context, {"operation": "remember", "content": "Owner likes green tea", "tags": ["Tea"]}
    )
    memory_id = remembered["memory"]["id"]

    got = MEMORY_TOOL.execute(context, {"operation": "get", "memory_id": memory_id})
    listed = MEMORY_TOOL.execute(context, {"operation": "list", "tags": ["tea"]})
    stale = MEMORY_TOOL.execute(
        _context(workflow, _mem(workflow), call_id="u0"),
        {"operation": "update", "memory_id": memory_id, "expected_version": 3, "patch": {"title": "Tea"}},
    )
    updated = MEMORY_TOOL.execute(
        _context(workflow, _mem(workflow), call_id="u1"),
        {"operation": "update", "memory_id": memory_id, "expected_version": 1, "patch": {"title": "Tea"}},
    )
    forgotten = MEMORY_TOOL.execute(
        _context(workflow, _mem(workflow), call_id="f1"),
        {"operation": "forget", "memory_id": memory_id, "expected_version": 2},
    )

    assert got["memory"]["content"] == "Owner likes green tea"
    assert [i["id"] for i in listed["items"]] == [memory_id]
    assert stale == {
        "error": {"code": "version_conflict", "message": stale["error"]["message"], "current_version": 1}
    }
    assert updated["memory"]["version"] == 2
    assert forgotten["operation"] == "forget"
    assert MemoryItem.objects.exists() is False


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"operation": "remember", "content": "x" * 50_001}, "arguments.content"),
        ({"operation": "remember", "content": "x", "tags": [f"t{i}" for i in range(21)]}, "arguments.tags"),
        ({"operation": "remember", "content": "x", "expires_at": "next tuesday"}, "expires_at"),
        ({"operation": "summarize"}, "arguments.operation"),
        ({"operation": "list", "limit": 101}, "arguments.limit"),
        ({"operation": "remember", "content": "x", "colour": "red"}, "colour"),
        (
            {"operation": "update", "memory_id": "m", "expected_version": 1, "patch": {"content": None}},
            "arguments.patch.content",
        ),
        (
            {"operation": "update", "memory_id": "m", "expected_version": 1, "patch": {"tags": ["x" * 65]}},
            "arguments.patch.tags[0]",
        ),
        ({"operation": "remember"}, "content"),
        ({"operation": "update", "memory_id": "m", "expected_version": 1}, "patch"),
    ],
)
def test_bad_tool_input_is_an_error_result_naming_the_field_and_writes_nothing(workflow, arguments, field):
    result = MEMORY_TOOL.execute(_context(workflow, _mem(workflow)), arguments)

    assert result["error"]["code"] == "invalid_request"
    assert field in result["error"]["message"]
    assert MemoryItem.objects.exists() is False
    assert MemoryReceipt.objects.exists() is False
