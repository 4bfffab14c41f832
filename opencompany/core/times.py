"""The API's one timestamp format: RFC 3339 in UTC with the `Z` offset (as DRF's DateTimeField writes
it), for values the views render themselves and for the websocket frames."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def rfc3339_or_none(value: datetime | None) -> str | None:
    return rfc3339(value) if value is not None else None
