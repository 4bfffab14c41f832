"""Graph wiring reads (pure): the answering agent, what is wired into a port, the tools wired nodes offer."""

from __future__ import annotations

import re
from typing import Any

from graphs.specs import get_node_spec
from graphs.wiring import (
    Teammate,
    WiredTool,
    chat_agent,
    has_context,
    node_parameters,
    teammates,
    wired_sources,
    wired_tools,
)
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
        WiredTool(node_id="mem", tool_name=str(tool.tool_name), name="memory", label="Memory"),
        WiredTool(node_id="mem2", tool_name=str(tool.tool_name), name="memory_2", label=""),
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


def test_several_memory_nodes_get_stable_distinct_names_in_node_number_order() -> None:
    graph = demo_graph(with_memory=False)
    for n in (10, 2, 1):
        node = f"wf:simpleMemory:{n}"
        graph["nodes"].append({"id": node, "type": "simpleMemory", "data": {"label": f"Shelf {n}"}})
        graph["edges"].append(edge(node, "agent", "input-tools"))

    tools = wired_tools(graph, agent="agent")

    assert [(t.node_id, t.name, t.label) for t in tools] == [
        ("wf:simpleMemory:1", "memory", "Shelf 1"),
        ("wf:simpleMemory:2", "memory_2", "Shelf 2"),
        ("wf:simpleMemory:10", "memory_3", "Shelf 10"),
    ]
    assert wired_tools(graph, agent="agent") == tools


def test_a_team_leads_teammates_are_named_after_their_labels_and_numbered_on_a_clash() -> None:
    graph = demo_graph(with_memory=False)
    graph["nodes"][1]["type"] = "teamLead"
    mates = [("m1", "Research Analyst"), ("m2", "research analyst!"), ("m3", "")]
    for node, label in mates:
        graph["nodes"].append({"id": node, "type": "aiAgent", "data": {"label": label}})
        graph["edges"].append(edge(node, "agent", "input-teammates"))
    graph["nodes"].append({"id": "m4", "type": "simpleMemory", "data": {"label": "Not an agent"}})
    graph["edges"].append(edge("m4", "agent", "input-teammates"))

    assert teammates(graph, lead="agent") == [
        Teammate(node_id="m1", name="ask_research_analyst", label="Research Analyst"),
        Teammate(node_id="m2", name="ask_research_analyst_2", label="research analyst!"),
        Teammate(node_id="m3", name="ask_teammate", label=""),
    ]
    assert teammates(graph, lead="m1") == []


def test_an_edge_without_a_target_handle_reaches_the_default_input() -> None:
    graph = demo_graph(with_memory=False, with_context=False)
    for e in graph["edges"]:
        e.pop("targetHandle")
        e.pop("sourceHandle")

    assert chat_agent(graph) == "agent"
    assert wired_sources(graph, node_id="agent", port="input-main") == ["trigger"]


def test_generated_tool_names_are_valid_for_every_provider_whatever_the_labels() -> None:
    graph = demo_graph(with_memory=False)
    graph["nodes"][1]["type"] = "teamLead"
    labels = ["Über-Forscher 🚀 " * 12, "!!!", "research", "research"]
    for n, label in enumerate(labels, start=1):
        graph["nodes"].append({"id": f"m{n}", "type": "aiAgent", "data": {"label": label}})
        graph["edges"].append(edge(f"m{n}", "agent", "input-teammates"))
        graph["nodes"].append({"id": f"mem{n}", "type": "simpleMemory", "data": {"label": label}})
        graph["edges"].append(edge(f"mem{n}", "agent", "input-tools"))

    names = [t.name for t in teammates(graph, lead="agent")] + [
        t.name for t in wired_tools(graph, agent="agent")
    ]

    assert names[1:] == [
        "ask_teammate",
        "ask_research",
        "ask_research_2",
        "memory",
        "memory_2",
        "memory_3",
        "memory_4",
    ]
    assert names[0].startswith("ask_ber_forscher_ber_forscher")
    assert all(re.fullmatch(r"[a-z0-9_]{1,64}", name) for name in names)
    assert len(set(names)) == len(names)
