"""The owner's pages: sign-in (django.contrib.auth), the workflow list and the chat page.

Pages only: every operation the page performs goes through the websocket (docs/chat-protocol.md)
or the DRF API, called by the ES modules under `chat/static/chat/`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import ensure_csrf_cookie

from graphs.models import Deployment
from graphs.readiness import chat_readiness
from graphs.selectors import (
    live_deployment,
    transfers_away,
    workflow_for_owner,
    workflows_of,
    workflows_with_state,
)
from graphs.wiring import chat_agent, has_context, node_parameters, wired_tools
from memory.tools import TOOL_NAME as MEMORY_TOOL_NAME
from opencompany.core.errors import ApplicationError

if TYPE_CHECKING:
    from graphs.selectors import WorkflowWithState

DEFAULT_CONTEXT_WINDOW = 128_000


NOT_DEPLOYED = "This workflow is not deployed, so nobody is listening."


def _unavailable(request: HttpRequest, workflow_id: str) -> HttpResponse:
    """The page for a workflow this owner cannot open: a 404 that says the workflow was transferred
    away from them when it was, else that there is none."""
    transfer = transfers_away(workflow_id=workflow_id, user=request.user)
    return render(request, "chat/unavailable.html", {"transfer": transfer}, status=404)


def cannot_answer(deployment: Deployment | None) -> str:
    """Why the chat cannot answer now (the header and the banner say it), or "" when it can: not
    deployed, or a live graph that cannot answer (`graphs.readiness`; e.g. its provider lost its key)."""
    if deployment is None:
        return NOT_DEPLOYED
    issues = chat_readiness(deployment.graph or {})
    return " ".join(str(issue["message"]) for issue in issues)


def _wiring(deployment: Deployment | None) -> dict[str, Any]:
    """The answering agent, its Memory node, Context window and provider in the live graph (empty when
    none)."""
    graph = (deployment.graph if deployment else None) or {}
    agent = chat_agent(graph) if graph else None
    if agent is None:
        return {
            "agent": "",
            "memory": "",
            "window": DEFAULT_CONTEXT_WINDOW,
            "has_context": False,
            "provider": "",
        }
    params = node_parameters(graph, node_id=agent)
    memory = next((t.node_id for t in wired_tools(graph, agent=agent) if t.tool_name == MEMORY_TOOL_NAME), "")
    return {
        "agent": agent,
        "memory": memory,
        "window": int(params.get("context_window") or DEFAULT_CONTEXT_WINDOW),
        "has_context": has_context(graph, agent=agent),
        # The empty chat tells what the offline demo model understands.
        "provider": str(params.get("provider") or settings.OPENCOMPANY_DEFAULT_PROVIDER),
    }


@login_required
@ensure_csrf_cookie
def workflow_list(request: HttpRequest) -> HttpResponse:
    """The owner's workflows; an owner with exactly one lands straight on its chat."""
    workflows: list[WorkflowWithState] = list(
        workflows_with_state(queryset=workflows_of(owner=request.user))
        .annotate(last_message=Max("chat_thread__messages__created_at"))
        .order_by("-updated_at", "id")
    )
    if len(workflows) == 1 and request.GET.get("all") != "1":
        return redirect("chat:chat", workflow_id=workflows[0].pk)
    rows = [
        {
            "workflow": workflow,
            "generation": workflow.current_generation,
            "state": workflow.current_state,
            "activity": max(filter(None, [workflow.updated_at, workflow.last_message])),  # type: ignore[attr-defined]
        }
        for workflow in workflows
    ]
    return render(request, "chat/workflows.html", {"rows": rows})


@login_required
@ensure_csrf_cookie
def chat_page(request: HttpRequest, workflow_id: str) -> HttpResponse:
    try:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
    except ApplicationError:
        return _unavailable(request, workflow_id)
    deployment = live_deployment(workflow=workflow)
    wiring = _wiring(deployment)
    context = {
        "workflow": workflow,
        "generation": deployment.generation if deployment else 0,
        "wiring": wiring,
        "cannot_answer": cannot_answer(deployment),
    }
    return render(request, "chat/chat.html", context)
