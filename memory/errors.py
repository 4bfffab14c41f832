"""Memory's error codes (stable API; tests assert these, not the prose)."""

from __future__ import annotations

from typing import Any

from opencompany.core.errors import INVALID_REQUEST, NOT_FOUND, ApplicationError
from opencompany.core.pagination import INVALID_CURSOR

VERSION_CONFLICT = "version_conflict"
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
MEMORY_QUOTA_EXCEEDED = "memory_quota_exceeded"
CONFIRMATION_REQUIRED = "confirmation_required"

__all__ = [
    "CONFIRMATION_REQUIRED",
    "IDEMPOTENCY_KEY_REUSED",
    "INVALID_CURSOR",
    "INVALID_REQUEST",
    "MEMORY_QUOTA_EXCEEDED",
    "NOT_FOUND",
    "VERSION_CONFLICT",
    "idempotency_key_reused",
    "invalid_field",
    "item_not_found",
    "quota_exceeded",
    "version_conflict",
]


def item_not_found() -> ApplicationError:
    return ApplicationError(NOT_FOUND, "No such memory item.", status=404)


def version_conflict(*, expected: int, current: int) -> ApplicationError:
    return ApplicationError(
        VERSION_CONFLICT,
        f"The memory item changed elsewhere (expected version {expected}, current {current}); get it again.",
        {"expected_version": expected, "current_version": current},
        status=409,
    )


def idempotency_key_reused() -> ApplicationError:
    return ApplicationError(
        IDEMPOTENCY_KEY_REUSED,
        "This operation id was already used for a different request.",
        status=409,
    )


def quota_exceeded(*, limit: int) -> ApplicationError:
    return ApplicationError(
        MEMORY_QUOTA_EXCEEDED,
        f"This memory holds its maximum of {limit} items; forget some first.",
        {"limit": limit},
        status=409,
    )


def invalid_field(field: str, message: str) -> ApplicationError:
    extra: dict[str, Any] = {"fields": {field: [message]}}
    return ApplicationError(
        INVALID_REQUEST, f"Invalid request: check '{field}'. {message}", extra, status=400
    )
