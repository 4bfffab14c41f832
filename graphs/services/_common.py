"""What every workflow write shares: the report type, the limits check, normalization and the refusals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from graphs import errors
from graphs.constants import GRAPH_VERSION, NODE_ID_MAX, WORKFLOW_NAME_MAX
from graphs.limits import GraphLimits, graph_limit_breach
from graphs.models import Workflow
from graphs.normalize import GraphShapeError, NormalizationResult, normalize_workflow_graph
from graphs.readiness import chat_readiness
from graphs.validate import CONTEXT_TOPOLOGY_CODES, UNSUPPORTED_CONNECTION, validate_workflow
from opencompany.core.errors import ApplicationError, invalid

EMPTY_GRAPH: dict[str, Any] = {"graphVersion": GRAPH_VERSION, "nodes": [], "edges": []}

Report = dict[str, list[dict[str, Any]]]


@dataclass
class GraphWrite:
    """What a save/create/import did: the workflow plus the normalization's report."""

    workflow: Workflow
    aliases: dict[str, str] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    validation: Report = field(default_factory=lambda: {"errors": [], "warnings": []})


def clean_workflow_name(name: Any) -> str:
    """A workflow name as stored: a non-blank string of at most `WORKFLOW_NAME_MAX` characters, else
    `invalid_request` naming the field (never cut short)."""
    if not isinstance(name, str) or not name.strip():
        raise invalid("A workflow needs a name.", {"name": ["May not be blank."]})
    if len(name) > WORKFLOW_NAME_MAX:
        raise invalid(
            f"The name is {len(name)} characters long; at most {WORKFLOW_NAME_MAX} are kept.",
            {"name": [f"At most {WORKFLOW_NAME_MAX} characters (this one has {len(name)})."]},
        )
    return name


def _check_size(graph: Any) -> None:
    """Refuse a graph that is not an object of node and edge lists (`invalid_graph`) or that crosses a
    limit (`graph_too_large`, `parameters_too_large`), before any work is spent on it."""
    if not isinstance(graph, dict):
        raise ApplicationError(errors.INVALID_GRAPH, "The graph must be a JSON object with nodes and edges.")
    nodes, edges = graph.get("nodes", []), graph.get("edges", [])
    if not isinstance(nodes, list) or not isinstance(edges, list):
        raise ApplicationError(errors.INVALID_GRAPH, "The graph's nodes and edges must be lists.")
    limits = GraphLimits(
        max_nodes=settings.OPENCOMPANY_MAX_GRAPH_NODES,
        max_edges=settings.OPENCOMPANY_MAX_GRAPH_EDGES,
        # A graph too large to arrive in one request is too large for any other caller as well.
        max_chars=settings.OPENCOMPANY_MAX_BODY_BYTES,
    )
    breach = graph_limit_breach(nodes=nodes, edges=edges, limits=limits)
    if breach is not None:
        raise ApplicationError(breach.code, breach.message, breach.extra, status=400)


def graph_normalize(*, workflow_id: str, graph: Any) -> NormalizationResult:
    """Limits check, then the normalization pipeline; bad shapes are `invalid_graph` (400)."""
    _check_size(graph)
    try:
        result = normalize_workflow_graph(workflow_id, graph)
    except GraphShapeError as exc:
        raise ApplicationError(errors.INVALID_GRAPH, str(exc)) from exc
    for node in result.graph.get("nodes", []):
        node_id = str(node.get("id", ""))
        if len(node_id) > NODE_ID_MAX:
            # The id keys the node's conversation and Memory: refused, never cut short.
            raise ApplicationError(
                errors.INVALID_GRAPH,
                f"A node id may be at most {NODE_ID_MAX} characters; '{node_id[:40]}…' has {len(node_id)} "
                "(a shorter node type or number makes a shorter id).",
                {"max_chars": NODE_ID_MAX, "chars": len(node_id)},
            )
    return result


def _refuse_topology(result: NormalizationResult) -> Report:
    """Full validation report; raises `invalid_context_topology` when a Context rule is broken, else
    `unsupported_connection` when a wire would do nothing at run time."""
    report = validate_workflow(result.graph)
    topology = [issue for issue in report["errors"] if issue["code"] in CONTEXT_TOPOLOGY_CODES]
    if topology:
        raise ApplicationError(
            errors.INVALID_CONTEXT_TOPOLOGY,
            "The graph breaks a Context rule: each agent may have at most one Context, and a Context serves one agent.",
            {"errors": topology, "aliases": result.aliases},
        )
    unsupported = [issue for issue in report["errors"] if issue["code"] == UNSUPPORTED_CONNECTION]
    if unsupported:
        raise ApplicationError(
            errors.UNSUPPORTED_CONNECTION,
            f"The graph has {len(unsupported)} connection(s) that would do nothing when it runs; remove them.",
            {"errors": unsupported, "aliases": result.aliases},
        )
    return report


def _refuse_any_error(graph: dict[str, Any]) -> Report:
    """Full validation report; raises `validation_failed` when it holds any error."""
    report = validate_workflow(graph)
    if report["errors"]:
        raise ApplicationError(
            errors.VALIDATION_FAILED,
            f"The graph has {len(report['errors'])} validation error(s).",
            {"errors": report["errors"], "warnings": report["warnings"]},
        )
    return report


def _issues_sentence(issues: list[dict[str, Any]]) -> str:
    """The first issue's message, and how many more there are."""
    first = str(issues[0].get("message") or issues[0].get("code")).rstrip(".")
    more = len(issues) - 1
    return f"{first} (and {more} more issue{'s' if more != 1 else ''})." if more else f"{first}."


def _refuse_undeployable(graph: dict[str, Any]) -> Report:
    """Full validation report; raises `validation_failed` when it holds any error or when the graph
    cannot answer a chat message (`graphs.readiness`), every issue in `extra.errors`."""
    report = validate_workflow(graph)
    issues = [*report["errors"], *chat_readiness(graph)]
    if issues:
        raise ApplicationError(
            errors.VALIDATION_FAILED,
            f"Not deployable: {_issues_sentence(issues)}",
            {"errors": issues, "warnings": report["warnings"]},
        )
    return report
