"""Thin DRF views for an owner's agent conversations. Every lookup goes through the
owner's workflow: another owner's workflow id answers 404 and changes nothing."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from conversations import errors
from conversations.api import serializers as s
from conversations.selectors import (
    conversation_fidelity,
    conversation_get,
    conversation_list,
    conversation_messages_page,
    provider_calls_for,
    request_messages,
    usage_totals,
)
from conversations.services import conversation_clear
from conversations.types import ConversationKey
from graphs.models import Workflow
from graphs.selectors import agent_node_known, current_generation, workflow_for_owner
from opencompany.core.errors import invalid, not_found
from opencompany.core.openapi import api_errors_of
from opencompany.core.pagination import Ascending, NewestFirst, page_body

# The cursor holds the last seq returned.
_CURSOR_SALT = "conversation-messages.after-seq"


def _key(request: Request, workflow: Workflow, agent_node_id: str, generation: int | None) -> ConversationKey:
    """The conversation key, or `not_found` when `agent_node_id` is no agent of the workflow (an agent
    that never ran has an empty conversation). A conversation stored under the key stays reachable."""
    chosen = generation if generation is not None else current_generation(workflow=workflow)
    if chosen < 1:
        raise invalid("The workflow was never deployed; pass ?generation=.", {"generation": ["required"]})
    key = ConversationKey(workflow_id=workflow.pk, generation=chosen, agent_node_id=agent_node_id)
    known = agent_node_known(workflow=workflow, agent_node_id=agent_node_id, generation=chosen)
    if not known and conversation_get(key=key) is None:
        raise not_found("agent node in this workflow")
    return key


class ConversationListView(APIView):
    @extend_schema(
        parameters=[s.ConversationListQueryInput],
        responses=s.ConversationListOutput,
        operation_id="conversations_list",
        summary="The workflow's conversations (newest first, cursor-paginated)",
    )
    def get(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        query = s.ConversationListQueryInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = {
            k: query.validated_data[k] for k in ("generation", "agent_node_id") if k in query.validated_data
        }
        page = NewestFirst(salt="conversations", bound_to=[workflow.pk, sorted(filters.items())]).page(
            conversation_list(workflow_id=workflow.pk, **filters),
            cursor=query.validated_data.get("cursor"),
            size=query.validated_data["limit"],
        )
        return Response(s.ConversationListOutput(page_body(page.rows, page.next_cursor)).data)


class ConversationDetailView(APIView):
    @extend_schema(
        parameters=[s.ConversationQueryInput],
        responses=s.ConversationPageOutput,
        operation_id="conversation_retrieve",
        summary="One conversation: messages by seq, cursor-paginated",
    )
    def get(self, request: Request, workflow_id: str, agent_node_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        query = s.ConversationQueryInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        key = _key(request, workflow, agent_node_id, query.validated_data.get("generation"))
        pages = Ascending(
            field="seq", salt=_CURSOR_SALT, bound_to=[key.workflow_id, key.generation, key.agent_node_id]
        )
        last_seq = pages.after(query.validated_data.get("cursor"))
        head = conversation_get(key=key)
        rows, more = conversation_messages_page(
            key=key, after_seq=0 if last_seq is None else last_seq + 1, limit=query.validated_data["limit"]
        )
        body: dict[str, Any] = {
            "workflow_id": key.workflow_id,
            "generation": key.generation,
            "agent_node_id": key.agent_node_id,
            "length": head.length if head else 0,
            "bytes": head.bytes if head else 0,
            "revision": head.revision if head else 0,
            "notes": head.notes if head else [],
            "notes_revision": head.notes_revision if head else 0,
            "fidelity": conversation_fidelity(key=key) if head else None,
            **page_body(rows, pages.cursor_after(rows[-1].seq) if more else None),
        }
        return Response(s.ConversationPageOutput(body).data)

    @extend_schema(
        parameters=[s.GenerationQueryInput],
        responses={204: None},
        operation_id="conversation_destroy",
        summary="Clear (archive) a conversation",
    )
    @api_errors_of(errors.STATUS, errors.CONVERSATION_LOAD_FAILED)
    def delete(self, request: Request, workflow_id: str, agent_node_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        query = s.GenerationQueryInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        key = _key(request, workflow, agent_node_id, query.validated_data.get("generation"))
        conversation_clear(key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)


# The cursor holds the last request record id returned (newest first).
_REQUESTS_SALT = "conversation-requests.before-id"


class RequestListView(APIView):
    @extend_schema(
        parameters=[s.ConversationQueryInput],
        responses=s.RequestPageOutput,
        operation_id="conversation_requests_list",
        summary="The conversation's request records (one per provider call), newest first",
    )
    def get(self, request: Request, workflow_id: str, agent_node_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        query = s.ConversationQueryInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        key = _key(request, workflow, agent_node_id, query.validated_data.get("generation"))
        pages = Ascending(
            field="id",
            salt=_REQUESTS_SALT,
            bound_to=[key.workflow_id, key.generation, key.agent_node_id],
            descending=True,
        )
        page = pages.page(
            provider_calls_for(key=key),
            cursor=query.validated_data.get("cursor"),
            size=query.validated_data["limit"],
        )
        return Response(s.RequestPageOutput(page_body(page.rows, page.next_cursor)).data)


class RequestDetailView(APIView):
    @extend_schema(
        parameters=[s.GenerationQueryInput],
        responses=s.RequestDetailOutput,
        operation_id="conversation_request_retrieve",
        summary="What the agent saw on one request: its record and the messages it sent",
    )
    @api_errors_of(errors.STATUS, errors.CONVERSATION_LOAD_FAILED)
    def get(self, request: Request, workflow_id: str, agent_node_id: str, request_id: int) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        query = s.GenerationQueryInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        key = _key(request, workflow, agent_node_id, query.validated_data.get("generation"))
        call = provider_calls_for(key=key).filter(pk=request_id).first()
        if call is None:
            raise not_found("request record")
        data = s.RequestDetailOutput(call).data
        data["messages"] = request_messages(key=key, call=call)
        return Response(data)


class UsageView(APIView):
    @extend_schema(
        parameters=[s.UsageQueryInput],
        operation_id="workflow_usage",
        responses=s.UsageOutput,
        summary="Lifetime usage of the workflow (or one agent): every provider call, all generations",
    )
    def get(self, request: Request, workflow_id: str) -> Response:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        query = s.UsageQueryInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        agent_node_id = query.validated_data.get("agent_node_id")
        totals = usage_totals(workflow_id=workflow.pk, agent_node_id=agent_node_id)
        # An agent with recorded calls stays reachable after it leaves the graph.
        if (
            agent_node_id is not None
            and not totals["calls"]
            and not agent_node_known(
                workflow=workflow,
                agent_node_id=agent_node_id,
                generation=current_generation(workflow=workflow),
            )
        ):
            raise not_found("agent node in this workflow")
        return Response(s.UsageOutput(totals).data)
