"""Reads of a graph's wiring: the agent that answers the chat, what is wired into a node's port, and the
tools an agent's wired tool nodes provide.

Pure functions over the graph JSON (no database). What a node can do comes from its spec
(`graphs.specs`): an answering agent `requires_context`, a Context node `is_context_panel`, a tool node
declares its `tool_name`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphs.specs import NodeSpec, get_node_spec

CHAT_TRIGGER_TYPE = "chatTrigger"
INPUT_MAIN = "input-main"
INPUT_TOOLS = "input-tools"
INPUT_CONTEXT = "input-context"


@dataclass(frozen=True)
class WiredTool:
    """A tool node wired into an agent: its node id and the tool it offers the model."""

    node_id: str
    tool_name: str


def _nodes(graph: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(n.get("id")): n for n in graph.get("nodes", []) if isinstance(n, dict)}


def _edges(graph: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in graph.get("edges", []) if isinstance(e, dict)]


def _spec(node: dict[str, Any] | None) -> NodeSpec | None:
    return get_node_spec(str(node.get("type"))) if node is not None else None


def chat_agent(graph: dict[str, Any]) -> str | None:
    """The agent the chat trigger feeds (its `input-main`), or None when the trigger feeds none. With
    several triggers, the first by node id that feeds an agent answers."""
    nodes = _nodes(graph)
    triggers = sorted(nid for nid, n in nodes.items() if n.get("type") == CHAT_TRIGGER_TYPE)
    edges = _edges(graph)
    for trigger in triggers:
        for edge in edges:
            if str(edge.get("source")) != trigger or edge.get("targetHandle") != INPUT_MAIN:
                continue
            spec = _spec(nodes.get(str(edge.get("target"))))
            if spec is not None and spec.requires_context:
                return str(edge["target"])
    return None


def wired_sources(graph: dict[str, Any], *, node_id: str, port: str) -> list[str]:
    """The ids of the nodes wired into `port` of `node_id`, sorted, each once."""
    nodes = _nodes(graph)
    return sorted(
        {
            str(e.get("source"))
            for e in _edges(graph)
            if str(e.get("target")) == node_id
            and e.get("targetHandle") == port
            and str(e.get("source")) in nodes
        }
    )


def wired_tools(graph: dict[str, Any], *, agent: str) -> list[WiredTool]:
    """The tool nodes wired into the agent's `input-tools` (by node id), with the tool each provides;
    a wired node whose spec names no tool offers none."""
    nodes = _nodes(graph)
    tools: list[WiredTool] = []
    for source in wired_sources(graph, node_id=agent, port=INPUT_TOOLS):
        spec = _spec(nodes[source])
        if spec is not None and spec.tool_name is not None:
            tools.append(WiredTool(node_id=source, tool_name=spec.tool_name))
    return tools


def has_context(graph: dict[str, Any], *, agent: str) -> bool:
    """Whether a Context node is wired into the agent's `input-context` (its conversation is stored)."""
    nodes = _nodes(graph)
    for source in wired_sources(graph, node_id=agent, port=INPUT_CONTEXT):
        spec = _spec(nodes[source])
        if spec is not None and spec.is_context_panel:
            return True
    return False


def node_parameters(graph: dict[str, Any], *, node_id: str) -> dict[str, Any]:
    """A copy of the node's `data.parameters` (empty when the node or its parameters are missing)."""
    node = _nodes(graph).get(node_id) or {}
    data = node.get("data")
    parameters = data.get("parameters") if isinstance(data, dict) else None
    return dict(parameters) if isinstance(parameters, dict) else {}
