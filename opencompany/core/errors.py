"""Errors: one exception type and one renderer.

Domain code raises `ApplicationError`; the DRF exception handler, Django's 404/500 handlers, the body
size middleware and the websocket error frame all render it with `render_error`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Codes shared across apps. App-specific codes live in each app's errors.py.
INVALID_REQUEST = "invalid_request"
NOT_FOUND = "not_found"
TOO_LARGE = "too_large"
PERMISSION_DENIED = "permission_denied"
NOT_AUTHENTICATED = "not_authenticated"
METHOD_NOT_ALLOWED = "method_not_allowed"
THROTTLED = "throttled"
INTERNAL_ERROR = "internal_error"
SERVICE_UNAVAILABLE = "service_unavailable"

_DEFAULT_STATUS = {
    INVALID_REQUEST: 400,
    NOT_FOUND: 404,
    TOO_LARGE: 413,
    PERMISSION_DENIED: 403,
    NOT_AUTHENTICATED: 401,
    METHOD_NOT_ALLOWED: 405,
    THROTTLED: 429,
    INTERNAL_ERROR: 500,
    SERVICE_UNAVAILABLE: 503,
}


@dataclass(frozen=True, slots=True)
class Refused:
    """A store's answer when it wrote nothing: `code` is the owning app's error code (or `not_found`),
    `extra` the facts its service words the refusal from. Every app's store answers refusals with it."""

    code: str
    extra: dict[str, Any] = field(default_factory=dict)


class ApplicationError(Exception):
    """A refusal the caller can act on: a stable snake_case `code`, a human `message`, an `extra` dict.

    `status` is the HTTP status the API renders; it defaults from the code (400 otherwise).
    """

    def __init__(
        self,
        code: str,
        message: str,
        extra: dict[str, Any] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra or {}
        self.status = status if status is not None else _DEFAULT_STATUS.get(code, 400)

    def __repr__(self) -> str:
        return f"ApplicationError(code={self.code!r}, status={self.status})"


def render_error(error: ApplicationError) -> dict[str, Any]:
    """The one error body every edge sends: `{"code", "message", "extra"}`."""
    return {"code": error.code, "message": error.message, "extra": error.extra}


def internal_error() -> ApplicationError:
    """What a client sees of an unexpected failure (the failure itself is logged, not shown)."""
    return ApplicationError(INTERNAL_ERROR, "Something went wrong on our side.", status=500)


def not_found(what: str = "object") -> ApplicationError:
    return ApplicationError(NOT_FOUND, f"No such {what}.", status=404)


def invalid(message: str, fields: dict[str, Any] | None = None) -> ApplicationError:
    return ApplicationError(INVALID_REQUEST, message, {"fields": fields} if fields else {}, status=400)
