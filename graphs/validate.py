"""Graph validator: a pure function from a graph to `{"errors": [...], "warnings": [...]}`.

Each issue is a flat dict `{code, node_id, message, ...extras}`; codes are stable API and `node_id` is the
node the editor highlights (None for graph-wide issues). Save refuses on the Context-topology codes only
(`context_only=True`); deploy and import refuse on any error. An agent without a Context is valid.

Runs in O(nodes + edges): one pass over nodes, one over edges, Kahn's algorithm for cycles.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from graphs.normalize import (
    CONTEXT_INPUT_HANDLE,
    CONTEXT_OUTPUT_HANDLE,
    CONTEXT_TYPE,
    LEGACY_MEMORY_HANDLE,
    MEMORY_TYPE,
    GraphShapeError,
)
from graphs.specs import NodeSpec, get_node_spec, parameter_error

TEAMMATES_HANDLE = "input-teammates"
TEAM_HANDLE_PREFIX = "input-team"

DUPLICATE_NODE_ID = "duplicate_node_id"
DANGLING_EDGE = "dangling_edge"
LEGACY_MEMORY_EDGE = "legacy_memory_edge"
INVALID_CONTEXT_EDGE = "invalid_context_edge"
MULTIPLE_CONTEXTS = "multiple_contexts"
SHARED_CONTEXT = "shared_context"
INVALID_TEAM_EDGE = "invalid_team_edge"
UNKNOWN_NODE_TYPE = "unknown_node_type"
UNKNOWN_PORT = "unknown_port"
INVALID_PARAM = "invalid_param"
CYCLE = "cycle"

CONTEXT_TOPOLOGY_CODES = frozenset({INVALID_CONTEXT_EDGE, MULTIPLE_CONTEXTS, SHARED_CONTEXT})

Issue = dict[str, Any]


def _issue(code: str, node_id: str | None, message: str, **extras: Any) -> Issue:
    return {"code": code, "node_id": node_id, "message": message, **extras}


def _as_id(value: Any) -> str:
    if type(value) is str:
        return value
    return "" if value is None else str(value)


def _handle(edge: Mapping[str, Any], camel: str, snake: str) -> str | None:
    value = edge[camel] if camel in edge else edge.get(snake)
    return None if value is None else _as_id(value)


def validate_workflow(graph: Mapping[str, Any], *, context_only: bool = False) -> dict[str, list[Issue]]:
    """Check a graph (normalized or as sent by the editor) against the node specs and the topology rules.

    With `context_only=True` only the Context-topology errors are computed (what save refuses on), and no
    warnings.
    """
    if not isinstance(graph, Mapping):
        raise GraphShapeError(f"A workflow graph must be a JSON object, not {type(graph).__name__}")
    raw_nodes = graph.get("nodes")
    raw_edges = graph.get("edges")
    raw_nodes = [] if raw_nodes is None else raw_nodes
    raw_edges = [] if raw_edges is None else raw_edges
    if not isinstance(raw_nodes, list) or not isinstance(raw_edges, list):
        raise GraphShapeError("graph.nodes and graph.edges must be lists")

    spec_cache: dict[str, NodeSpec | None] = {}

    def spec_of(node_type: str) -> NodeSpec | None:
        if node_type not in spec_cache:
            spec_cache[node_type] = get_node_spec(node_type)
        return spec_cache[node_type]

    # --- nodes: index by id (the first node with an id wins every lookup) ---
    type_of: dict[str, str] = {}
    node_entries: list[tuple[str, str, Any]] = []
    duplicates: dict[str, int] = {}
    for raw in raw_nodes:
        if not isinstance(raw, dict):
            continue
        node_id = _as_id(raw.get("id"))
        node_type = raw.get("type")
        node_type = node_type if isinstance(node_type, str) else ""
        if node_id in type_of:
            duplicates[node_id] = duplicates.get(node_id, 1) + 1
            continue
        type_of[node_id] = node_type
        data = raw.get("data")
        parameters = data.get("parameters", {}) if isinstance(data, dict) else {}
        node_entries.append((node_id, node_type, parameters))

    def requires_context(node_id: str) -> bool:
        node_type = type_of.get(node_id)
        spec = spec_of(node_type) if node_type is not None else None
        return spec is not None and spec.requires_context

    def present(*candidates: str) -> str | None:
        for candidate in candidates:
            if candidate in type_of:
                return candidate
        return None

    errors: list[Issue] = []
    warnings: list[Issue] = []
    dangling: list[Issue] = []
    context_errors: list[Issue] = []
    team_errors: list[Issue] = []
    port_errors: list[Issue] = []
    contexts_of_agent: dict[str, set[str]] = {}
    agents_of_context: dict[str, set[str]] = {}
    graph_edges: list[tuple[str, str]] = []

    for raw in raw_edges:
        if not isinstance(raw, dict):
            continue
        edge_id = _as_id(raw.get("id"))
        source = _as_id(raw.get("source"))
        target = _as_id(raw.get("target"))
        source_handle = _handle(raw, "sourceHandle", "source_handle")
        target_handle = _handle(raw, "targetHandle", "target_handle")
        source_type = type_of.get(source)
        target_type = type_of.get(target)

        # Context topology (rule runs on every edge: a Context edge to nowhere is no valid Context edge).
        if (
            source_type == CONTEXT_TYPE
            or source_handle == CONTEXT_OUTPUT_HANDLE
            or target_handle == CONTEXT_INPUT_HANDLE
        ):
            if (
                source_type == CONTEXT_TYPE
                and source_handle == CONTEXT_OUTPUT_HANDLE
                and target_handle == CONTEXT_INPUT_HANDLE
                and requires_context(target)
            ):
                contexts_of_agent.setdefault(target, set()).add(source)
                agents_of_context.setdefault(source, set()).add(target)
            else:
                context_errors.append(
                    _issue(
                        INVALID_CONTEXT_EDGE,
                        present(target, source),
                        "Context edges must connect context.output-context to a node declaring "
                        "requiresContext at input-context",
                        edge_id=edge_id,
                    )
                )
        if context_only:
            continue

        if source_type is None:
            dangling.append(
                _issue(
                    DANGLING_EDGE,
                    None,
                    f"Edge source '{source}' does not match any node",
                    edge_id=edge_id,
                    end="source",
                )
            )
        if target_type is None:
            dangling.append(
                _issue(
                    DANGLING_EDGE,
                    None,
                    f"Edge target '{target}' does not match any node",
                    edge_id=edge_id,
                    end="target",
                )
            )
        if source_type is not None and target_type is not None:
            graph_edges.append((source, target))

        legacy = source_type == MEMORY_TYPE and target_handle == LEGACY_MEMORY_HANDLE
        if legacy:
            warnings.append(
                _issue(
                    LEGACY_MEMORY_EDGE,
                    target,
                    "Legacy input-memory continuity must be normalized to a Context edge and an ordinary "
                    "Memory tool edge",
                    edge_id=edge_id,
                )
            )

        team_handle = target_handle is not None and target_handle.startswith(TEAM_HANDLE_PREFIX)
        if team_handle:
            target_spec = spec_of(target_type) if target_type is not None else None
            if target_handle != TEAMMATES_HANDLE:
                team_errors.append(
                    _issue(
                        INVALID_TEAM_EDGE,
                        present(target, source),
                        f"Unsupported teammate handle '{target_handle}'; use '{TEAMMATES_HANDLE}'",
                        edge_id=edge_id,
                    )
                )
            elif target_spec is None or not target_spec.accepts_teammates:
                team_errors.append(
                    _issue(
                        INVALID_TEAM_EDGE,
                        present(target, source),
                        f"The {TEAMMATES_HANDLE} handle is only valid on nodes that accept teammates",
                        edge_id=edge_id,
                    )
                )
            elif not requires_context(source):
                team_errors.append(
                    _issue(
                        INVALID_TEAM_EDGE,
                        present(source, target),
                        f"Node type '{source_type or ''}' cannot be connected as a teammate",
                        edge_id=edge_id,
                    )
                )

        # Ports: the handles owned by the rules above are judged there, not here.
        if source_type is not None and source_handle is not None and source_handle != CONTEXT_OUTPUT_HANDLE:
            source_spec = spec_of(source_type)
            if source_spec is not None and source_handle not in source_spec.output_port_names:
                port_errors.append(
                    _issue(
                        UNKNOWN_PORT,
                        source,
                        f"Node type '{source_type}' has no output handle '{source_handle}'",
                        edge_id=edge_id,
                        handle=source_handle,
                        node_type=source_type,
                    )
                )
        if (
            target_type is not None
            and target_handle is not None
            and target_handle != CONTEXT_INPUT_HANDLE
            and not team_handle
            and not legacy
        ):
            target_spec = spec_of(target_type)
            if target_spec is not None and target_handle not in target_spec.input_port_names:
                port_errors.append(
                    _issue(
                        UNKNOWN_PORT,
                        target,
                        f"Node type '{target_type}' has no input handle '{target_handle}'",
                        edge_id=edge_id,
                        handle=target_handle,
                        node_type=target_type,
                    )
                )

    multiple = [
        _issue(
            MULTIPLE_CONTEXTS,
            agent,
            "An agent cannot be connected to multiple Context nodes",
            contexts=sorted(contexts),
        )
        for agent, contexts in contexts_of_agent.items()
        if len(contexts) > 1
    ]
    shared = [
        _issue(
            SHARED_CONTEXT,
            context,
            "A Context node cannot serve multiple agents",
            agents=sorted(agents),
        )
        for context, agents in agents_of_context.items()
        if len(agents) > 1
    ]
    if context_only:
        return {"errors": context_errors + multiple + shared, "warnings": []}

    for node_id, count in duplicates.items():
        errors.append(
            _issue(
                DUPLICATE_NODE_ID,
                node_id,
                f"Node id '{node_id}' is used by {count} nodes",
                count=count,
            )
        )
    errors += dangling
    errors += context_errors
    errors += multiple
    errors += shared
    errors += team_errors

    param_errors: list[Issue] = []
    for node_id, node_type, parameters in node_entries:
        spec = spec_of(node_type)
        if spec is None:
            errors.append(
                _issue(
                    UNKNOWN_NODE_TYPE,
                    node_id,
                    f"Node type '{node_type}' is not installed",
                    node_type=node_type,
                )
            )
            continue
        problem = parameter_error(spec, parameters)
        if problem is not None:
            param_errors.append(
                _issue(INVALID_PARAM, node_id, problem.message, node_type=node_type, path=problem.path)
            )
    errors += port_errors
    errors += param_errors

    unresolved = _cycle_nodes(list(type_of), graph_edges)
    if unresolved:
        errors.append(_issue(CYCLE, None, f"Cycle detected involving nodes: {unresolved}", nodes=unresolved))
    return {"errors": errors, "warnings": warnings}


def _cycle_nodes(node_ids: list[str], edges: list[tuple[str, str]]) -> list[str]:
    """Kahn's algorithm over every edge; the nodes it cannot order (sorted), or [] when acyclic."""
    indegree = dict.fromkeys(node_ids, 0)
    successors: dict[str, list[str]] = {}
    for source, target in edges:
        successors.setdefault(source, []).append(target)
        indegree[target] += 1
    ready = deque(node_id for node_id, degree in indegree.items() if degree == 0)
    ordered = 0
    while ready:
        node_id = ready.popleft()
        ordered += 1
        for successor in successors.get(node_id, ()):
            indegree[successor] -= 1
            if indegree[successor] == 0:
                ready.append(successor)
    if ordered == len(indegree):
        return []
    return sorted(node_id for node_id, degree in indegree.items() if degree > 0)
