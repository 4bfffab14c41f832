"""Workflow CRUD: create, save, get, import, export, and the agent builder's add-subagent.

Every entry point owns its transaction. Graphs are normalized (one pure pipeline) before they are
validated or stored; the stored graph is always the normalized, sanitized one. A write that removes a
Context writes its archive outbox rows in the same transaction.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from graphs import errors
from graphs.constants import (
    AGENT_NODE_TYPE,
    CONTEXT_INPUT_HANDLE,
    CONTEXT_NODE_TYPE,
    CONTEXT_OUTPUT_HANDLE,
    GRAPH_VERSION,
    LEGACY_PARTIAL_ARTIFACT,
    MAIN_OUTPUT_HANDLE,
    TEAMMATES_INPUT_HANDLE,
)
from graphs.models import ContextArchiveOutbox, LegacyArtifact, Workflow
from graphs.normalize import NormalizationResult
from graphs.selectors import node_in_graph, nodes_of_type
from graphs.services._common import (
    EMPTY_GRAPH,
    GraphWrite,
    _refuse_any_error,
    _refuse_topology,
    _refuse_undeployable,
    clean_workflow_name,
    graph_normalize,
)
from graphs.services.outbox import outbox_drain_on_commit, outbox_drain_or_log, outbox_enqueue
from graphs.specs import get_node_spec
from graphs.validate import validate_workflow
from opencompany.core.errors import ApplicationError
from opencompany.core.events import owner_group, publish_on_commit
from opencompany.core.ids import mint_id
from opencompany.core.sanitize import redact_secret_text, sanitize_export


def _context_ids(graph: dict[str, Any]) -> set[str]:
    return {n["id"] for n in nodes_of_type(graph=graph, node_type=CONTEXT_NODE_TYPE)}


def _record_artifacts(workflow: Workflow, result: NormalizationResult) -> None:
    rows = [
        LegacyArtifact(
            workflow=workflow,
            kind=a.get("kind", LEGACY_PARTIAL_ARTIFACT),
            memory_node_id=a["memory_node_id"],
            agent_node_id=a["agent_node_id"],
            context_node_id=a.get("context_node_id") or "",
            markdown=a.get("markdown") or "",
        )
        for a in result.artifacts
        if a.get("markdown")
    ]
    if rows:
        LegacyArtifact.objects.bulk_create(rows, ignore_conflicts=True)


def _publish_workflow(workflow: Workflow, kind: str) -> None:
    publish_on_commit(
        owner_group(workflow.owner_id),
        "workflow.updated",
        {"workflow_id": workflow.pk, "revision": workflow.revision, "change": kind},
    )


@transaction.atomic
def workflow_create(*, owner: Any, name: str, graph: Any = None) -> Workflow:
    """Create a workflow with a normalized graph (fresh canonical ids); Context errors are refused."""
    return workflow_create_report(owner=owner, name=name, graph=graph).workflow


@transaction.atomic
def workflow_create_report(
    *, owner: Any, name: str, graph: Any = None, full_validation: bool = False, deployable: bool = False
) -> GraphWrite:
    """As `workflow_create`, returning aliases, warnings and the validation report. With
    `full_validation` (import) any validation error refuses with `validation_failed`; with `deployable`
    (the admin) so does a graph deploy would refuse (one that cannot answer a chat message)."""
    name = clean_workflow_name(name)
    workflow_id = mint_id("wf")
    result = graph_normalize(workflow_id=workflow_id, graph=graph if graph is not None else EMPTY_GRAPH)
    report = _refuse_any_error(result.graph) if full_validation else _refuse_topology(result)
    if deployable:
        report = _refuse_undeployable(result.graph)
    workflow = Workflow.objects.create(id=workflow_id, owner=owner, name=name, graph=result.graph)
    _record_artifacts(workflow, result)
    _publish_workflow(workflow, "created")
    return GraphWrite(workflow=workflow, aliases=result.aliases, warnings=result.warnings, validation=report)


@transaction.atomic
def workflow_save(
    *,
    workflow: Workflow,
    graph: Any,
    expected_revision: int,
    name: str | None = None,
    deployable: bool = False,
) -> GraphWrite:
    """Replace the graph (and name) if the stored revision is `expected_revision`.

    Refuses a stale revision (`revision_conflict`, with `extra.current_revision`) and Context-topology
    errors (`invalid_context_topology`), wires that would do nothing (`unsupported_connection`) and a
    bad name (`invalid_request`), writing nothing. With `deployable` (the admin, where nobody saves a
    draft) it also refuses what deploy would (`validation_failed`). A Context node that disappears
    gets an archive outbox row in this same transaction; the drain runs after commit.
    """
    if name is not None:
        name = clean_workflow_name(name)
    result = graph_normalize(workflow_id=workflow.pk, graph=graph)
    report = _refuse_topology(result)
    if deployable:
        report = _refuse_undeployable(result.graph)
    locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
    if locked.revision != expected_revision:
        raise ApplicationError(
            errors.REVISION_CONFLICT,
            "The workflow changed since you loaded it; reload and try again.",
            {"current_revision": locked.revision},
            status=409,
        )
    removed = _context_ids(locked.graph) - _context_ids(result.graph)
    if removed:
        outbox_enqueue(
            workflow_id=locked.pk,
            owner_id=locked.owner_id,
            context_ids=removed,
            reason=ContextArchiveOutbox.Reason.CONTEXT_REMOVED,
        )
        outbox_drain_on_commit(workflow_id=locked.pk)
    fields: dict[str, Any] = {
        "graph": result.graph,
        "revision": F("revision") + 1,
        "updated_at": timezone.now(),
    }
    if name is not None:
        fields["name"] = name
    Workflow.objects.filter(pk=locked.pk).update(**fields)
    locked.refresh_from_db()
    _record_artifacts(locked, result)
    _publish_workflow(locked, "saved")
    return GraphWrite(workflow=locked, aliases=result.aliases, warnings=result.warnings, validation=report)


def workflow_get(*, workflow: Workflow) -> GraphWrite:
    """Drain pending archives of this workflow first (retrying failed ones), then return the
    normalized stored graph and its validation report."""
    if ContextArchiveOutbox.objects.filter(
        workflow_id=workflow.pk, state=ContextArchiveOutbox.State.PENDING
    ).exists():
        outbox_drain_or_log(workflow_id=workflow.pk)
    workflow.refresh_from_db()
    result = graph_normalize(workflow_id=workflow.pk, graph=workflow.graph or EMPTY_GRAPH)
    return GraphWrite(
        workflow=workflow,
        aliases=result.aliases,
        warnings=result.warnings,
        validation=validate_workflow(result.graph),
    )


def workflow_import(*, owner: Any, name: str, graph: Any) -> GraphWrite:
    """Import a graph under fresh ids (a new workflow id makes every node id new); any validation
    error refuses with `validation_failed`. Conversations and memory are never copied."""
    return workflow_create_report(owner=owner, name=name, graph=graph, full_validation=True)


def _exported_node(node: dict[str, Any]) -> dict[str, Any]:
    """The node with only the parameters its spec declares (none for an unknown type)."""
    data = node.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("parameters"), dict):
        return node
    spec = get_node_spec(str(node.get("type")))
    allowed = spec.exported_parameters if spec is not None else frozenset()
    parameters = {k: v for k, v in data["parameters"].items() if k in allowed}
    return {**node, "data": {**data, "parameters": parameters}}


def workflow_export(*, workflow: Workflow) -> dict[str, Any]:
    """The sanitized `{name, graph}`: node parameters limited to those each node spec declares, no
    blocked key, and every secret-shaped value (a prompt's API key included) replaced by `[redacted]`."""
    result = graph_normalize(workflow_id=workflow.pk, graph=workflow.graph or EMPTY_GRAPH)
    graph = {**result.graph, "nodes": [_exported_node(n) for n in result.graph.get("nodes", [])]}
    return {"name": redact_secret_text(workflow.name), "graph": sanitize_export(graph)}


# Farther than any canvas goes: a coordinate beyond it places new nodes from 0 instead.
CANVAS_LIMIT = 1e9


def _coordinate(position: Any, axis: str) -> float:
    """A node's coordinate to place new nodes from: 0 when it is missing, not a finite number, or beyond
    `CANVAS_LIMIT` (an integer of any size is compared exactly, never converted)."""
    value = position.get(axis) if isinstance(position, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if -CANVAS_LIMIT <= value <= CANVAS_LIMIT else 0.0


@transaction.atomic
def workflow_add_subagent(
    *, workflow: Workflow, agent_node_id: str, type: str = AGENT_NODE_TYPE, label: str | None = None
) -> dict[str, Any]:
    """Agent builder: add a teammate of `type` under the team lead `agent_node_id`, a fresh Context
    wired to it, and the teammate edge. Refuses non-leads, lead-typed teammates, and any result that
    would give an agent a second Context."""
    locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
    graph = locked.graph or EMPTY_GRAPH
    lead = node_in_graph(graph=graph, node_id=agent_node_id)
    if lead is None:
        raise ApplicationError("not_found", "No such agent node in this workflow.", status=404)
    lead_spec = get_node_spec(str(lead.get("type")))
    if lead_spec is None or not lead_spec.accepts_teammates:
        raise ApplicationError(errors.NOT_A_TEAM_LEAD, "Only a team lead can add a subagent.")
    spec = get_node_spec(type)
    if spec is None or not spec.requires_context or spec.accepts_teammates:
        raise ApplicationError(
            errors.INVALID_SUBAGENT_TYPE, f"'{type}' cannot be added as a subagent.", {"type": type}
        )
    x, y = (_coordinate(lead.get("position"), axis) for axis in ("x", "y"))
    teammates = sum(
        1
        for e in graph.get("edges", [])
        if e.get("target") == agent_node_id and e.get("targetHandle") == TEAMMATES_INPUT_HANDLE
    )
    new_id, ctx_id = f"__new__:{type}", "__new__:context"
    agent_node = {
        "id": new_id,
        "type": type,
        "position": {"x": x + 360 * teammates, "y": y + 260},
        "data": {"label": label or spec.display_name, "parameters": {}},
    }
    context_node = {
        "id": ctx_id,
        "type": CONTEXT_NODE_TYPE,
        "position": {"x": x + 360 * teammates - 360, "y": y + 260},
        "data": {"label": "Context", "systemManaged": True, "agentNodeId": new_id},
    }
    new_graph = {
        "graphVersion": GRAPH_VERSION,
        "nodes": [*graph.get("nodes", []), agent_node, context_node],
        "edges": [
            *graph.get("edges", []),
            {
                "id": f"ctx-{new_id}",
                "source": ctx_id,
                "sourceHandle": CONTEXT_OUTPUT_HANDLE,
                "target": new_id,
                "targetHandle": CONTEXT_INPUT_HANDLE,
            },
            {
                "id": f"team-{new_id}",
                "source": new_id,
                "sourceHandle": MAIN_OUTPUT_HANDLE,
                "target": agent_node_id,
                "targetHandle": TEAMMATES_INPUT_HANDLE,
            },
        ],
    }
    result = graph_normalize(workflow_id=locked.pk, graph=new_graph)
    _refuse_topology(result)
    Workflow.objects.filter(pk=locked.pk).update(
        graph=result.graph, revision=F("revision") + 1, updated_at=timezone.now()
    )
    locked.refresh_from_db()
    _publish_workflow(locked, "saved")
    return {
        "graph": result.graph,
        "node_id": result.aliases.get(new_id, new_id),
        "context_node_id": result.aliases.get(ctx_id, ctx_id),
        "revision": locked.revision,
    }
