"""Graph wiring reads (pure): the answering agent, what is wired into a port, the tools wired nodes offer."""

from __future__ import annotations

from typing import Any

from graphs.specs import get_node_spec
from graphs.wiring import WiredTool, chat_agent, has_context, node_parameters, wired_sources, wired_tools
from tests.conftest import demo_graph


def edge(source: str, target: str, handle: str) -> dict[str, Any]:
    return {"id": f"{source}-{target}", "source": source, "target": target, "targetHandle": handle}


def test_the_chat_trigger_is_answered_by_the_agent_on_its_main_input() -> None:
    graph = demo_graph()

    assert chat_agent(graph) == "agent"
    assert node_parameters(graph, node_id="agent") == {
        "system_prompt": "You are helpful.",
        "provider": "offline",
    }


def test_a_trigger_wired_to_no_agent_input_main_has_no_answering_agent() -> None:
    graph = demo_graph()
    graph["edges"] = [e for e in graph["edges"] if e["targetHandle"] != "input-main"]
    graph["edges"].append(edge("trigger", "agent", "input-tools"))

    assert chat_agent(graph) is None
    assert chat_agent({}) is None


def test_the_tools_come_from_the_wired_nodes_specs() -> None:
    graph = demo_graph()
    graph["nodes"].append({"id": "mem2", "type": "simpleMemory", "data": {}})
    graph["edges"].append(edge("mem2", "agent", "input-tools"))
    graph["edges"].append(edge("ctx", "agent", "input-tools"))  # a Context node offers no tool

    tool = get_node_spec("simpleMemory")
    assert tool is not None
    assert wired_tools(graph, agent="agent") == [
        WiredTool(node_id="mem", tool_name=str(tool.tool_name)),
        WiredTool(node_id="mem2", tool_name=str(tool.tool_name)),
    ]
    assert wired_sources(graph, node_id="agent", port="input-tools") == ["ctx", "mem", "mem2"]


def test_a_context_counts_only_on_the_context_input() -> None:
    assert has_context(demo_graph(), agent="agent") is True
    assert has_context(demo_graph(with_context=False), agent="agent") is False
    moved = demo_graph(with_context=False)
    moved["nodes"].append({"id": "ctx", "type": "context", "data": {}})
    moved["edges"].append(edge("ctx", "agent", "input-tools"))
    assert has_context(moved, agent="agent") is False


def test_edges_to_missing_nodes_and_malformed_entries_are_ignored() -> None:
    graph = demo_graph(with_memory=False, with_context=False)
    graph["edges"].extend([edge("ghost", "agent", "input-tools"), "not an edge"])
    graph["nodes"].append("not a node")

    assert wired_sources(graph, node_id="agent", port="input-tools") == []
    assert wired_tools(graph, agent="agent") == []
    assert chat_agent(graph) == "agent"
    assert node_parameters(graph, node_id="ghost") == {}
