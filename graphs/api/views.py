"""Thin DRF views for workflows: validate input → call a service → render output."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from graphs import errors, services
from graphs.api import serializers as s
from graphs.models import Workflow
from graphs.readiness import READINESS_CODES
from graphs.selectors import (
    DRAFT_STATE,
    latest_deployment,
    pending_archives_count,
    workflow_for_owner,
    workflows_of,
    workflows_with_state,
)
from graphs.specs import node_specs_payload
from graphs.validate import ERROR_CODES, validate_workflow
from opencompany.core.openapi import api_error_extra, api_errors, api_links
from opencompany.core.pagination import NewestFirst, page_body

if TYPE_CHECKING:
    from graphs.selectors import WorkflowWithState


# `extra` of a refused deploy: every issue, with the validator's codes and the "can answer" codes.
_DEPLOY_ISSUES = {
    "errors": {
        "type": "array",
        "description": "Every issue: the validator's errors, then what keeps the graph from answering a chat "
        "message (no Chat Trigger, no agent wired to it, an agent whose runtime is not configured here).",
        "items": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "enum": [*ERROR_CODES, *READINESS_CODES]},
                "node_id": {"type": "string", "nullable": True},
                "message": {"type": "string"},
            },
            "required": ["code", "node_id", "message"],
        },
    },
    "warnings": {"type": "array", "items": {"type": "object"}},
}

# What a client does next with a workflow it created (OpenAPI links of the create).
_WORKFLOW_OPERATIONS = ("workflow_retrieve", "workflow_deploy", "workflow_export", "workflow_validate")


def _summary(workflow: Workflow, *, generation: int, state: str) -> dict[str, Any]:
    return {
        "id": workflow.pk,
        "name": workflow.name,
        "revision": workflow.revision,
        "generation": generation,
        "state": state,
        "created_at": workflow.created_at,
        "updated_at": workflow.updated_at,
    }


def _list_summary(workflow: WorkflowWithState) -> dict[str, Any]:
    return _summary(workflow, generation=workflow.current_generation, state=workflow.current_state)


def render_workflow(write: services.GraphWrite) -> dict[str, Any]:
    workflow = write.workflow
    deployment = latest_deployment(workflow=workflow)
    return {
        **_summary(
            workflow,
            generation=deployment.generation if deployment else 0,
            state=deployment.state if deployment else DRAFT_STATE,
        ),
        "graph": workflow.graph,
        "warnings": write.warnings,
        "aliases": write.aliases,
        "validation": write.validation,
        "context_archives_pending": pending_archives_count(workflow_id=workflow.pk),
    }


class NodeSpecsView(APIView):
    @extend_schema(
        responses={200: dict}, summary="The node-spec catalogue with its hash", operation_id="node_specs"
    )
    def get(self, request: Request) -> Response:
        return Response(node_specs_payload())


class WorkflowListView(APIView):
    @extend_schema(
        parameters=[s.WorkflowListQuery],
        responses=s.WorkflowListSerializer,
        operation_id="workflows_list",
        summary="The signed-in owner's workflows (newest first, cursor-paginated)",
    )
    def get(self, request: Request) -> Response:
        query = s.WorkflowListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = NewestFirst(salt="workflows", bound_to=request.user.pk).page(
            workflows_with_state(queryset=workflows_of(owner=request.user)),
            cursor=query.validated_data.get("cursor"),
            size=query.validated_data["limit"],
        )
        return Response(page_body([_list_summary(w) for w in page.rows], page.next_cursor))

    @extend_schema(
        request=s.WorkflowCreateInput,
        responses={201: s.WorkflowSerializer},
        summary="Create a workflow",
        operation_id="workflows_create",
    )
    @api_errors({400: [*errors.GRAPH_INPUT_CODES, *errors.GRAPH_TOPOLOGY_CODES]})
    @api_links(201, {op: {"workflow_id": "$response.body#/id"} for op in _WORKFLOW_OPERATIONS})
    def post(self, request: Request) -> Response:
        data = s.WorkflowCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        write = services.workflow_create_report(
            owner=request.user, name=data.validated_data["name"], graph=data.validated_data.get("graph")
        )
        return Response(render_workflow(write), status=status.HTTP_201_CREATED)


class WorkflowDetailView(APIView):
    @extend_schema(
        responses=s.WorkflowSerializer,
        summary="Get a workflow (drains pending Context archives)",
        operation_id="workflow_retrieve",
    )
    def get(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        return Response(render_workflow(services.workflow_get(workflow=workflow)))

    @extend_schema(
        request=s.WorkflowSaveInput,
        responses=s.WorkflowSerializer,
        summary="Save a workflow's graph",
        operation_id="workflow_update",
    )
    @api_errors(
        {400: [*errors.GRAPH_INPUT_CODES, *errors.GRAPH_TOPOLOGY_CODES], 409: [errors.REVISION_CONFLICT]}
    )
    def put(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        data = s.WorkflowSaveInput(data=request.data)
        data.is_valid(raise_exception=True)
        write = services.workflow_save(
            workflow=workflow,
            graph=data.validated_data["graph"],
            expected_revision=data.validated_data["expected_revision"],
            name=data.validated_data.get("name"),
        )
        return Response(render_workflow(write))

    @extend_schema(
        responses={204: None},
        summary="Delete a workflow (archives its conversations)",
        operation_id="workflow_destroy",
    )
    def delete(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        services.workflow_delete(workflow=workflow)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WorkflowValidateView(APIView):
    @extend_schema(
        request=s.ValidateInput,
        responses=s.ValidationReportSerializer,
        summary="Validate a graph",
        operation_id="workflow_validate",
    )
    @api_errors({400: errors.GRAPH_INPUT_CODES})
    def post(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        data = s.ValidateInput(data=request.data)
        data.is_valid(raise_exception=True)
        graph = data.validated_data.get("graph", workflow.graph)
        result = services.graph_normalize(workflow_id=workflow.pk, graph=graph)
        return Response(validate_workflow(result.graph))


class WorkflowDeployView(APIView):
    @extend_schema(
        request=None,
        responses=s.DeploySerializer,
        summary="Deploy (admits a generation)",
        description="Refused with `validation_failed` (400), writing nothing, when the graph has a "
        "validation error or cannot answer a chat message: no Chat Trigger (`no_chat_trigger`), no agent "
        "wired to it (`no_agent`), or an agent whose provider or program is not configured on this "
        "server (`runtime_unavailable`). `extra.errors` lists every issue with its code and node.",
        operation_id="workflow_deploy",
    )
    @api_errors({400: [*errors.GRAPH_INPUT_CODES, errors.VALIDATION_FAILED]})
    @api_error_extra(400, _DEPLOY_ISSUES)
    def post(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        deployment = services.workflow_deploy(workflow=workflow, actor=request.user)
        return Response(
            {
                "workflow_id": workflow.pk,
                "generation": deployment.generation,
                "state": deployment.state,
                "started_at": deployment.started_at,
            }
        )


class WorkflowResetView(APIView):
    @extend_schema(
        request=None,
        responses=s.ResetSerializer,
        summary="Reset (closes the live generation)",
        operation_id="workflow_reset",
    )
    def post(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        outcome = services.workflow_reset(workflow=workflow, actor=request.user)
        return Response({"workflow_id": workflow.pk, **outcome})


class WorkflowImportView(APIView):
    @extend_schema(
        request=s.ImportInput,
        responses={201: s.WorkflowSerializer},
        summary="Import a graph",
        operation_id="workflow_import",
    )
    @api_errors({400: [*errors.GRAPH_INPUT_CODES, errors.VALIDATION_FAILED]})
    def post(self, request: Request) -> Response:
        data = s.ImportInput(data=request.data)
        data.is_valid(raise_exception=True)
        write = services.workflow_import(
            owner=request.user, name=data.validated_data["name"], graph=data.validated_data["graph"]
        )
        return Response(render_workflow(write), status=status.HTTP_201_CREATED)


class WorkflowExportView(APIView):
    @extend_schema(
        responses=s.ExportSerializer, summary="Export a sanitized graph", operation_id="workflow_export"
    )
    @api_errors({400: errors.GRAPH_INPUT_CODES})
    def get(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        return Response(services.workflow_export(workflow=workflow))


class SubagentView(APIView):
    @extend_schema(
        request=s.SubagentInput,
        responses={201: s.SubagentOutput},
        summary="Add a subagent with its Context",
        operation_id="workflow_subagents_create",
    )
    @api_errors({400: [*errors.GRAPH_INPUT_CODES, errors.NOT_A_TEAM_LEAD]})
    def post(self, request: Request, workflow_id: str, agent_node_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        data = s.SubagentInput(data=request.data)
        data.is_valid(raise_exception=True)
        out = services.workflow_add_subagent(
            workflow=workflow,
            agent_node_id=agent_node_id,
            type=data.validated_data.get("type") or "aiAgent",
            label=data.validated_data.get("label") or None,
        )
        return Response(out, status=status.HTTP_201_CREATED)


class AccountEraseView(APIView):
    @extend_schema(
        request=s.EraseInput,
        responses=s.EraseOutput,
        summary="Erase all of the owner's data",
        operation_id="account_erase",
    )
    def post(self, request: Request) -> Response:
        """Delete every workflow of the signed-in owner and everything kept for them (Memory, its
        history, conversations, archives, chats). `{confirm: true}` is required. The account stays."""
        body = s.EraseInput(data=request.data)
        body.is_valid(raise_exception=True)
        return Response({"erased": services.owner_data_erase(owner=request.user)})
