"""Field limits and normalization shared by the services, the selectors, the tool and the API.

Every refusal is `invalid_request` naming the field. Text and ids pass the input gate (no NUL, no lone
surrogate); versions are bounded by their column.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from memory.errors import invalid_field
from opencompany.core import gate

CONTENT_MAX = 50_000
TITLE_MAX = 500
CATEGORY_MAX = 100
TAGS_MAX_ITEMS = 20
TAG_MAX = 100
PATCH_TAG_MAX = 64
QUERY_MAX = 2_000
CATEGORIES_MAX_ITEMS = 20
LIMIT_MAX = 100
LIMIT_DEFAULT = 20
CURSOR_MAX = 4_096
MEMORY_ID_MAX = 64
OPERATION_ID_MAX = 512
# `agent:` and a run id of at most 72 characters (ACTOR_RE); the column keeps 80.
ACTOR_MAX = 78
ACTOR_COLUMN = 80
ACTOR_RE = re.compile(r"^(agent|owner|staff|system):[^\s]{1,72}$")
PATCH_FIELDS = frozenset({"content", "title", "category", "tags", "expires_at"})

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A label (tag, category) must hold a character that is neither a control character (made a space) nor
# whitespace (trimmed): what the API schema says of each tag (`LABEL_PATTERN`, checked against
# `_one_label` over every character by the tests).
LABEL_PATTERN = r"[^\x00-\x20\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
# `MemoryItem.version`'s column type (the fields module stays free of the models).
VERSION_COLUMN = "PositiveIntegerField"


def _storable(value: str, field: str) -> str:
    message = gate.bad_char_message(value)
    if message is not None:
        raise invalid_field(field, message)
    return value


def clean_content(value: Any, *, field: str = "content") -> str:
    if value is None:
        raise invalid_field(field, "Content may not be null.")
    if not isinstance(value, str):
        raise invalid_field(field, "Must be a string.")
    if not value.strip():
        raise invalid_field(field, "May not be blank.")
    if len(value) > CONTENT_MAX:
        raise invalid_field(field, f"At most {CONTENT_MAX} characters.")
    return _storable(value, field)


def clean_title(value: Any, *, field: str = "title") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_field(field, "Must be a string.")
    if len(value) > TITLE_MAX:
        raise invalid_field(field, f"At most {TITLE_MAX} characters.")
    return _storable(value, field).strip() or None


def _one_label(value: Any, *, field: str, max_len: int) -> str:
    if not isinstance(value, str):
        raise invalid_field(field, "Must be a string.")
    if len(value) > max_len:
        raise invalid_field(field, f"At most {max_len} characters each.")
    label = _CONTROL.sub(" ", _storable(value, field)).strip().lower()
    if not label:
        raise invalid_field(field, "May not be blank.")
    return label


def clean_category(value: Any, *, field: str = "category") -> str | None:
    """Trimmed and lower-cased; blank means no category."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_field(field, "Must be a string.")
    if len(value) > CATEGORY_MAX:
        raise invalid_field(field, f"At most {CATEGORY_MAX} characters.")
    return _CONTROL.sub(" ", _storable(value, field)).strip().lower() or None


def clean_labels(value: Any, *, field: str, max_items: int, max_len: int) -> list[str]:
    """Trim, lower-case, drop duplicates keeping first-seen order; blanks are refused."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise invalid_field(field, "Must be a list of strings.")
    if len(value) > max_items:
        raise invalid_field(field, f"At most {max_items} items.")
    out: list[str] = []
    for raw in value:
        label = _one_label(raw, field=field, max_len=max_len)
        if label not in out:
            out.append(label)
    return out


def clean_tags(value: Any, *, field: str = "tags", max_len: int = TAG_MAX) -> list[str]:
    return clean_labels(value, field=field, max_items=TAGS_MAX_ITEMS, max_len=max_len)


def clean_categories(value: Any, *, field: str = "categories") -> list[str]:
    return clean_labels(value, field=field, max_items=CATEGORIES_MAX_ITEMS, max_len=CATEGORY_MAX)


def tag_index(tags: list[str]) -> str:
    return "".join(f"\x1f{tag}" for tag in tags) + "\x1f" if tags else ""


def clean_expires_at(value: Any, *, field: str = "expires_at") -> datetime | None:
    """An aware UTC datetime from a datetime or an ISO-8601 string; a naive time is read as UTC."""
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed: datetime | None = value
    elif isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:
            parsed = None
    else:
        parsed = None
    if parsed is None:
        raise invalid_field(field, "Must be an ISO-8601 date-time, e.g. 2030-01-31T12:00:00Z.")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def clean_limit(value: Any, *, field: str = "limit") -> int:
    if value is None or value == "":
        return LIMIT_DEFAULT
    if isinstance(value, bool):
        raise invalid_field(field, "Must be an integer.")
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise invalid_field(field, "Must be an integer.") from None
    if not 1 <= limit <= LIMIT_MAX:
        raise invalid_field(field, f"Must be between 1 and {LIMIT_MAX}.")
    return limit


def clean_query(value: Any, *, field: str = "query") -> str:
    if not isinstance(value, str) or not value.strip():
        raise invalid_field(field, "A non-blank query is required.")
    if len(value) > QUERY_MAX:
        raise invalid_field(field, f"At most {QUERY_MAX} characters.")
    return _storable(value, field)


def clean_cursor(value: Any, *, field: str = "cursor") -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or len(value) > CURSOR_MAX:
        raise invalid_field(field, f"Must be a string of at most {CURSOR_MAX} characters.")
    return _storable(value, field)


def clean_memory_id(value: Any, *, field: str = "memory_id") -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MEMORY_ID_MAX:
        raise invalid_field(field, f"Must be a string of 1 to {MEMORY_ID_MAX} characters.")
    return _storable(value, field)


def clean_version(value: Any, *, field: str = "expected_version") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_field(field, "Must be an integer of at least 1.")
    if value > gate.column_range(VERSION_COLUMN)[1]:
        raise invalid_field(field, f"Must be at most {gate.column_range(VERSION_COLUMN)[1]}.")
    return value


def clean_operation_id(value: Any, *, field: str = "operation_id") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > OPERATION_ID_MAX:
        raise invalid_field(field, f"Must be a non-blank string of at most {OPERATION_ID_MAX} characters.")
    return _storable(value, field)


def clean_actor(value: Any) -> str:
    if not isinstance(value, str) or not ACTOR_RE.match(value):
        raise invalid_field("actor", "Must look like agent:<run>, owner:<id>, staff:<id> or system:<what>.")
    return value
