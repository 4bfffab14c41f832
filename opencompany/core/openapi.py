"""The OpenAPI schema's error responses: every status an operation can answer, each with the one error
envelope `{code, message, extra}` and the codes that status can carry there.

The statuses and codes come from what the operation is made of, the way `opencompany.core.api`'s
exception handler turns DRF's refusals into `ApplicationError`s: authentication (401/403), input
(400, 413, 415), path parameters (404), a `cursor` parameter (`invalid_cursor`), throttles (429 with
`Retry-After`), and the database (503 `service_unavailable` with `Retry-After`, every operation). What
only the services know (a conflict, a domain refusal) a view declares with
`@api_errors({409: [...]})`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from rest_framework.permissions import AllowAny

from opencompany.core import errors
from opencompany.core.pagination import INVALID_CURSOR

ENVELOPE = "ErrorEnvelope"
_API_ERRORS = "_api_errors"
_API_LINKS = "_api_links"
_API_EXTRAS = "_api_extras"

_DESCRIPTIONS = {
    400: "The request is invalid (`extra.fields` names the fields for `invalid_request`).",
    401: "No valid credentials were presented.",
    403: "The credentials do not allow this (a session's CSRF check failed).",
    404: "Nothing with this id is reachable for the signed-in owner.",
    409: "The request conflicts with the current state; reload and retry.",
    413: "The request body is too large.",
    415: "The request body is not JSON.",
    429: "Too many requests; retry after `Retry-After` seconds.",
    503: "A dependency is unavailable right now; retry later.",
}

type Handler = Callable[..., Any]


def api_errors(codes: Mapping[int, Iterable[str]]) -> Callable[[Handler], Handler]:
    """Declare, on a view method, the codes its services refuse with, by HTTP status; the schema adds
    them to what the operation's shape already implies."""

    def mark(handler: Handler) -> Handler:
        declared: dict[int, set[str]] = getattr(handler, _API_ERRORS, {})
        for status, names in codes.items():
            declared.setdefault(status, set()).update(names)
        setattr(handler, _API_ERRORS, declared)
        return handler

    return mark


def api_error_extra(status: int, properties: Mapping[str, Any]) -> Callable[[Handler], Handler]:
    """Declare, on a view method, the shape of `extra` in its `status` refusals: JSON Schema
    `properties` (e.g. the issues of a `validation_failed`, their codes enumerated)."""

    def mark(handler: Handler) -> Handler:
        declared: dict[int, dict[str, Any]] = getattr(handler, _API_EXTRAS, {})
        declared.setdefault(status, {}).update(properties)
        setattr(handler, _API_EXTRAS, declared)
        return handler

    return mark


def api_errors_of(statuses: Mapping[str, int], *codes: str) -> Callable[[Handler], Handler]:
    """`api_errors` for codes whose statuses an app keeps in one table (`chat.errors.STATUS`)."""
    grouped: dict[int, list[str]] = {}
    for code in codes:
        grouped.setdefault(statuses.get(code, 400), []).append(code)
    return api_errors(grouped)


def api_links(status: int, links: Mapping[str, Mapping[str, str]]) -> Callable[[Handler], Handler]:
    """Declare OpenAPI links on a view method's `status` response: operation id → {parameter: runtime
    expression}, e.g. `{"workflow_retrieve": {"workflow_id": "$response.body#/id"}}`. Clients and
    schemathesis' stateful phase follow them."""

    def mark(handler: Handler) -> Handler:
        declared: dict[int, dict[str, Any]] = getattr(handler, _API_LINKS, {})
        declared.setdefault(status, {}).update(
            {
                operation: {"operationId": operation, "parameters": dict(parameters)}
                for operation, parameters in links.items()
            }
        )
        setattr(handler, _API_LINKS, declared)
        return handler

    return mark


def declared_errors(view: Any, method: str) -> dict[int, set[str]]:
    handler = getattr(view, method.lower(), None)
    return {status: set(names) for status, names in getattr(handler, _API_ERRORS, {}).items()}


def envelope_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The one error body of the API.",
        "properties": {
            "code": {"type": "string", "description": "A stable snake_case code."},
            "message": {"type": "string", "description": "A sentence a person can act on."},
            "extra": {
                "type": "object",
                "additionalProperties": {},
                "description": "Details of the refusal (e.g. `fields`, `current_version`).",
            },
        },
        "required": ["code", "message", "extra"],
    }


class ErrorsAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema with every operation's error responses (see the module docstring)."""

    def _map_basic_serializer(self, serializer: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and getattr(serializer, "refuse_unknown_fields", False):
            schema["additionalProperties"] = False
        least = getattr(serializer, "min_properties", None)
        if direction == "request" and least:
            schema["minProperties"] = least
        return schema

    def _has_auth(self) -> bool:
        permissions = getattr(self.view, "permission_classes", [])
        return not all(issubclass(p, AllowAny) for p in permissions)

    def _throttled(self) -> bool:
        return bool(getattr(self.view, "throttle_classes", None))

    def error_codes(self, operation: dict[str, Any]) -> dict[int, set[str]]:
        """Status → codes this operation can answer with."""
        out: dict[int, set[str]] = {}

        def add(status: int, *codes: str) -> None:
            out.setdefault(status, set()).update(codes)

        parameters = operation.get("parameters", [])
        has_body = "requestBody" in operation
        if self._has_auth():
            add(401, errors.NOT_AUTHENTICATED)
            add(403, errors.PERMISSION_DENIED)
        if has_body or any(p["in"] in ("query", "header") for p in parameters):
            add(400, errors.INVALID_REQUEST)
        if any(p["in"] == "query" and p["name"] == "cursor" for p in parameters):
            add(400, INVALID_CURSOR)
        if has_body:
            add(413, errors.TOO_LARGE)
            add(415, errors.INVALID_REQUEST)
        if any(p["in"] == "path" for p in parameters):
            add(404, errors.NOT_FOUND)
        if self._throttled():
            add(429, errors.THROTTLED)
        for status, codes in declared_errors(self.view, self.method).items():
            add(status, *codes)
        add(503, errors.SERVICE_UNAVAILABLE)  # every operation reads the database
        return out

    def _envelope_ref(self) -> dict[str, Any]:
        component = ResolvedComponent(
            name=ENVELOPE, type=ResolvedComponent.SCHEMA, object=ENVELOPE, schema=envelope_schema()
        )
        self.registry.register_on_missing(component)
        return component.ref

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        envelope = self._envelope_ref()
        responses = operation.setdefault("responses", {})
        handler = getattr(self.view, self.method.lower(), None)
        for status, links in getattr(handler, _API_LINKS, {}).items():
            if str(status) in responses:
                responses[str(status)]["links"] = links
        extras: dict[int, dict[str, Any]] = getattr(handler, _API_EXTRAS, {})
        for status, codes in sorted(self.error_codes(operation).items()):
            properties: dict[str, Any] = {"code": {"type": "string", "enum": sorted(codes)}}
            if status in extras:
                properties["extra"] = {"type": "object", "properties": dict(extras[status])}
            schema = {"allOf": [envelope, {"type": "object", "properties": properties}]}
            response: dict[str, Any] = {
                "description": _DESCRIPTIONS.get(status, "Refused."),
                "content": {"application/json": {"schema": schema}},
            }
            if status in (429, 503):
                response["headers"] = {
                    "Retry-After": {
                        "schema": {"type": "integer", "minimum": 1},
                        "description": "Seconds to wait before the next attempt.",
                    }
                }
            responses.setdefault(str(status), response)
        return operation
