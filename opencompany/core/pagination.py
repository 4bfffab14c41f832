"""Cursor pagination: opaque, signed cursors (django.core.signing) bound to what they page over, the
keyset orders the list endpoints page in, and the one page shape every list answers with:
`{"results": [...], "next_cursor": str | null, "has_more": bool}` (`page_body`, `page_serializer`).

- `NewestFirst`: newest rows first by `(created_at, pk)`; the cursor holds the last row's pair.
- `Ascending`: ascending (or, with `descending=True`, descending) by one integer column (a sequence
  number, a version, an id); the cursor holds the last value returned.

A cursor is refused with `invalid_cursor` when it was tampered with, belongs to another listing (its
`salt` or `bound_to` differ) or holds a position of the wrong form.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core import signing
from django.db.models import Model, Q, QuerySet
from rest_framework import serializers

from opencompany.core.errors import ApplicationError

INVALID_CURSOR = "invalid_cursor"
# Cursors are `django.core.signing` tokens: URL-safe characters, far shorter than this.
CURSOR_MAX = 1024
CURSOR_PATTERN = r"^[A-Za-z0-9_:.\-]+$"


def page_body(results: list[Any], next_cursor: str | None) -> dict[str, Any]:
    """The one list shape: the page's rows, the cursor of the next page, whether there is one."""
    return {"results": results, "next_cursor": next_cursor, "has_more": next_cursor is not None}


def page_serializer(name: str, item: type[serializers.Serializer], **extra: serializers.Field) -> type:
    """The output serializer of a list of `item`s (`extra`: fields a listing adds beside the page)."""
    fields: dict[str, Any] = {
        "results": item(many=True),
        "next_cursor": serializers.CharField(
            allow_null=True, help_text="Pass as `cursor` for the next page; null on the last page."
        ),
        "has_more": serializers.BooleanField(help_text="Whether a next page exists."),
        **extra,
    }
    return type(name, (serializers.Serializer,), fields)


def cursor_field() -> serializers.RegexField:
    return serializers.RegexField(
        CURSOR_PATTERN,
        required=False,
        allow_blank=True,
        max_length=CURSOR_MAX,
        help_text="The `next_cursor` of the previous page.",
        error_messages={"invalid": "Not a cursor this API gave out."},
    )


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


def _malformed() -> ApplicationError:
    return ApplicationError(INVALID_CURSOR, "The cursor is invalid or was tampered with.")


@dataclass(frozen=True)
class Page[M]:
    """One page of rows and the cursor of the next page (None on the last)."""

    rows: list[M]
    next_cursor: str | None


@dataclass(frozen=True)
class NewestFirst:
    """Keyset pages of a queryset, newest first by `created_at`, ties broken by the primary key."""

    salt: str
    bound_to: Any

    def page[M: Model](self, queryset: QuerySet[M], *, cursor: str | None, size: int) -> Page[M]:
        """Up to `size` rows after the cursor's position (from the newest when there is none)."""
        position = read_cursor(cursor, salt=self.salt, bound_to=self.bound_to)
        if position is not None:
            at, pk = self._position(position)
            queryset = queryset.filter(Q(created_at__lt=at) | Q(created_at=at, pk__lt=pk))
        rows = list(queryset.order_by("-created_at", "-pk")[: size + 1])
        if len(rows) <= size:
            return Page(rows, None)
        rows = rows[:size]
        last: Any = rows[-1]
        position = [last.created_at.isoformat(), last.pk]
        return Page(rows, make_cursor(salt=self.salt, bound_to=self.bound_to, position=position))

    @staticmethod
    def _position(position: Any) -> tuple[datetime, int | str]:
        if not isinstance(position, list) or len(position) != 2:
            raise _malformed()
        at, pk = position
        if not isinstance(at, str) or isinstance(pk, bool) or not isinstance(pk, int | str):
            raise _malformed()
        try:
            return datetime.fromisoformat(at), pk
        except ValueError:
            raise _malformed() from None


@dataclass(frozen=True)
class Ascending:
    """Keyset pages in ascending order of the integer column `field` (descending with `descending`)."""

    field: str
    salt: str
    bound_to: Any
    descending: bool = False

    def after(self, cursor: str | None) -> int | None:
        """The last value the previous page returned (None for the first page)."""
        position = read_cursor(cursor, salt=self.salt, bound_to=self.bound_to)
        if position is None:
            return None
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise _malformed()
        return position

    def cursor_after(self, value: int) -> str:
        """The cursor of the page that starts after `value`."""
        return make_cursor(salt=self.salt, bound_to=self.bound_to, position=value)

    def page[M: Model](self, queryset: QuerySet[M], *, cursor: str | None, size: int) -> Page[M]:
        """Up to `size` rows after the cursor's value (from the lowest when there is none)."""
        after = self.after(cursor)
        beyond = "lt" if self.descending else "gt"
        if after is not None:
            queryset = queryset.filter(**{f"{self.field}__{beyond}": after})
        rows = list(queryset.order_by(f"-{self.field}" if self.descending else self.field)[: size + 1])
        if len(rows) <= size:
            return Page(rows, None)
        rows = rows[:size]
        return Page(rows, self.cursor_after(getattr(rows[-1], self.field)))
