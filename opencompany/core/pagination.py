"""Opaque, signed cursors (django.core.signing) bound to what they page over."""

from __future__ import annotations

from typing import Any

from django.core import signing

from opencompany.core.errors import ApplicationError

INVALID_CURSOR = "invalid_cursor"


def make_cursor(*, salt: str, bound_to: Any, position: Any) -> str:
    """A url-safe token carrying `position`, valid only with the same `salt` and `bound_to`."""
    return signing.dumps({"b": bound_to, "p": position}, salt=f"opencompany.cursor.{salt}", compress=True)


def read_cursor(token: str | None, *, salt: str, bound_to: Any) -> Any:
    """Return the position, or None for no cursor; `invalid_cursor` for tampered or foreign ones."""
    if token in (None, ""):
        return None
    try:
        data = signing.loads(str(token), salt=f"opencompany.cursor.{salt}")
    except signing.BadSignature as exc:
        raise ApplicationError(INVALID_CURSOR, "The cursor is invalid or was tampered with.") from exc
    if not isinstance(data, dict) or data.get("b") != bound_to:
        raise ApplicationError(INVALID_CURSOR, "The cursor belongs to another listing.")
    return data.get("p")
