"""Reads for workflows. Every API lookup goes through the owner: another owner's id is `not_found`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from django.db.models import OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from graphs.hooks import InventoryLine, inventories
from graphs.models import ContextArchiveOutbox, Deployment, LegacyArtifact, Workflow, WorkflowTransfer
from graphs.specs import get_node_spec
from opencompany.core import gate
from opencompany.core.errors import not_found

DRAFT_STATE = "draft"


class DeploymentState(TypedDict):
    current_generation: int
    current_state: str


if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    # A workflow read through `workflows_with_state` (a typing name only).
    WorkflowWithState = WithAnnotations[Workflow, DeploymentState]


def workflows_of(*, owner: Any) -> QuerySet[Workflow]:
    return Workflow.objects.filter(owner=owner)


def workflows_with_state(*, queryset: QuerySet[Workflow]) -> QuerySet[WorkflowWithState]:
    """`queryset` with each workflow's `current_generation` (0 when never deployed) and `current_state`
    (`draft`, `live` or `reset`) taken from its latest deployment, in the same query."""
    latest = Deployment.objects.filter(workflow=OuterRef("pk")).order_by("-generation")
    return queryset.annotate(
        current_generation=Coalesce(Subquery(latest.values("generation")[:1]), Value(0)),
        current_state=Coalesce(Subquery(latest.values("state")[:1]), Value(DRAFT_STATE)),
    )


def workflow_for_owner(*, owner: Any, workflow_id: str) -> Workflow:
    """The owner's workflow, or `not_found` (404) — the same answer for a missing and a foreign id."""
    if owner is None or not getattr(owner, "is_authenticated", False):
        raise not_found("workflow")
    gate.identifier(workflow_id, field="workflow_id")
    workflow = Workflow.objects.filter(owner=owner, pk=str(workflow_id)[:40]).first()
    if workflow is None:
        raise not_found("workflow")
    return workflow


def live_deployment(*, workflow: Workflow | str) -> Deployment | None:
    workflow_id = workflow if isinstance(workflow, str) else workflow.pk
    return Deployment.objects.filter(workflow_id=workflow_id, state=Deployment.State.LIVE).first()


def latest_deployment(*, workflow: Workflow | str) -> Deployment | None:
    workflow_id = workflow if isinstance(workflow, str) else workflow.pk
    return Deployment.objects.filter(workflow_id=workflow_id).order_by("-generation").first()


def current_generation(*, workflow: Workflow | str) -> int:
    """The live generation, else the last closed one, else 0 (never deployed)."""
    deployment = latest_deployment(workflow=workflow)
    return deployment.generation if deployment else 0


def workflow_state(*, workflow: Workflow) -> str:
    """`draft` (never deployed), `live` or `reset`."""
    deployment = latest_deployment(workflow=workflow)
    return deployment.state if deployment else DRAFT_STATE


def nodes_of_type(*, graph: dict[str, Any], node_type: str) -> list[dict[str, Any]]:
    return [n for n in graph.get("nodes", []) if isinstance(n, dict) and n.get("type") == node_type]


def node_in_graph(*, graph: dict[str, Any], node_id: str) -> dict[str, Any] | None:
    for node in graph.get("nodes", []):
        if isinstance(node, dict) and node.get("id") == node_id:
            return node
    return None


def _is_agent_node(graph: Any, node_id: str) -> bool:
    node = node_in_graph(graph=graph, node_id=node_id) if isinstance(graph, dict) else None
    spec = get_node_spec(str(node.get("type"))) if node is not None else None
    return spec is not None and spec.requires_context


def agent_node_known(*, workflow: Workflow, agent_node_id: str, generation: int) -> bool:
    """Whether `agent_node_id` is an agent (a node whose type requires a Context) of the workflow's
    saved graph or of the graph deployed as `generation`: an agent removed since keeps its old
    conversations reachable."""
    if _is_agent_node(workflow.graph, agent_node_id):
        return True
    deployed = (
        Deployment.objects.filter(workflow=workflow, generation=generation)
        .values_list("graph", flat=True)
        .first()
    )
    return _is_agent_node(deployed, agent_node_id)


def pending_archives_count(*, workflow_id: str) -> int:
    return ContextArchiveOutbox.objects.filter(
        workflow_id=workflow_id, state=ContextArchiveOutbox.State.PENDING
    ).count()


# The order the apps' lines are shown in; an app not named here comes after, by name.
_INVENTORY_RANK = {app: rank for rank, app in enumerate(("chat", "memory", "conversations", "graphs"))}


def _graphs_inventory(*, owner_id: int, workflow_ids: list[str]) -> list[InventoryLine]:
    ids = list(workflow_ids)
    return [
        InventoryLine(
            "graphs",
            "deployments",
            "Generations (deployments)",
            Deployment.objects.filter(workflow_id__in=ids).count(),
        ),
        InventoryLine(
            "graphs",
            "legacy_artifacts",
            "Recovered legacy memory notes",
            LegacyArtifact.objects.filter(workflow_id__in=ids).count(),
        ),
        InventoryLine(
            "graphs",
            "archive_outbox",
            "Context archive outbox entries",
            ContextArchiveOutbox.objects.filter(owner_id=owner_id, workflow_id__in=ids).count(),
        ),
    ]


def workflow_inventory(*, owner_id: int, workflow_ids: list[str]) -> list[InventoryLine]:
    """Everything kept for these workflows of `owner_id`, counted per kind: what a transfer moves and
    what a delete erases (chats, Memory, Context and its archives, generations). Every registered app
    inventory (`graphs.hooks`) plus the graphs app's own rows, in a fixed order; kinds with no rows
    are listed too (a count of 0 says there is none)."""
    lines = {"graphs": _graphs_inventory(owner_id=owner_id, workflow_ids=workflow_ids)}
    for name, inventory in inventories().items():
        lines[name] = inventory(owner_id=owner_id, workflow_ids=list(workflow_ids))
    order = sorted(lines, key=lambda app: (_INVENTORY_RANK.get(app, len(_INVENTORY_RANK)), app))
    return [line for app in order for line in lines[app]]


def transfers_away(*, workflow_id: str, user: Any) -> WorkflowTransfer | None:
    """The latest transfer that took `workflow_id` away from `user`, when they no longer own it
    (None otherwise): what their chat page says instead of "not found"."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    if Workflow.objects.filter(pk=str(workflow_id)[:40], owner=user).exists():
        return None
    return WorkflowTransfer.objects.filter(workflow_id=str(workflow_id)[:40], from_owner=user).first()
