"""Graph normalization: one pure, versioned pipeline used by save, get, import and deploy.

`normalize_workflow_graph` runs, in order:
1. shape — only `graphVersion`, `nodes`, `edges` survive; nodes, node data, edges and edge data keep only
   allowlisted keys; snake-case handle keys become camel-case; node parameters pass the sanitizer;
2. the legacy rewrite of `simpleMemory → input-memory` edges (Memory becomes a tool, the agent gets a Context);
3. canonical ids `<workflow_id>:<type>:<n>` (when a workflow id is given).

Its output is a fixed point: normalizing it again changes nothing. Outside the legacy rewrite it never
creates, reconnects or deletes a Context.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphs.constants import (
    CONTEXT_INPUT_HANDLE,
    CONTEXT_NODE_TYPE,
    CONTEXT_OUTPUT_HANDLE,
    GRAPH_VERSION,
    LEGACY_MEMORY_INPUT_HANDLE,
    LEGACY_PARTIAL_ARTIFACT,
    MEMORY_NODE_TYPE,
    TOOL_OUTPUT_HANDLE,
    TOOLS_INPUT_HANDLE,
)
from opencompany.core.sanitize import sanitize_payload

NORMALIZATION_VERSION = 1
CONTEXT_OFFSET_X = 360

_NODE_DATA_KEYS = ("label", "disabled", "condition", "parameters")
_CONTEXT_DATA_KEYS = ("systemManaged", "agentNodeId")
_EDGE_KEYS = ("type", "animated", "hidden", "label")
_EDGE_DATA_KEYS = ("label", "condition", "systemManaged")
_LEGACY_CONTENT_KEY = "memory_content"
_TYPE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class GraphShapeError(ValueError):
    """The graph is not a JSON object with `nodes` and `edges` lists."""


@dataclass
class NormalizationResult:
    graph: dict[str, Any]
    aliases: dict[str, str] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "graph": self.graph,
            "aliases": dict(self.aliases),
            "warnings": list(self.warnings),
            "artifacts": list(self.artifacts),
        }


# --- small helpers --------------------------------------------------------------------------------------


def _as_id(value: Any) -> str:
    if type(value) is str:
        return value
    return "" if value is None else str(value)


def _json_copy(value: Any) -> Any:
    """A copy of JSON-like data that shares nothing mutable with the input (cheaper than deepcopy)."""
    if isinstance(value, dict):
        return {str(key): _json_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_copy(item) for item in value]
    return value


def sanitize_type_for_id(node_type: str) -> str:
    """`ai agent/v2` → `ai-agent-v2`: the type segment of a canonical id."""
    cleaned = "".join(char if char in _TYPE_CHARS else "-" for char in node_type).strip("-")
    return cleaned or "node"


def _position(value: Any) -> dict[str, int | float]:
    position: dict[str, int | float] = {"x": 0, "y": 0}
    if isinstance(value, dict):
        for axis in ("x", "y"):
            coordinate = value.get(axis)
            if type(coordinate) is int or (type(coordinate) is float and math.isfinite(coordinate)):
                position[axis] = coordinate
    return position


class _IdAllocator:
    """Hands out ids no one holds yet: `base`, else `base<sep>2`, `base<sep>3`, … (the first free one).

    Remembers, per base, the last suffix it handed out: every suffix below it is taken for good (taken
    only grows), so the next request for that base resumes there instead of probing from 2 again. That
    keeps id assignment linear in the number of ids however many of them share a base.
    """

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken: set[str] = set() if taken is None else taken
        self._next_suffix: dict[tuple[str, str], int] = {}

    def claim(self, candidate: str) -> bool:
        """Take `candidate` if it is free; False if someone already holds it."""
        if candidate in self.taken:
            return False
        self.taken.add(candidate)
        return True

    def fresh(self, base: str, separator: str) -> str:
        key = (base, separator)
        suffix = self._next_suffix.get(key, 1)
        candidate = base if suffix == 1 else f"{base}{separator}{suffix}"
        while candidate in self.taken:
            suffix += 1
            candidate = f"{base}{separator}{suffix}"
        self._next_suffix[key] = suffix
        self.taken.add(candidate)
        return candidate


def _edge_id_base(edge: Mapping[str, Any]) -> str:
    source_handle = edge.get("sourceHandle") or ""
    target_handle = edge.get("targetHandle") or ""
    return f"e-{edge.get('source', '')}-{source_handle}-{edge.get('target', '')}-{target_handle}"


def _ensure_edge_ids(edges: list[dict[str, Any]]) -> None:
    """Give every edge whose id is missing or already used a fresh deterministic one.

    Rewrites the given edge dicts, which the caller owns (never the caller's input).
    """
    ids = _IdAllocator()
    needs_id: list[dict[str, Any]] = []
    for edge in edges:
        edge_id = _as_id(edge.get("id"))
        if not (edge_id and ids.claim(edge_id)):
            needs_id.append(edge)
    for edge in needs_id:
        edge["id"] = ids.fresh(_edge_id_base(edge), "-")


# --- canonical ids --------------------------------------------------------------------------------------


def _canonical_ordinal(node_id: str, prefix: str) -> int | None:
    if not node_id.startswith(prefix):
        return None
    digits = node_id[len(prefix) :]
    if digits.isascii() and digits.isdigit() and digits[0] != "0":
        return int(digits)
    return None


def canonicalize_ids(
    workflow_id: str, nodes: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """Rename nodes to `<workflow_id>:<type>:<n>`; return `(nodes, edges, aliases {old: new})`.

    Two passes: every node already canonical for this workflow and its own type keeps its id (the first
    one, if several share it); every other node is numbered past its type's highest ordinal, so no two
    nodes can end up with the same id. Edge endpoints and `data.agentNodeId` follow the aliases; edge ids
    are kept, except missing or duplicated ones, which get a fresh deterministic id. Inputs are not mutated.
    """
    if not workflow_id:
        raise ValueError("canonicalize_ids needs a non-empty workflow_id")
    out_nodes = [dict(node) for node in nodes]
    out_edges = [dict(edge) for edge in edges]
    aliases = _canonicalize_in_place(workflow_id, out_nodes, out_edges)
    _ensure_edge_ids(out_edges)
    return out_nodes, out_edges, aliases


def _canonicalize_in_place(
    workflow_id: str, nodes: list[dict[str, Any]], edges: list[dict[str, Any]]
) -> dict[str, str]:
    """Rewrite ids in the given node and edge dicts (which the caller owns); never mutates nested data."""
    prefix_of_type: dict[Any, str] = {}
    prefixes: list[str] = []
    kept: list[bool] = []
    reserved: set[str] = set()
    highest: dict[str, int] = {}
    for node in nodes:
        node_type = node.get("type")
        prefix = prefix_of_type.get(node_type) if isinstance(node_type, str) else None
        if prefix is None:
            prefix = f"{workflow_id}:{sanitize_type_for_id(_as_id(node_type))}:"
            if isinstance(node_type, str):
                prefix_of_type[node_type] = prefix
        prefixes.append(prefix)
        node_id = _as_id(node.get("id"))
        ordinal = _canonical_ordinal(node_id, prefix)
        keep = ordinal is not None and node_id not in reserved
        kept.append(keep)
        if keep and ordinal is not None:
            reserved.add(node_id)
            if ordinal > highest.get(prefix, 0):
                highest[prefix] = ordinal

    aliases: dict[str, str] = {}
    seen_old: set[str] = set()
    for node, prefix, keep in zip(nodes, prefixes, kept, strict=True):
        old = _as_id(node.get("id"))
        if keep:
            new = old
        else:
            ordinal = highest.get(prefix, 0) + 1
            highest[prefix] = ordinal
            new = f"{prefix}{ordinal}"
            node["id"] = new
        if old not in seen_old:
            seen_old.add(old)
            if old and old != new:
                aliases[old] = new
    if not aliases:
        return aliases

    for node in nodes:
        data = node.get("data")
        if isinstance(data, dict):
            owner = data.get("agentNodeId")
            if isinstance(owner, str) and owner in aliases:
                node["data"] = {**data, "agentNodeId": aliases[owner]}
    for edge in edges:
        for key in ("source", "target", "sourceNode", "targetNode"):
            if key in edge:
                end = _as_id(edge[key])
                edge[key] = aliases.get(end, end)
    return aliases


# --- step 1: shape --------------------------------------------------------------------------------------


def _shape_node(raw: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """The allowlisted node, and the raw legacy `memory_content` (read before the sanitizer drops it)."""
    node_type = raw.get("type")
    node_type = node_type if isinstance(node_type, str) else ""
    node: dict[str, Any] = {
        "id": _as_id(raw.get("id")),
        "type": node_type,
        "position": _position(raw.get("position")),
    }
    data: dict[str, Any] = {}
    legacy_content: Any = None
    raw_data = raw.get("data")
    if isinstance(raw_data, dict):
        for key in _NODE_DATA_KEYS:
            if key in raw_data:
                if key == "parameters":
                    parameters = raw_data[key]
                    # The sanitizer returns a deep copy without runtime state; the legacy Markdown is
                    # read first (for the artifact) and dropped by name as well, whatever the sanitizer does.
                    if isinstance(parameters, dict):
                        legacy_content = parameters.get(_LEGACY_CONTENT_KEY)
                    parameters = sanitize_payload(parameters)
                    if isinstance(parameters, dict):
                        parameters.pop(_LEGACY_CONTENT_KEY, None)
                    data[key] = parameters
                else:
                    data[key] = _json_copy(raw_data[key])
        if node_type == CONTEXT_NODE_TYPE:
            for key in _CONTEXT_DATA_KEYS:
                if key in raw_data:
                    data[key] = _json_copy(raw_data[key])
    node["data"] = data
    return node, legacy_content


def _shape_edge(raw: Mapping[str, Any]) -> dict[str, Any]:
    edge: dict[str, Any] = {
        "id": _as_id(raw.get("id")),
        "source": _as_id(raw.get("source")),
        "target": _as_id(raw.get("target")),
    }
    for camel, snake in (("sourceHandle", "source_handle"), ("targetHandle", "target_handle")):
        handle = raw[camel] if camel in raw else raw.get(snake)
        if handle is not None:
            edge[camel] = _as_id(handle)
    for key in _EDGE_KEYS:
        if key in raw:
            edge[key] = _json_copy(raw[key])
    raw_data = raw.get("data")
    if isinstance(raw_data, dict):
        edge["data"] = {key: _json_copy(raw_data[key]) for key in _EDGE_DATA_KEYS if key in raw_data}
    return edge


# --- step 2: legacy Simple Memory rewrite ---------------------------------------------------------------


@dataclass
class _LegacyPair:
    memory_id: str
    agent_id: str
    context_id: str


def _rewrite_legacy_memory(
    nodes: list[dict[str, Any]], edges: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[_LegacyPair]]:
    first_by_id: dict[str, dict[str, Any]] = {}
    for node in nodes:
        first_by_id.setdefault(node["id"], node)

    # agent id -> its legacy memories in edge order (a dict keeps the order and dedupes in O(1)).
    legacy_by_agent: dict[str, dict[str, None]] = {}
    kept_edges: list[dict[str, Any]] = []
    for edge in edges:
        source = first_by_id.get(edge["source"])
        if (
            source is not None
            and source["type"] == MEMORY_NODE_TYPE
            and edge.get("targetHandle") == LEGACY_MEMORY_INPUT_HANDLE
            and edge["target"] in first_by_id
        ):
            legacy_by_agent.setdefault(edge["target"], {})[edge["source"]] = None
        else:
            kept_edges.append(edge)
    if not legacy_by_agent:
        return nodes, edges, []

    edge_ids = _IdAllocator({edge["id"] for edge in kept_edges})
    node_ids = _IdAllocator(set(first_by_id))
    tool_pairs = {
        (edge["source"], edge["target"])
        for edge in kept_edges
        if edge.get("targetHandle") == TOOLS_INPUT_HANDLE
    }
    context_of: dict[str, str] = {}
    for edge in kept_edges:
        source = first_by_id.get(edge["source"])
        if (
            source is not None
            and source["type"] == CONTEXT_NODE_TYPE
            and edge.get("sourceHandle") == CONTEXT_OUTPUT_HANDLE
            and edge.get("targetHandle") == CONTEXT_INPUT_HANDLE
        ):
            context_of.setdefault(edge["target"], edge["source"])

    new_nodes = list(nodes)
    new_edges = kept_edges
    pairs: list[_LegacyPair] = []
    for ordinal, agent_id in enumerate(sorted(legacy_by_agent), start=1):
        for memory_id in legacy_by_agent[agent_id]:
            if (memory_id, agent_id) not in tool_pairs:
                tool_pairs.add((memory_id, agent_id))
                new_edges.append(
                    {
                        "id": edge_ids.fresh(f"memory-tool-{memory_id}-{agent_id}".replace(":", "-"), "-"),
                        "source": memory_id,
                        "target": agent_id,
                        "sourceHandle": TOOL_OUTPUT_HANDLE,
                        "targetHandle": TOOLS_INPUT_HANDLE,
                    }
                )
        context_id = context_of.get(agent_id)
        if context_id is None:
            agent_position = first_by_id[agent_id]["position"]
            context_id = node_ids.fresh(f"__context__:{ordinal}:{agent_id}", ":")
            new_nodes.append(
                {
                    "id": context_id,
                    "type": CONTEXT_NODE_TYPE,
                    "position": {"x": agent_position["x"] - CONTEXT_OFFSET_X, "y": agent_position["y"]},
                    "data": {"label": "Context"},
                }
            )
            new_edges.append(
                {
                    "id": edge_ids.fresh(f"context-{context_id}-{agent_id}".replace(":", "-"), "-"),
                    "source": context_id,
                    "target": agent_id,
                    "sourceHandle": CONTEXT_OUTPUT_HANDLE,
                    "targetHandle": CONTEXT_INPUT_HANDLE,
                }
            )
            context_of[agent_id] = context_id
        pairs.extend(_LegacyPair(memory_id, agent_id, context_id) for memory_id in legacy_by_agent[agent_id])
    return new_nodes, new_edges, pairs


# --- the pipeline ---------------------------------------------------------------------------------------


def normalize_workflow_graph(workflow_id: str, graph: Any) -> NormalizationResult:
    """Normalize a submitted or stored graph; see the module docstring. Pure: the input is not mutated.

    Artifacts (`legacy_partial` Markdown of migrated Simple Memory nodes) and warnings name canonical ids.
    Raises `GraphShapeError` only when `graph` is not an object or its `nodes`/`edges` are not lists.
    """
    if not isinstance(graph, Mapping):
        raise GraphShapeError(f"A workflow graph must be a JSON object, not {type(graph).__name__}")
    raw_nodes = graph.get("nodes", [])
    raw_edges = graph.get("edges", [])
    if raw_nodes is None:
        raw_nodes = []
    if raw_edges is None:
        raw_edges = []
    if not isinstance(raw_nodes, list):
        raise GraphShapeError(f"graph.nodes must be a list, not {type(raw_nodes).__name__}")
    if not isinstance(raw_edges, list):
        raise GraphShapeError(f"graph.edges must be a list, not {type(raw_edges).__name__}")

    nodes: list[dict[str, Any]] = []
    legacy_content: dict[str, Any] = {}  # by node id; like every lookup by id, the first node wins
    for raw in raw_nodes:
        if isinstance(raw, dict):
            node, content = _shape_node(raw)
            if node["id"] not in legacy_content:
                legacy_content[node["id"]] = content
            nodes.append(node)
    edges = [_shape_edge(raw) for raw in raw_edges if isinstance(raw, dict)]
    _ensure_edge_ids(edges)

    nodes, edges, pairs = _rewrite_legacy_memory(nodes, edges)

    aliases: dict[str, str] = {}
    if workflow_id:
        # Every dict here is already the pipeline's own copy, and edge ids are already unique.
        aliases = _canonicalize_in_place(workflow_id, nodes, edges)

    warnings: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    for pair in pairs:
        memory_id = aliases.get(pair.memory_id, pair.memory_id)
        agent_id = aliases.get(pair.agent_id, pair.agent_id)
        context_id = aliases.get(pair.context_id, pair.context_id)
        markdown = legacy_content.get(pair.memory_id)
        if isinstance(markdown, str) and markdown:
            artifacts.append(
                {
                    "kind": LEGACY_PARTIAL_ARTIFACT,
                    "memory_node_id": memory_id,
                    "agent_node_id": agent_id,
                    "context_node_id": context_id,
                    "markdown": markdown,
                }
            )
        warnings.append(
            {
                "code": "legacy_memory_migrated",
                "node_id": agent_id,
                "message": (
                    f"Migrated legacy Simple Memory edge '{memory_id}' -> '{agent_id}'; "
                    "process-local vector entries could not be recovered"
                ),
            }
        )
    return NormalizationResult(
        graph={"graphVersion": GRAPH_VERSION, "nodes": nodes, "edges": edges},
        aliases=aliases,
        warnings=warnings,
        artifacts=artifacts,
    )
