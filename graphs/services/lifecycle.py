"""Generations of a workflow: deploy admits one (or refreshes the live one's snapshot), reset closes it."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from graphs.hooks import ResetContext, reset_hooks
from graphs.models import Deployment, Workflow
from graphs.selectors import live_deployment
from graphs.services._common import EMPTY_GRAPH, _refuse_undeployable, graph_normalize
from opencompany.core.events import owner_group, publish_on_commit
from opencompany.core.sanitize import sanitize_payload


@transaction.atomic
def workflow_deploy(*, workflow: Workflow, actor: Any = None) -> Deployment:
    """Validate fully and check that the graph can answer a chat message (`graphs.readiness`):
    either refusal is `validation_failed` with every issue in `extra.errors`, and nothing is written.
    Then admit a generation with a sanitized snapshot.

    The first deploy admits generation 1; after a Reset the next deploy admits `generation + 1` (a fresh
    mind). Deploying while a generation is live refreshes that generation's snapshot and keeps its
    conversations: a canvas edit is not a reset.
    """
    locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
    result = graph_normalize(workflow_id=locked.pk, graph=locked.graph or EMPTY_GRAPH)
    _refuse_undeployable(result.graph)
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
