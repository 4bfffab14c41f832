"""Memory endpoints under `/api/v1/workflows/<workflow_id>/memory/<memory_node_id>/…`.

Each view resolves the scope through the owner's workflow (another owner's ids answer 404), validates
its input, calls one service or selector and renders the result. Writes are throttled
(`memory_write`) and take an optional `Idempotency-Key` header as the operation id.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from graphs.selectors import workflow_for_owner
from memory import errors, selectors, services
from memory.api import serializers as s
from memory.errors import invalid_field
from memory.fields import OPERATION_ID_MAX
from memory.scope import MemoryScope, memory_scope
from opencompany.core.api import ScopedSettingsThrottle
from opencompany.core.openapi import api_errors, api_links
from opencompany.core.pagination import page_body

# The header's limits as the view checks them (`operation_id`).
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": OPERATION_ID_MAX, "pattern": r"\S"},
    OpenApiParameter.HEADER,
    description="Makes the write idempotent: a replay answers as the first call did.",
)


# The item a remember created, in the Memory it was written to (OpenAPI links).
_ITEM_LINK = {
    "workflow_id": "$request.path.workflow_id",
    "memory_node_id": "$request.path.memory_node_id",
    "memory_id": "$response.body#/memory/id",
}


class MemoryWriteThrottle(ScopedSettingsThrottle):
    """`memory_write` applies to writes only; reads are not throttled here."""

    safe_methods_free = True


class MemoryView(APIView):
    throttle_classes = [MemoryWriteThrottle]
    throttle_scope = "memory_write"

    def scope(self, request: Request, workflow_id: str, memory_node_id: str) -> MemoryScope:
        workflow = workflow_for_owner(owner=request.user, workflow_id=workflow_id)
        return memory_scope(workflow=workflow, memory_node_id=memory_node_id)

    @staticmethod
    def operation_id(request: Request) -> str | None:
        key = request.headers.get("Idempotency-Key")
        if key is None:
            return None
        if not key.strip() or len(key) > OPERATION_ID_MAX:
            raise invalid_field("Idempotency-Key", f"Must be 1 to {OPERATION_ID_MAX} characters.")
        return f"api:{key}"

    @staticmethod
    def actor(request: Request) -> str:
        # The API is where the owner works: an edit here is the owner's, staff account or not.
        return services.owner_actor(request.user)


def _list_values(request: Request, name: str) -> list[str]:
    """Repeated (`?tags=a&tags=b`) or comma-separated (`?tags=a,b`) values."""
    out: list[str] = []
    for raw in request.query_params.getlist(name):
        out.extend(part for part in raw.split(",") if part.strip())
    return out


class MemoryItemsView(MemoryView):
    @extend_schema(
        operation_id="memory_items_list",
        parameters=[
            s.ListQuery,
            OpenApiParameter("categories", str, many=True),
            OpenApiParameter("tags", str, many=True),
        ],
        responses=s.PageOutput,
    )
    def get(self, request: Request, workflow_id: str, memory_node_id: str) -> Response:
        scope = self.scope(request, workflow_id, memory_node_id)
        params = s.ListQuery(data=request.query_params)
        params.is_valid(raise_exception=True)
        query = params.validated_data.get("query", "")
        common = {
            "scope": scope,
            "categories": _list_values(request, "categories"),
            "tags": _list_values(request, "tags"),
            "limit": params.validated_data.get("limit"),
            "cursor": params.validated_data.get("cursor") or None,
        }
        if query.strip():
            page = selectors.memory_recall(query=query, **common)
        else:
            page = selectors.memory_list(**common)
        return Response(
            {
                **page_body(page.items, page.next_cursor),
                "retrieval": page.retrieval,
                "degraded": page.degraded,
            }
        )

    @extend_schema(
        request=s.RememberInput,
        operation_id="memory_items_create",
        responses={201: s.MutationOutput, 200: s.MutationOutput},
        parameters=[IDEMPOTENCY_KEY],
    )
    @api_errors({409: [errors.IDEMPOTENCY_KEY_REUSED, errors.MEMORY_QUOTA_EXCEEDED]})
    @api_links(
        201,
        {
            "memory_item_get": _ITEM_LINK,
            "memory_item_revisions_list": _ITEM_LINK,
            "memory_item_destroy": {**_ITEM_LINK, "expected_version": "$response.body#/memory/version"},
        },
    )
    def post(self, request: Request, workflow_id: str, memory_node_id: str) -> Response:
        scope = self.scope(request, workflow_id, memory_node_id)
        body = s.RememberInput(data=request.data)
        body.is_valid(raise_exception=True)
        result = services.memory_remember(
            scope=scope,
            actor=self.actor(request),
            operation_id=self.operation_id(request),
            **body.validated_data,
        )
        code = status.HTTP_201_CREATED if result.receipt.applied else status.HTTP_200_OK
        return Response(result.as_dict(), status=code)


class MemoryItemView(MemoryView):
    @extend_schema(operation_id="memory_item_get", responses=s.MemoryItemOutput)
    def get(self, request: Request, workflow_id: str, memory_node_id: str, memory_id: str) -> Response:
        scope = self.scope(request, workflow_id, memory_node_id)
        return Response(selectors.memory_get(scope=scope, memory_id=memory_id))

    @extend_schema(
        request=s.UpdateInput,
        operation_id="memory_item_update",
        responses=s.MutationOutput,
        parameters=[IDEMPOTENCY_KEY],
    )
    @api_errors({409: [errors.VERSION_CONFLICT, errors.IDEMPOTENCY_KEY_REUSED]})
    def patch(self, request: Request, workflow_id: str, memory_node_id: str, memory_id: str) -> Response:
        scope = self.scope(request, workflow_id, memory_node_id)
        body = s.UpdateInput(data=request.data)
        body.is_valid(raise_exception=True)
        patch = dict(body.validated_data)
        expected_version = patch.pop("expected_version")
        result = services.memory_update(
            scope=scope,
            memory_id=memory_id,
            expected_version=expected_version,
            patch=patch,
            actor=self.actor(request),
            operation_id=self.operation_id(request),
        )
        return Response(result.as_dict())

    @extend_schema(
        parameters=[s.ForgetQuery, IDEMPOTENCY_KEY],
        operation_id="memory_item_destroy",
        responses={204: None},
    )
    @api_errors({409: [errors.VERSION_CONFLICT, errors.IDEMPOTENCY_KEY_REUSED]})
    def delete(self, request: Request, workflow_id: str, memory_node_id: str, memory_id: str) -> Response:
        scope = self.scope(request, workflow_id, memory_node_id)
        params = s.ForgetQuery(data=request.query_params)
        params.is_valid(raise_exception=True)
        services.memory_forget(
            scope=scope,
            memory_id=memory_id,
            expected_version=params.validated_data["expected_version"],
            actor=self.actor(request),
            operation_id=self.operation_id(request),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemoryRevisionsView(MemoryView):
    @extend_schema(
        parameters=[s.PageQuery], responses=s.RevisionPageOutput, operation_id="memory_item_revisions_list"
    )
    def get(self, request: Request, workflow_id: str, memory_node_id: str, memory_id: str) -> Response:
        scope = self.scope(request, workflow_id, memory_node_id)
        params = s.PageQuery(data=request.query_params)
        params.is_valid(raise_exception=True)
        page = selectors.memory_revisions(
            scope=scope,
            memory_id=memory_id,
            limit=params.validated_data.get("limit"),
            cursor=params.validated_data.get("cursor") or None,
        )
        return Response(page_body(page["results"], page["next_cursor"]))


class MemoryClearView(MemoryView):
    @extend_schema(
        request=s.ClearInput,
        operation_id="memory_clear",
        responses=s.ClearOutput,
        parameters=[IDEMPOTENCY_KEY],
    )
    @api_errors({409: [errors.IDEMPOTENCY_KEY_REUSED]})
    def post(self, request: Request, workflow_id: str, memory_node_id: str) -> Response:
        scope = self.scope(request, workflow_id, memory_node_id)
        body = s.ClearInput(data=request.data)
        body.is_valid(raise_exception=True)
        result = services.memory_clear(
            scope=scope, actor=self.actor(request), operation_id=self.operation_id(request)
        )
        return Response({"cleared": result.cleared, "receipt": result.receipt.as_dict()})
