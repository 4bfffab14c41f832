"""Thin DRF views of the owner chat: the same operations as the websocket frames.

Every view reaches the chat through `workflow_for_owner`, so another owner's workflow id answers 404
and changes nothing. Refusals are `ApplicationError`s rendered by the core exception handler.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat import errors, services
from chat.api import serializers as s
from chat.models import ChatRun
from chat.selectors import (
    chat_history,
    chat_of,
    chat_transcript,
    chats_of,
    message_rendered,
    render_chat,
    render_run,
    render_run_snapshot,
)
from graphs.models import Workflow
from graphs.selectors import workflow_for_owner
from opencompany.core.api import ScopedSettingsThrottle
from opencompany.core.errors import not_found
from opencompany.core.openapi import api_errors_of, api_links
from opencompany.core.pagination import NewestFirst, page_body

_TAG = ["chat"]
_MESSAGE_ID = OpenApiParameter("message_id", str, OpenApiParameter.PATH, description="A chat message id.")
_CHAT_ID = OpenApiParameter("chat_id", str, OpenApiParameter.PATH, description="A chat id (from the list).")
_RUN_ID = OpenApiParameter("run_id", str, OpenApiParameter.PATH, description="A chat run id.")


# What admitting a run can be refused with, and what a move on the chat's branches adds.
_ADMISSION = (
    errors.MESSAGE_TOO_LONG,
    errors.NOT_RUNNING,
    errors.IDEMPOTENCY_KEY_REUSED,
    errors.REVISION_CONFLICT,
    errors.RUN_IN_PROGRESS,
    errors.SERVER_RESTARTING,
)
_BRANCHES = (errors.NOT_EDITABLE, errors.OLDER_GENERATION, errors.CANNOT_REWIND, errors.BRANCH_UNAVAILABLE)


def _refuses(*codes: str) -> Any:
    return api_errors_of(errors.STATUS, *codes)


class ChatSendThrottle(ScopedSettingsThrottle):
    """`chat_send`: every request that starts a run (send, edit, retry)."""


def _workflow(request: Request, workflow_id: str) -> Workflow:
    return workflow_for_owner(owner=request.user, workflow_id=workflow_id)


def _admission(admission: services.Admission) -> Response:
    body: dict[str, Any] = {
        "message": message_rendered(message=admission.message),
        "run": render_run(admission.run),
        "created": admission.created,
        "revision": admission.revision,
    }
    return Response(s.AdmissionOutput(body).data, status=status.HTTP_202_ACCEPTED)


class ChatThreadView(APIView):
    @extend_schema(
        tags=_TAG,
        parameters=[s.HistoryQueryInput],
        responses=s.ThreadOutput,
        operation_id="chat_history",
        summary="The chat's active path (newest page), versions, editable ids, revision and live runs",
    )
    def get(self, request: Request, workflow_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        query = s.HistoryQueryInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        history = chat_history(
            workflow=workflow, before=query.validated_data.get("before"), limit=query.validated_data["limit"]
        )
        return Response(s.ThreadOutput(history).data)

    @extend_schema(
        tags=_TAG,
        responses={204: None},
        operation_id="chat_clear",
        summary="New chat: archive the current chat (kept, read-only) and clear the agents' minds",
        description=(
            "The same as `POST …/chat/archive`, kept under this path for existing clients. Nothing is "
            "deleted: the current chat moves to the chat list (`GET …/chats`) with its messages, versions "
            "and ratings; the live generation's agents have their Context archived and emptied (notes "
            "included); Memory is untouched. Delete an archived chat with `POST …/chats/{chat_id}/purge`."
        ),
    )
    def delete(self, request: Request, workflow_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        services.chat_archive(workflow=workflow)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ChatArchiveView(APIView):
    @extend_schema(
        tags=_TAG,
        request=None,
        responses=s.ChatArchiveOutput,
        operation_id="chat_archive",
        summary="New chat: archive the current chat (kept, read-only) and clear the agents' minds",
        description=(
            "Live runs end (`cleared`); the current chat, if it has messages, becomes read-only and stays "
            "in the chat list; the agents of the live generation get a new mind (Context archived and "
            "emptied, notes included). Memory is untouched. The next message starts a fresh chat."
        ),
    )
    def post(self, request: Request, workflow_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        return Response(s.ChatArchiveOutput(services.chat_archive(workflow=workflow)).data)


class ChatListView(APIView):
    @extend_schema(
        tags=_TAG,
        parameters=[s.ChatListQueryInput],
        responses=s.ChatListOutput,
        operation_id="chats_list",
        summary="The workflow's chats, current and archived, newest first",
    )
    def get(self, request: Request, workflow_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        query = s.ChatListQueryInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = NewestFirst(salt="chats", bound_to=workflow.pk).page(
            chats_of(workflow=workflow),
            cursor=query.validated_data.get("cursor"),
            size=query.validated_data["limit"],
        )
        return Response(
            s.ChatListOutput(page_body([render_chat(t) for t in page.rows], page.next_cursor)).data
        )


class ChatDetailView(APIView):
    @extend_schema(
        tags=_TAG,
        parameters=[_CHAT_ID],
        responses=s.ChatTranscriptOutput,
        operation_id="chats_read",
        summary="A chat read-only: its shown path with versions and ratings",
    )
    def get(self, request: Request, workflow_id: str, chat_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        thread = chat_of(workflow=workflow, chat_id=chat_id)
        return Response(s.ChatTranscriptOutput(chat_transcript(thread=thread)).data)

    @extend_schema(
        tags=_TAG,
        parameters=[_CHAT_ID],
        request=s.RenameInput,
        responses=s.ChatOutput,
        operation_id="chats_rename",
        summary="Rename a chat (a blank title goes back to its first message)",
    )
    def patch(self, request: Request, workflow_id: str, chat_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        data = s.RenameInput(data=request.data)
        data.is_valid(raise_exception=True)
        thread = services.chat_rename(workflow=workflow, chat_id=chat_id, title=data.validated_data["title"])
        return Response(s.ChatOutput(render_chat(thread)).data)


class ChatPurgeView(APIView):
    @extend_schema(
        tags=_TAG,
        parameters=[_CHAT_ID],
        request=s.PurgeInput,
        responses=s.PurgeOutput,
        operation_id="chats_purge",
        summary="Delete an archived chat for good (`{confirm: true}`); the current chat is refused",
    )
    @_refuses(errors.CHAT_NOT_ARCHIVED)
    def post(self, request: Request, workflow_id: str, chat_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        data = s.PurgeInput(data=request.data)
        data.is_valid(raise_exception=True)
        result = services.chat_purge(
            workflow=workflow, chat_id=chat_id, confirm=data.validated_data["confirm"]
        )
        return Response(s.PurgeOutput(result).data)


class ChatSendView(APIView):
    throttle_classes = [ChatSendThrottle]
    throttle_scope = "chat_send"

    @extend_schema(
        tags=_TAG,
        request=s.SendInput,
        responses={202: s.AdmissionOutput},
        operation_id="chat_send",
        summary="Send the owner's message; the agent answers in a run",
    )
    @_refuses(*_ADMISSION)
    @api_links(
        202,
        {
            op: {"workflow_id": "$request.path.workflow_id", "run_id": "$response.body#/run/run_id"}
            for op in ("chat_run", "chat_stop")
        },
    )
    def post(self, request: Request, workflow_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        data = s.SendInput(data=request.data)
        data.is_valid(raise_exception=True)
        return _admission(
            services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, **data.validated_data)
        )


class ChatEditView(APIView):
    throttle_classes = [ChatSendThrottle]
    throttle_scope = "chat_send"

    @extend_schema(
        tags=_TAG,
        parameters=[_MESSAGE_ID],
        request=s.EditInput,
        responses={202: s.AdmissionOutput},
        operation_id="chat_edit",
        summary="Add an edited version of an owner message and answer it",
    )
    @_refuses(*_ADMISSION, *_BRANCHES)
    def post(self, request: Request, workflow_id: str, message_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        data = s.EditInput(data=request.data)
        data.is_valid(raise_exception=True)
        return _admission(
            services.chat_edit(workflow=workflow, message_uid=message_id, **data.validated_data)
        )


class ChatRetryView(APIView):
    throttle_classes = [ChatSendThrottle]
    throttle_scope = "chat_send"

    @extend_schema(
        tags=_TAG,
        parameters=[_MESSAGE_ID],
        request=s.RetryInput,
        responses={202: s.AdmissionOutput},
        operation_id="chat_retry",
        summary="Answer the last question again beside the old answer",
    )
    @_refuses(*_ADMISSION, *_BRANCHES)
    def post(self, request: Request, workflow_id: str, message_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        data = s.RetryInput(data=request.data)
        data.is_valid(raise_exception=True)
        return _admission(
            services.chat_retry(workflow=workflow, message_uid=message_id, **data.validated_data)
        )


class ChatFeedbackView(APIView):
    @extend_schema(
        tags=_TAG,
        parameters=[_MESSAGE_ID],
        request=s.FeedbackInput,
        responses=s.FeedbackOutput,
        operation_id="chat_feedback",
        summary="Rate an answer up or down (null takes the rating back)",
    )
    def post(self, request: Request, workflow_id: str, message_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        data = s.FeedbackInput(data=request.data)
        data.is_valid(raise_exception=True)
        result = services.chat_feedback(
            workflow=workflow, message_uid=message_id, value=data.validated_data["value"]
        )
        return Response(s.FeedbackOutput(result).data)


class ChatSwitchView(APIView):
    @extend_schema(
        tags=_TAG,
        request=s.SwitchInput,
        responses=s.SwitchOutput,
        operation_id="chat_switch",
        summary="Show another version of a message (moves the active path; starts no run)",
    )
    @_refuses(errors.NOT_RUNNING, errors.REVISION_CONFLICT, errors.RUN_IN_PROGRESS, *_BRANCHES)
    def post(self, request: Request, workflow_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        data = s.SwitchInput(data=request.data)
        data.is_valid(raise_exception=True)
        result = services.chat_switch(
            workflow=workflow,
            message_uid=data.validated_data["message_id"],
            expected_revision=data.validated_data.get("expected_revision"),
        )
        return Response(s.SwitchOutput(result).data)


class ChatRunView(APIView):
    @extend_schema(
        tags=_TAG,
        parameters=[_RUN_ID],
        responses=s.RunSnapshotOutput,
        operation_id="chat_run",
        summary="A run with its durable draft (text so far, steps, seq)",
    )
    def get(self, request: Request, workflow_id: str, run_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        run = ChatRun.objects.filter(workflow_id=workflow.pk, run_id=run_id).first()
        if run is None:
            raise not_found("run")
        return Response(s.RunSnapshotOutput(render_run_snapshot(run)).data)


class ChatStopView(APIView):
    @extend_schema(
        tags=_TAG,
        parameters=[_RUN_ID],
        request=None,
        responses=s.RunOutput,
        operation_id="chat_stop",
        summary="Stop a run (queued → stopped at once; running → stopping)",
    )
    @_refuses(errors.NOT_STOPPABLE)
    def post(self, request: Request, workflow_id: str, run_id: str) -> Response:
        workflow = _workflow(request, workflow_id)
        return Response(s.RunOutput(render_run(services.chat_stop(workflow=workflow, run_id=run_id))).data)
