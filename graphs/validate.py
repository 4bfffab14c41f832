"""Graph validator: a pure function from a graph to `{"errors": [...], "warnings": [...]}`.

Each issue is a flat dict `{code, node_id, message, ...extras}`; codes are stable API and `node_id` is the
node the editor highlights (None for graph-wide issues). Save refuses on the Context-topology codes and on
`unsupported_connection` (`SAVE_REFUSED_CODES`; `context_only=True` computes just the topology codes);
deploy and import refuse on any error. An agent without a Context is valid. Every wire the validator
accepts does something at run time; a wire that would do nothing is `unsupported_connection`.

Each rule is a small function over one indexed view of the graph (nodes by id, edge ends resolved, edges
sorted into the groups the rules judge); the rules run in a fixed order, which is the order of the issues.
Indexing is one pass over nodes and one over edges, each rule one pass over the nodes or its edges, the
cycle check Kahn's algorithm: linear in nodes + edges.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, NamedTuple

from graphs.constants import (
    CONTEXT_INPUT_HANDLE,
    CONTEXT_NODE_TYPE,
    CONTEXT_OUTPUT_HANDLE,
    INPUT,
    LEGACY_MEMORY_INPUT_HANDLE,
    MAIN_ROLE,
    MEMORY_NODE_TYPE,
    OUTPUT,
    TEAM_HANDLE_PREFIX,
    TEAMMATES_INPUT_HANDLE,
)
from graphs.normalize import GraphShapeError
from graphs.specs import NodeSpec, get_node_spec, parameter_error

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
UNSUPPORTED_CONNECTION = "unsupported_connection"

CONTEXT_TOPOLOGY_CODES = frozenset({INVALID_CONTEXT_EDGE, MULTIPLE_CONTEXTS, SHARED_CONTEXT})
# Every error code the validator reports (its warnings: `LEGACY_MEMORY_EDGE`), for the API schema.
ERROR_CODES = (
    DUPLICATE_NODE_ID,
    DANGLING_EDGE,
    INVALID_CONTEXT_EDGE,
    MULTIPLE_CONTEXTS,
    SHARED_CONTEXT,
    INVALID_TEAM_EDGE,
    UNKNOWN_NODE_TYPE,
    UNKNOWN_PORT,
    UNSUPPORTED_CONNECTION,
    INVALID_PARAM,
    CYCLE,
)
# What save refuses on: the Context rules, and wires the runtime would silently ignore.
SAVE_REFUSED_CODES = CONTEXT_TOPOLOGY_CODES | {UNSUPPORTED_CONNECTION}

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


class _Edge(NamedTuple):
    id: str
    source: str
    target: str
    source_handle: str | None
    target_handle: str | None
    source_type: str | None  # None: the source matches no node
    target_type: str | None
    team: bool  # the target handle is judged by the teammate rule
    legacy_memory: bool  # an old Simple Memory continuity edge
    context: bool  # judged by the Context rule


# (id, type, parameters) of each node that wins its id, in node order.
_Node = tuple[str, str, Any]


class _Graph:
    """The graph as every rule reads it: nodes by id (the first node with an id wins every lookup), edges
    with their ends resolved and sorted into the groups the rules judge, specs looked up once per type."""

    def __init__(self, raw_nodes: list[Any], raw_edges: list[Any]) -> None:
        self.type_of: dict[str, str] = {}
        self.nodes: list[_Node] = []
        self.duplicates: dict[str, int] = {}
        for raw in raw_nodes:
            if not isinstance(raw, dict):
                continue
            node_id = _as_id(raw.get("id"))
            node_type = raw.get("type")
            node_type = node_type if isinstance(node_type, str) else ""
            if node_id in self.type_of:
                self.duplicates[node_id] = self.duplicates.get(node_id, 1) + 1
                continue
            self.type_of[node_id] = node_type
            data = raw.get("data")
            parameters = data.get("parameters", {}) if isinstance(data, dict) else {}
            self.nodes.append((node_id, node_type, parameters))
        # The spec of every type a node has (None: not installed); edge ends only ever have these types.
        self.specs: dict[str | None, NodeSpec | None] = {
            node_type: get_node_spec(node_type) for node_type in set(self.type_of.values())
        }

        # Every edge in order, then the groups the rules judge (one edge may sit in several).
        self.edges: list[_Edge] = []
        self.dangling_edges: list[_Edge] = []  # an end matches no node
        self.linked_edges: list[_Edge] = []  # both ends match a node
        self.context_edges: list[_Edge] = []  # judged by the Context rule
        self.team_edges: list[_Edge] = []
        self.legacy_memory_edges: list[_Edge] = []
        edges, dangling, linked = self.edges, self.dangling_edges, self.linked_edges
        context, team, legacy = self.context_edges, self.team_edges, self.legacy_memory_edges
        type_of = self.type_of
        for raw in raw_edges:
            if not isinstance(raw, dict):
                continue
            source = _as_id(raw.get("source"))
            target = _as_id(raw.get("target"))
            source_handle = _handle(raw, "sourceHandle", "source_handle")
            target_handle = _handle(raw, "targetHandle", "target_handle")
            source_type = type_of.get(source)
            target_type = type_of.get(target)
            is_team = target_handle is not None and target_handle.startswith(TEAM_HANDLE_PREFIX)
            is_legacy = source_type == MEMORY_NODE_TYPE and target_handle == LEGACY_MEMORY_INPUT_HANDLE
            # The Context rule judges an edge by either end, also when the other is missing: a Context
            # edge to nowhere is no valid Context edge.
            is_context = (
                source_type == CONTEXT_NODE_TYPE
                or source_handle == CONTEXT_OUTPUT_HANDLE
                or target_handle == CONTEXT_INPUT_HANDLE
            )
            edge = _Edge(
                _as_id(raw.get("id")),
                source,
                target,
                source_handle,
                target_handle,
                source_type,
                target_type,
                is_team,
                is_legacy,
                is_context,
            )
            edges.append(edge)
            (dangling if source_type is None or target_type is None else linked).append(edge)
            if is_context:
                context.append(edge)
            if is_team:
                team.append(edge)
            if is_legacy:
                legacy.append(edge)

    def requires_context(self, node_id: str) -> bool:
        spec = self.specs.get(self.type_of.get(node_id))
        return spec is not None and spec.requires_context

    def present(self, *candidates: str) -> str | None:
        """The first candidate that is a node id (the node the editor highlights), else None."""
        for candidate in candidates:
            if candidate in self.type_of:
                return candidate
        return None

    @cached_property
    def context_links(self) -> list[tuple[str, str]]:
        """`(context, agent)` for every well-formed Context edge, in edge order."""
        return [
            (edge.source, edge.target) for edge in self.context_edges if _is_valid_context_edge(self, edge)
        ]


Rule = Callable[[_Graph], list[Issue]]


# --- the rules, in the order their issues are reported -------------------------------------------------


def _duplicate_node_ids(graph: _Graph) -> list[Issue]:
    return [
        _issue(DUPLICATE_NODE_ID, node_id, f"Node id '{node_id}' is used by {count} nodes", count=count)
        for node_id, count in graph.duplicates.items()
    ]


def _dangling_edges(graph: _Graph) -> list[Issue]:
    issues: list[Issue] = []
    for edge in graph.dangling_edges:
        if edge.source_type is None:
            issues.append(
                _issue(
                    DANGLING_EDGE,
                    None,
                    f"Edge source '{edge.source}' does not match any node",
                    edge_id=edge.id,
                    end="source",
                )
            )
        if edge.target_type is None:
            issues.append(
                _issue(
                    DANGLING_EDGE,
                    None,
                    f"Edge target '{edge.target}' does not match any node",
                    edge_id=edge.id,
                    end="target",
                )
            )
    return issues


def _is_valid_context_edge(graph: _Graph, edge: _Edge) -> bool:
    return (
        edge.source_type == CONTEXT_NODE_TYPE
        and edge.source_handle == CONTEXT_OUTPUT_HANDLE
        and edge.target_handle == CONTEXT_INPUT_HANDLE
        and graph.requires_context(edge.target)
    )


def _invalid_context_edges(graph: _Graph) -> list[Issue]:
    return [
        _issue(
            INVALID_CONTEXT_EDGE,
            graph.present(edge.target, edge.source),
            f"Context edges must connect {CONTEXT_NODE_TYPE}.{CONTEXT_OUTPUT_HANDLE} to a node declaring "
            f"requiresContext at {CONTEXT_INPUT_HANDLE}",
            edge_id=edge.id,
        )
        for edge in graph.context_edges
        if not _is_valid_context_edge(graph, edge)
    ]


def _multiple_contexts(graph: _Graph) -> list[Issue]:
    contexts_of_agent: dict[str, set[str]] = {}
    for context, agent in graph.context_links:
        contexts_of_agent.setdefault(agent, set()).add(context)
    return [
        _issue(
            MULTIPLE_CONTEXTS,
            agent,
            "An agent cannot be connected to multiple Context nodes",
            contexts=sorted(contexts),
        )
        for agent, contexts in contexts_of_agent.items()
        if len(contexts) > 1
    ]


def _shared_contexts(graph: _Graph) -> list[Issue]:
    agents_of_context: dict[str, set[str]] = {}
    for context, agent in graph.context_links:
        agents_of_context.setdefault(context, set()).add(agent)
    return [
        _issue(SHARED_CONTEXT, context, "A Context node cannot serve multiple agents", agents=sorted(agents))
        for context, agents in agents_of_context.items()
        if len(agents) > 1
    ]


def _team_edges(graph: _Graph) -> list[Issue]:
    issues: list[Issue] = []
    for edge in graph.team_edges:
        target_spec = graph.specs.get(edge.target_type)
        if edge.target_handle != TEAMMATES_INPUT_HANDLE:
            issues.append(
                _issue(
                    INVALID_TEAM_EDGE,
                    graph.present(edge.target, edge.source),
                    f"Unsupported teammate handle '{edge.target_handle}'; use '{TEAMMATES_INPUT_HANDLE}'",
                    edge_id=edge.id,
                )
            )
        elif target_spec is None or not target_spec.accepts_teammates:
            issues.append(
                _issue(
                    INVALID_TEAM_EDGE,
                    graph.present(edge.target, edge.source),
                    f"The {TEAMMATES_INPUT_HANDLE} handle is only valid on nodes that accept teammates",
                    edge_id=edge.id,
                )
            )
        elif not graph.requires_context(edge.source):
            issues.append(
                _issue(
                    INVALID_TEAM_EDGE,
                    graph.present(edge.source, edge.target),
                    f"Node type '{edge.source_type or ''}' cannot be connected as a teammate",
                    edge_id=edge.id,
                )
            )
    return issues


def _unsupported(graph: _Graph, edge: _Edge, message: str) -> Issue:
    return _issue(
        UNSUPPORTED_CONNECTION,
        graph.present(edge.target, edge.source),
        message,
        edge_id=edge.id,
        handle=edge.target_handle,
    )


def _unsupported_connections(graph: _Graph) -> list[Issue]:
    """Wires the validator would otherwise accept but the runtime does nothing with: an edge into a port
    declared unsupported, an edge into a node without inputs, an output into an input of another role (a
    trigger or an agent into `input-tools`, a Memory into `input-main`), and an agent's output into
    another agent's `input-main` (only the chat trigger starts an agent; delegation is a teammate wire).
    Context, teammate and legacy edges are judged by their own rules; unknown types and ports too."""
    issues: list[Issue] = []
    for edge in graph.linked_edges:
        if edge.context or edge.team or edge.legacy_memory:
            continue
        source_spec = graph.specs.get(edge.source_type)
        target_spec = graph.specs.get(edge.target_type)
        if source_spec is None or target_spec is None:
            continue
        target = target_spec.port(edge.target_handle, INPUT)
        source = source_spec.port(edge.source_handle, OUTPUT)
        if target is None or source is None:
            if edge.target_handle is None and target is None:
                issues.append(_unsupported(graph, edge, f"'{edge.target_type}' has no input to connect to"))
            continue  # otherwise an unknown port, reported by its own rule
        unsupported = next((p for p in (target, source) if not p.supported), None)
        if unsupported is not None:
            owner = edge.target_type if unsupported is target else edge.source_type
            issues.append(
                _unsupported(
                    graph,
                    edge,
                    f"The '{unsupported.label}' port ({unsupported.name}) of '{owner}' has no behaviour yet; "
                    "remove this connection",
                )
            )
            continue
        if source.role != target.role:
            issues.append(
                _unsupported(
                    graph,
                    edge,
                    f"A '{edge.source_type}' output cannot feed the '{target.label}' port ({target.name}) of "
                    f"'{edge.target_type}'",
                )
            )
        elif target.role == MAIN_ROLE and target_spec.requires_context and source_spec.requires_context:
            issues.append(
                _unsupported(
                    graph,
                    edge,
                    "An agent's output does not start another agent; wire the other agent as a teammate "
                    f"({TEAMMATES_INPUT_HANDLE}) of a team lead",
                )
            )
    return issues


def _unknown_node_types(graph: _Graph) -> list[Issue]:
    return [
        _issue(UNKNOWN_NODE_TYPE, node_id, f"Node type '{node_type}' is not installed", node_type=node_type)
        for node_id, node_type, _ in graph.nodes
        if graph.specs.get(node_type) is None
    ]


def _unknown_ports(graph: _Graph) -> list[Issue]:
    """Handles no port of the node's spec declares. The Context, teammate and legacy handles are judged by
    their own rules, not here."""
    issues: list[Issue] = []
    for edge in graph.edges:
        source_type, source_handle = edge.source_type, edge.source_handle
        if source_type is not None and source_handle is not None and source_handle != CONTEXT_OUTPUT_HANDLE:
            spec = graph.specs.get(source_type)
            if spec is not None and source_handle not in spec.output_port_names:
                issues.append(
                    _issue(
                        UNKNOWN_PORT,
                        edge.source,
                        f"Node type '{source_type}' has no output handle '{source_handle}'",
                        edge_id=edge.id,
                        handle=source_handle,
                        node_type=source_type,
                    )
                )
        target_type, target_handle = edge.target_type, edge.target_handle
        if (
            target_type is not None
            and target_handle is not None
            and target_handle != CONTEXT_INPUT_HANDLE
            and not edge.team
            and not edge.legacy_memory
        ):
            spec = graph.specs.get(target_type)
            if spec is not None and target_handle not in spec.input_port_names:
                issues.append(
                    _issue(
                        UNKNOWN_PORT,
                        edge.target,
                        f"Node type '{target_type}' has no input handle '{target_handle}'",
                        edge_id=edge.id,
                        handle=target_handle,
                        node_type=target_type,
                    )
                )
    return issues


def _invalid_params(graph: _Graph) -> list[Issue]:
    issues: list[Issue] = []
    for node_id, node_type, parameters in graph.nodes:
        spec = graph.specs.get(node_type)
        if spec is None:
            continue
        problem = parameter_error(spec, parameters)
        if problem is not None:
            issues.append(
                _issue(INVALID_PARAM, node_id, problem.message, node_type=node_type, path=problem.path)
            )
    return issues


def _cycle(graph: _Graph) -> list[Issue]:
    """Kahn's algorithm over every edge whose two ends exist; one issue naming the nodes it cannot order."""
    indegree = dict.fromkeys(graph.type_of, 0)
    successors: dict[str, list[str]] = {}
    for edge in graph.linked_edges:
        successors.setdefault(edge.source, []).append(edge.target)
        indegree[edge.target] += 1
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
    unresolved = sorted(node_id for node_id, degree in indegree.items() if degree > 0)
    return [_issue(CYCLE, None, f"Cycle detected involving nodes: {unresolved}", nodes=unresolved)]


def _legacy_memory_edges(graph: _Graph) -> list[Issue]:
    return [
        _issue(
            LEGACY_MEMORY_EDGE,
            edge.target,
            f"Legacy {LEGACY_MEMORY_INPUT_HANDLE} continuity must be normalized to a Context edge and an "
            "ordinary Memory tool edge",
            edge_id=edge.id,
        )
        for edge in graph.legacy_memory_edges
    ]


_TOPOLOGY_RULES: tuple[Rule, ...] = (_invalid_context_edges, _multiple_contexts, _shared_contexts)
_ERROR_RULES: tuple[Rule, ...] = (
    _duplicate_node_ids,
    _dangling_edges,
    *_TOPOLOGY_RULES,
    _team_edges,
    _unknown_node_types,
    _unknown_ports,
    _unsupported_connections,
    _invalid_params,
    _cycle,
)
_WARNING_RULES: tuple[Rule, ...] = (_legacy_memory_edges,)


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
    indexed = _Graph(raw_nodes, raw_edges)
    if context_only:
        return {"errors": _run(_TOPOLOGY_RULES, indexed), "warnings": []}
    return {"errors": _run(_ERROR_RULES, indexed), "warnings": _run(_WARNING_RULES, indexed)}


def _run(rules: tuple[Rule, ...], graph: _Graph) -> list[Issue]:
    return [issue for rule in rules for issue in rule(graph)]
