"""Reads of a graph's wiring: the agent that answers the chat, what is wired into a node's port, the
tools an agent's wired tool nodes provide and the teammates a team lead delegates to.

Pure functions over the graph JSON (no database). What a node can do comes from its spec
(`graphs.specs`): an answering agent `requires_context`, a Context node `is_context_panel`, a tool node
declares its `tool_name`, a team lead `accepts_teammates`. An edge that names no target handle attaches
to the target's default (first) input port, as the validator reads it.

Model-facing names are stable and valid for every provider (`[a-z0-9_]`, at most 64 characters): the
first node wired for a tool keeps the tool's name (`memory`), the next ones get `memory_2`, `memory_3`…
in node-id order; a teammate is `ask_<its label>` (`ask_teammate` without one), numbered the same way
when two labels collide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from graphs.constants import (
    CHAT_TRIGGER_NODE_TYPE,
    CONTEXT_INPUT_HANDLE,
    INPUT,
    MAIN_INPUT_HANDLE,
    TEAMMATES_INPUT_HANDLE,
    TOOLS_INPUT_HANDLE,
)
from graphs.specs import NodeSpec, get_node_spec

TOOL_NAME_MAX = 64
LABEL_MAX = 120
_NOT_NAME = re.compile(r"[^a-z0-9]+")
_DIGITS = re.compile(r"(\d+)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class WiredTool:
    """A tool node wired into an agent: its node id, the tool its spec provides, the distinct name the
    model calls it by and the node's label."""

    node_id: str
    tool_name: str
    name: str
    label: str


@dataclass(frozen=True)
class Teammate:
    """An agent wired into a team lead's `input-teammates`: the lead calls it as the tool `name`."""

    node_id: str
    name: str
    label: str


def _nodes(graph: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(n.get("id")): n for n in graph.get("nodes", []) if isinstance(n, dict)}


def _edges(graph: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in graph.get("edges", []) if isinstance(e, dict)]


def _spec(node: dict[str, Any] | None) -> NodeSpec | None:
    return get_node_spec(str(node.get("type"))) if node is not None else None


def _target_handle(edge: dict[str, Any], target: dict[str, Any] | None) -> str | None:
    handle = edge.get("targetHandle")
    if handle is not None:
        return str(handle)
    spec = _spec(target)
    port = spec.port(None, INPUT) if spec is not None else None
    return port.name if port is not None else None


def _natural(node_id: str) -> list[Any]:
    """Sort key: `x:simpleMemory:2` before `x:simpleMemory:10`."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(node_id)]


def node_label(graph: dict[str, Any], *, node_id: str) -> str:
    """The node's `data.label` on one line (at most 120 characters), or "" when it has none."""
    data = (_nodes(graph).get(node_id) or {}).get("data")
    label = data.get("label") if isinstance(data, dict) else None
    if not isinstance(label, str):
        return ""
    return " ".join(_CONTROL.sub(" ", label).split())[:LABEL_MAX]


def _numbered(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        n += 1
        suffix = f"_{n}"
        name = base[: TOOL_NAME_MAX - len(suffix)] + suffix
    taken.add(name)
    return name


def chat_agent(graph: dict[str, Any]) -> str | None:
    """The agent the chat trigger feeds (its `input-main`), or None when the trigger feeds none. With
    several triggers, the first by node id that feeds an agent answers."""
    nodes = _nodes(graph)
    triggers = sorted(nid for nid, n in nodes.items() if n.get("type") == CHAT_TRIGGER_NODE_TYPE)
    edges = _edges(graph)
    for trigger in triggers:
        for edge in edges:
            target = nodes.get(str(edge.get("target")))
            if str(edge.get("source")) != trigger or _target_handle(edge, target) != MAIN_INPUT_HANDLE:
                continue
            spec = _spec(target)
            if spec is not None and spec.requires_context:
                return str(edge["target"])
    return None


def wired_sources(graph: dict[str, Any], *, node_id: str, port: str) -> list[str]:
    """The ids of the nodes wired into `port` of `node_id`, in node-id order (numbers compared as
    numbers), each once."""
    nodes = _nodes(graph)
    target = nodes.get(node_id)
    return sorted(
        {
            str(e.get("source"))
            for e in _edges(graph)
            if str(e.get("target")) == node_id
            and _target_handle(e, target) == port
            and str(e.get("source")) in nodes
        },
        key=_natural,
    )


def wired_tools(graph: dict[str, Any], *, agent: str) -> list[WiredTool]:
    """The tool nodes wired into the agent's `input-tools` (in node-id order), each with the tool its
    spec provides and a distinct model-facing name; a wired node whose spec names no tool offers none."""
    nodes = _nodes(graph)
    tools: list[WiredTool] = []
    taken: set[str] = set()
    for source in wired_sources(graph, node_id=agent, port=TOOLS_INPUT_HANDLE):
        spec = _spec(nodes[source])
        if spec is not None and spec.tool_name is not None:
            tools.append(
                WiredTool(
                    node_id=source,
                    tool_name=spec.tool_name,
                    name=_numbered(spec.tool_name, taken),
                    label=node_label(graph, node_id=source),
                )
            )
    return tools


def teammates(graph: dict[str, Any], *, lead: str) -> list[Teammate]:
    """The agents wired into the lead's `input-teammates` (in node-id order), each with the name of the
    tool the lead calls it by. Empty for a node that accepts no teammates."""
    nodes = _nodes(graph)
    lead_spec = _spec(nodes.get(lead))
    if lead_spec is None or not lead_spec.accepts_teammates:
        return []
    out: list[Teammate] = []
    taken: set[str] = set()
    for source in wired_sources(graph, node_id=lead, port=TEAMMATES_INPUT_HANDLE):
        spec = _spec(nodes[source])
        if spec is None or not spec.requires_context:
            continue
        label = node_label(graph, node_id=source)
        slug = _NOT_NAME.sub("_", label.lower()).strip("_") or "teammate"
        base = f"ask_{slug}"[:TOOL_NAME_MAX].rstrip("_")
        out.append(Teammate(node_id=source, name=_numbered(base, taken), label=label))
    return out


def has_context(graph: dict[str, Any], *, agent: str) -> bool:
    """Whether a Context node is wired into the agent's `input-context` (its conversation is stored)."""
    nodes = _nodes(graph)
    for source in wired_sources(graph, node_id=agent, port=CONTEXT_INPUT_HANDLE):
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
