"""Workflow writes: create, save, delete, import, deploy, reset, add_subagent, and the archive outbox.

Every entry point owns its transaction. Graphs are normalized (one pure pipeline) before they are
validated or stored; the stored graph is always the normalized, sanitized one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from graphs import errors
from graphs.hooks import ResetContext, context_archivers, reset_hooks
from graphs.models import ContextArchiveOutbox, Deployment, LegacyArtifact, Workflow
from graphs.normalize import GraphShapeError, NormalizationResult, normalize_workflow_graph
from graphs.selectors import live_deployment, nodes_of_type
from graphs.specs import get_node_spec
from graphs.validate import validate_workflow
from opencompany.core.errors import ApplicationError
from opencompany.core.events import owner_group, publish_on_commit
from opencompany.core.ids import mint_id
from opencompany.core.sanitize import sanitize_payload

logger = logging.getLogger(__name__)

EMPTY_GRAPH: dict[str, Any] = {"graphVersion": 2, "nodes": [], "edges": []}


@dataclass
class GraphWrite:
    """What a save/create/import did: the workflow plus the normalization's report."""

    workflow: Workflow
    aliases: dict[str, str] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    validation: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"errors": [], "warnings": []}
    )


# --- helpers (plain; the entry points own the transactions) ----------------------------------


def _check_size(graph: Any) -> None:
    if not isinstance(graph, dict):
        raise ApplicationError(errors.INVALID_GRAPH, "The graph must be a JSON object with nodes and edges.")
    nodes, edges = graph.get("nodes", []), graph.get("edges", [])
    if not isinstance(nodes, list) or not isinstance(edges, list):
        raise ApplicationError(errors.INVALID_GRAPH, "The graph's nodes and edges must be lists.")
    max_nodes, max_edges = settings.OPENCOMPANY_MAX_GRAPH_NODES, settings.OPENCOMPANY_MAX_GRAPH_EDGES
    if len(nodes) > max_nodes or len(edges) > max_edges:
        raise ApplicationError(
            errors.GRAPH_TOO_LARGE,
            f"A graph may hold at most {max_nodes} nodes and {max_edges} edges.",
            {"nodes": len(nodes), "edges": len(edges), "max_nodes": max_nodes, "max_edges": max_edges},
            status=400,
        )


def graph_normalize(*, workflow_id: str, graph: Any) -> NormalizationResult:
    """Size check, then the normalization pipeline; bad shapes are `invalid_graph` (400)."""
    _check_size(graph)
    try:
        return normalize_workflow_graph(workflow_id, graph)
    except GraphShapeError as exc:
        raise ApplicationError(errors.INVALID_GRAPH, str(exc)) from exc


def _refuse_topology(result: NormalizationResult) -> dict[str, list[dict[str, Any]]]:
    """Full validation report; raises `invalid_context_topology` when a Context rule is broken."""
    report = validate_workflow(result.graph)
    topology = validate_workflow(result.graph, context_only=True)["errors"]
    if topology:
        raise ApplicationError(
            errors.INVALID_CONTEXT_TOPOLOGY,
            "The graph breaks a Context rule: each agent may have at most one Context, and a Context serves one agent.",
            {"errors": topology, "aliases": result.aliases},
        )
    return report


def _refuse_any_error(graph: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    report = validate_workflow(graph)
    if report["errors"]:
        raise ApplicationError(
            errors.VALIDATION_FAILED,
            f"The graph has {len(report['errors'])} validation error(s).",
            {"errors": report["errors"], "warnings": report["warnings"]},
        )
    return report


def _context_ids(graph: dict[str, Any]) -> set[str]:
    return {n["id"] for n in nodes_of_type(graph=graph, node_type="context")}


def _record_artifacts(workflow: Workflow, result: NormalizationResult) -> None:
    rows = [
        LegacyArtifact(
            workflow=workflow,
            kind=a.get("kind", "legacy_partial"),
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


def _enqueue_archives(*, workflow_id: str, owner_id: int, context_ids: set[str], reason: str) -> int:
    rows = [
        ContextArchiveOutbox(workflow_id=workflow_id, owner_id=owner_id, context_node_id=cid, reason=reason)
        for cid in sorted(context_ids)
    ]
    ContextArchiveOutbox.objects.bulk_create(rows)
    return len(rows)


def _drain_after_commit(workflow_id: str) -> None:
    transaction.on_commit(lambda: _safe_drain(workflow_id), robust=True)


def _safe_drain(workflow_id: str) -> None:
    try:
        outbox_drain(workflow_id=workflow_id)
    except Exception:
        logger.exception("outbox drain failed workflow=%s", workflow_id)


def _publish_workflow(workflow: Workflow, kind: str) -> None:
    publish_on_commit(
        owner_group(workflow.owner_id),
        "workflow.updated",
        {"workflow_id": workflow.pk, "revision": workflow.revision, "change": kind},
    )


# --- entry points ---------------------------------------------------------------------------


@transaction.atomic
def workflow_create(*, owner: Any, name: str, graph: Any = None) -> Workflow:
    """Create a workflow with a normalized graph (fresh canonical ids); Context errors are refused."""
    return workflow_create_report(owner=owner, name=name, graph=graph).workflow


@transaction.atomic
def workflow_create_report(
    *, owner: Any, name: str, graph: Any = None, full_validation: bool = False
) -> GraphWrite:
    """As `workflow_create`, returning aliases, warnings and the validation report. With
    `full_validation` (import) any validation error refuses with `validation_failed`."""
    workflow_id = mint_id("wf")
    result = graph_normalize(workflow_id=workflow_id, graph=graph if graph is not None else EMPTY_GRAPH)
    report = _refuse_any_error(result.graph) if full_validation else _refuse_topology(result)
    workflow = Workflow.objects.create(id=workflow_id, owner=owner, name=name, graph=result.graph)
    _record_artifacts(workflow, result)
    _publish_workflow(workflow, "created")
    return GraphWrite(workflow=workflow, aliases=result.aliases, warnings=result.warnings, validation=report)


@transaction.atomic
def workflow_save(
    *, workflow: Workflow, graph: Any, expected_revision: int, name: str | None = None
) -> GraphWrite:
    """Replace the graph (and name) if the stored revision is `expected_revision`.

    Refuses a stale revision (`revision_conflict`, with `extra.current_revision`) and Context-topology
    errors (`invalid_context_topology`), writing nothing. A Context node that disappears gets an
    archive outbox row in this same transaction; the drain runs after commit.
    """
    result = graph_normalize(workflow_id=workflow.pk, graph=graph)
    report = _refuse_topology(result)
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
        _enqueue_archives(
            workflow_id=locked.pk,
            owner_id=locked.owner_id,
            context_ids=removed,
            reason=ContextArchiveOutbox.Reason.CONTEXT_REMOVED,
        )
        _drain_after_commit(locked.pk)
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
        _safe_drain(workflow.pk)
    workflow.refresh_from_db()
    result = graph_normalize(workflow_id=workflow.pk, graph=workflow.graph or EMPTY_GRAPH)
    return GraphWrite(
        workflow=workflow,
        aliases=result.aliases,
        warnings=result.warnings,
        validation=validate_workflow(result.graph),
    )


@transaction.atomic
def workflow_delete(*, workflow: Workflow) -> int:
    """Delete the workflow; one archive outbox row per Context node is written atomically with the
    delete and drained after commit. Returns the number of rows enqueued. Memory items stay."""
    locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
    count = _enqueue_archives(
        workflow_id=locked.pk,
        owner_id=locked.owner_id,
        context_ids=_context_ids(locked.graph),
        reason=ContextArchiveOutbox.Reason.WORKFLOW_DELETED,
    )
    publish_on_commit(owner_group(locked.owner_id), "workflow.deleted", {"workflow_id": locked.pk})
    locked.delete()
    _drain_after_commit(workflow.pk)
    return count


def workflow_import(*, owner: Any, name: str, graph: Any) -> GraphWrite:
    """Import a graph under fresh ids (a new workflow id makes every node id new); any validation
    error refuses with `validation_failed`. Conversations and memory are never copied."""
    return workflow_create_report(owner=owner, name=name, graph=graph, full_validation=True)


def workflow_export(*, workflow: Workflow) -> dict[str, Any]:
    """The sanitized `{name, graph}`: no secrets, no runtime state."""
    result = graph_normalize(workflow_id=workflow.pk, graph=workflow.graph or EMPTY_GRAPH)
    return {"name": workflow.name, "graph": sanitize_payload(result.graph)}


@transaction.atomic
def workflow_deploy(*, workflow: Workflow, actor: Any = None) -> Deployment:
    """Validate fully (`validation_failed`), then admit a generation with a sanitized snapshot.

    The first deploy admits generation 1; after a Reset the next deploy admits `generation + 1` (a fresh
    mind). Deploying while a generation is live refreshes that generation's snapshot and keeps its
    conversations (decision: a canvas edit is not a reset).
    """
    locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
    result = graph_normalize(workflow_id=locked.pk, graph=locked.graph or EMPTY_GRAPH)
    _refuse_any_error(result.graph)
    snapshot = sanitize_payload(result.graph)
    live = live_deployment(workflow=locked)
    if live is not None:
        Deployment.objects.filter(pk=live.pk).update(graph=snapshot)
        live.refresh_from_db()
        deployment = live
    else:
        last = (
            Deployment.objects.filter(workflow=locked)
            .order_by("-generation")
            .values_list("generation", flat=True)
        )
        generation = (last.first() or 0) + 1
        deployment = Deployment.objects.create(workflow=locked, generation=generation, graph=snapshot)
    if result.graph != locked.graph:
        Workflow.objects.filter(pk=locked.pk).update(graph=result.graph)
    publish_on_commit(
        owner_group(locked.owner_id),
        "workflow.deployed",
        {"workflow_id": locked.pk, "generation": deployment.generation, "state": deployment.state},
    )
    return deployment


@transaction.atomic
def workflow_reset(*, workflow: Workflow, actor: Any = None) -> dict[str, Any]:
    """Close the live generation: run every registered reset hook (Context archiving, Memory's
    `reset_policy`, chat) inside this transaction and record what each did. Idempotent when nothing
    is live."""
    Workflow.objects.select_for_update().get(pk=workflow.pk)
    live = (
        Deployment.objects.select_for_update().filter(workflow=workflow, state=Deployment.State.LIVE).first()
    )
    if live is None:
        last = Deployment.objects.filter(workflow=workflow).order_by("-generation").first()
        return {
            "generation": last.generation if last else 0,
            "state": last.state if last else "draft",
            "idempotent": True,
            "hooks": last.reset_report.get("hooks", {}) if last else {},
        }
    context = ResetContext(
        workflow_id=workflow.pk, owner_id=workflow.owner_id, generation=live.generation, graph=live.graph
    )
    outcomes: dict[str, Any] = {}
    for name, hook in sorted(reset_hooks().items()):
        outcomes[name] = hook(context)
    report = {"hooks": outcomes, "actor": getattr(actor, "pk", None)}
    Deployment.objects.filter(pk=live.pk).update(
        state=Deployment.State.RESET, reset_at=timezone.now(), reset_report=report
    )
    publish_on_commit(
        owner_group(workflow.owner_id),
        "workflow.reset",
        {"workflow_id": workflow.pk, "generation": live.generation},
    )
    return {
        "generation": live.generation,
        "state": Deployment.State.RESET,
        "idempotent": False,
        "hooks": outcomes,
    }


@transaction.atomic
def workflow_add_subagent(
    *, workflow: Workflow, agent_node_id: str, type: str = "aiAgent", label: str | None = None
) -> dict[str, Any]:
    """Agent builder: add a teammate of `type` under the team lead `agent_node_id`, a fresh Context
    wired to it, and the teammate edge. Refuses non-leads, lead-typed teammates, and any result that
    would give an agent a second Context."""
    locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
    graph = locked.graph or EMPTY_GRAPH
    lead = next((n for n in graph.get("nodes", []) if n.get("id") == agent_node_id), None)
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
    x = float(lead.get("position", {}).get("x", 0))
    y = float(lead.get("position", {}).get("y", 0))
    teammates = sum(
        1
        for e in graph.get("edges", [])
        if e.get("target") == agent_node_id and e.get("targetHandle") == "input-teammates"
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
        "type": "context",
        "position": {"x": x + 360 * teammates - 360, "y": y + 260},
        "data": {"label": "Context", "systemManaged": True, "agentNodeId": new_id},
    }
    new_graph = {
        "graphVersion": 2,
        "nodes": [*graph.get("nodes", []), agent_node, context_node],
        "edges": [
            *graph.get("edges", []),
            {
                "id": f"ctx-{new_id}",
                "source": ctx_id,
                "sourceHandle": "output-context",
                "target": new_id,
                "targetHandle": "input-context",
            },
            {
                "id": f"team-{new_id}",
                "source": new_id,
                "sourceHandle": "output-main",
                "target": agent_node_id,
                "targetHandle": "input-teammates",
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


def outbox_drain(*, workflow_id: str | None = None, limit: int = 100) -> dict[str, int]:
    """Run the registered archivers for pending outbox rows (one transaction per row). A row whose
    archiver raises stays pending with `attempts` and `last_error` and is retried at the next drain."""
    pending = ContextArchiveOutbox.objects.filter(state=ContextArchiveOutbox.State.PENDING)
    if workflow_id is not None:
        pending = pending.filter(workflow_id=workflow_id)
    completed = failed = 0
    for row_id in list(pending.order_by("created_at", "id").values_list("id", flat=True)[:limit]):
        if _drain_one(row_id):
            completed += 1
        else:
            failed += 1
    return {"completed": completed, "pending": failed}


def _drain_one(row_id: str) -> bool:
    try:
        with transaction.atomic():
            row = (
                ContextArchiveOutbox.objects.select_for_update()
                .filter(pk=row_id, state=ContextArchiveOutbox.State.PENDING)
                .first()
            )
            if row is None:
                return True
            results: dict[str, Any] = {}
            for name, archiver in sorted(context_archivers().items()):
                results[name] = archiver(
                    workflow_id=row.workflow_id,
                    owner_id=row.owner_id,
                    context_node_id=row.context_node_id,
                    reason=row.reason,
                )
            ContextArchiveOutbox.objects.filter(pk=row.pk).update(
                state=ContextArchiveOutbox.State.DONE,
                completed_at=timezone.now(),
                attempts=F("attempts") + 1,
                result=results,
                last_error="",
            )
        return True
    except Exception as exc:
        logger.warning("context archive failed row=%s error=%s", row_id, type(exc).__name__)
        ContextArchiveOutbox.objects.filter(pk=row_id).update(
            attempts=F("attempts") + 1, last_error=f"{type(exc).__name__}: {str(exc)[:500]}"
        )
        return False
