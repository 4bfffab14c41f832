"""Work limits on a graph, checked before anything normalizes, validates or stores it.

Pure code over plain data. A graph is refused when it holds too many nodes or edges, when its nodes and
edges together are too large, when a node's parameters are too large, or when a value nests too deeply.
The size of a value is the number of characters in its strings and keys plus one per value: close to
its JSON length, and cheap to count. Counting stops as soon as a limit is crossed, so checking costs at
most as much as the limit allows, whatever was sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from graphs import errors

# Room for the agent's system prompt (its schema allows 100,000 characters) and every other parameter.
MAX_NODE_PARAMETERS_CHARS = 262_144
# Nesting levels inside one node or edge; keeps the recursive copies and the sanitizer far from
# Python's recursion limit.
MAX_VALUE_DEPTH = 32
# Node ids quoted back in an error are cut to this length.
_QUOTED_ID_CHARS = 255


@dataclass(frozen=True)
class GraphLimits:
    max_nodes: int
    max_edges: int
    max_chars: int
    max_parameters_chars: int = MAX_NODE_PARAMETERS_CHARS
    max_depth: int = MAX_VALUE_DEPTH


@dataclass(frozen=True)
class LimitBreach:
    """Why a graph is refused: an error code of the graphs app, a message, and the numbers behind it."""

    code: str
    message: str
    extra: dict[str, Any] = field(default_factory=dict)


class _TooDeep(Exception):
    pass


def _size(value: Any, *, budget: int, max_depth: int) -> int:
    """The size of `value`, counted until it exceeds `budget` (then some number above `budget`).

    Raises `_TooDeep` when a value sits more than `max_depth` levels down (`value` itself is level 1).
    """
    size = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise _TooDeep
        size += 1
        if isinstance(item, str):
            size += len(item)
        elif isinstance(item, dict):
            for key, child in item.items():
                size += len(key) if isinstance(key, str) else 1
                stack.append((child, depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1) for child in item)
        if size > budget:
            break
    return size


def _parameters(node: Any) -> Any:
    data = node.get("data") if isinstance(node, dict) else None
    return data.get("parameters") if isinstance(data, dict) else None


def graph_limit_breach(*, nodes: list[Any], edges: list[Any], limits: GraphLimits) -> LimitBreach | None:
    """None when the graph with these `nodes` and `edges` lists is within `limits`, else the first limit
    it crosses: node and edge counts first, then depth and total size, then each node's parameters."""
    counts = {
        "nodes": len(nodes),
        "edges": len(edges),
        "max_nodes": limits.max_nodes,
        "max_edges": limits.max_edges,
    }
    if len(nodes) > limits.max_nodes or len(edges) > limits.max_edges:
        return LimitBreach(
            errors.GRAPH_TOO_LARGE,
            f"A graph may hold at most {limits.max_nodes} nodes and {limits.max_edges} edges.",
            {**counts, "limit": "nodes" if len(nodes) > limits.max_nodes else "edges"},
        )
    remaining = limits.max_chars
    try:
        for item in chain(nodes, edges):
            remaining -= _size(item, budget=remaining, max_depth=limits.max_depth)
            if remaining < 0:
                return LimitBreach(
                    errors.GRAPH_TOO_LARGE,
                    f"A graph's nodes and edges may hold at most {limits.max_chars} characters.",
                    {**counts, "limit": "chars", "max_chars": limits.max_chars},
                )
    except _TooDeep:
        return LimitBreach(
            errors.GRAPH_TOO_LARGE,
            f"Values inside a node or an edge may nest at most {limits.max_depth} levels deep.",
            {**counts, "limit": "depth", "max_depth": limits.max_depth},
        )
    for node in nodes:
        parameters = _parameters(node)
        if parameters is None:
            continue
        size = _size(parameters, budget=limits.max_parameters_chars, max_depth=limits.max_depth)
        if size > limits.max_parameters_chars:
            node_id = node.get("id")
            quoted = node_id[:_QUOTED_ID_CHARS] if isinstance(node_id, str) else ""
            return LimitBreach(
                errors.PARAMETERS_TOO_LARGE,
                f"Node '{quoted}' has parameters larger than {limits.max_parameters_chars} characters.",
                {"node_id": quoted, "max_chars": limits.max_parameters_chars},
            )
    return None
