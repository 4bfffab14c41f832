"""The owner's pages: sign-in (django.contrib.auth), the workflow list and the chat page.

Pages only: every operation the page performs goes through the websocket (docs/chat-protocol.md)
or the DRF API, called by the ES modules under `chat/static/chat/`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Max
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import ensure_csrf_cookie

from graphs.models import Deployment, Workflow
from graphs.selectors import live_deployment, workflow_for_owner, workflows_of, workflows_with_state
from graphs.wiring import chat_agent, has_context, node_parameters, wired_tools
from memory.tools import TOOL_NAME as MEMORY_TOOL_NAME
from opencompany.core.errors import ApplicationError

if TYPE_CHECKING:
    from graphs.selectors import WorkflowWithState

DEFAULT_CONTEXT_WINDOW = 128_000


def _owned(request: HttpRequest, workflow_id: str) -> Workflow:
    try:
        return workflow_for_owner(owner=request.user, workflow_id=workflow_id)
    except ApplicationError as exc:
        raise Http404("No such workflow.") from exc


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
    workflow = _owned(request, workflow_id)
    deployment = live_deployment(workflow=workflow)
    wiring = _wiring(deployment)
    context = {
        "workflow": workflow,
        "generation": deployment.generation if deployment else 0,
        "wiring": wiring,
    }
    return render(request, "chat/chat.html", context)
