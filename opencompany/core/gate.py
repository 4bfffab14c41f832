"""The input gate: what every edge (API, websocket, tools, admin) checks before text, ids, integers or
JSON reach a parser, a query or a column.

- Text and ids: no NUL and no lone surrogate (neither can be stored in PostgreSQL text or jsonb, nor
  encoded to UTF-8), refused with `invalid_request` naming the field.
- Integers: within the range of the database column they are compared with or written to, taken from
  Django's portable table of column ranges, so both databases answer alike.
- JSON: nesting is bounded (`MAX_JSON_DEPTH`) and measured on the raw text before the parser recurses,
  and every string of a parsed document (keys included) passes the text check.

Refusals are `ApplicationError`s whose `extra.fields` names the field (a dotted path inside a document).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import Field

from opencompany.core.errors import ApplicationError, invalid

MAX_JSON_DEPTH = 64

NUL_MESSAGE = "Null characters are not allowed."
SURROGATE_MESSAGE = "Lone surrogate characters are not allowed."

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
# What can put a NUL or a lone surrogate into a parsed string: its JSON escape, or the raw character.
_BAD_IN_JSON = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})|[\x00\ud800-\udfff]")
# A JSON string (consumed whole, possessively, so a long one costs one pass) or one bracket; a lone
# quote is an unterminated string, where counting stops and the parser reports the error.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]|"', re.DOTALL)
_OPENERS = frozenset("[{")


def bad_char_message(value: str) -> str | None:
    """Why `value` cannot be stored, or None when it can."""
    found = _BAD_CHAR.search(value)
    if found is None:
        return None
    return NUL_MESSAGE if found.group() == "\x00" else SURROGATE_MESSAGE


def reason(error: ApplicationError) -> str:
    """The first field message of a gate refusal (its message when it names no field)."""
    fields = error.extra.get("fields") or {}
    for messages in fields.values():
        return str(messages[0])
    return error.message


def describe(error: ApplicationError) -> str:
    """A gate refusal in one line, `field: reason` (for a reader that is not an API client: a model
    reading a tool result)."""
    fields = error.extra.get("fields") or {}
    for name, messages in fields.items():
        return f"{name}: {messages[0]}"
    return error.message


def _refuse(field: str, message: str) -> ApplicationError:
    return invalid(f"Invalid request: check '{field}'.", {field: [message]})


def text(value: Any, *, field: str, max_chars: int | None = None, allow_blank: bool = True) -> str:
    """`value` when it is a string free of NUL and lone surrogates (and within `max_chars`)."""
    if not isinstance(value, str):
        raise _refuse(field, "Must be a string.")
    if not allow_blank and not value.strip():
        raise _refuse(field, "May not be blank.")
    if max_chars is not None and len(value) > max_chars:
        raise _refuse(field, f"At most {max_chars} characters.")
    message = bad_char_message(value)
    if message is not None:
        raise _refuse(field, message)
    return value


def optional_text(value: Any, *, field: str, max_chars: int | None = None) -> str | None:
    return None if value is None else text(value, field=field, max_chars=max_chars)


def identifier(value: Any, *, field: str, max_chars: int | None = None) -> str:
    """An id as a client sends it: a non-empty string (of at most `max_chars`), free of NUL and lone
    surrogates. Whether it names anything is for the lookup to say (`not_found`)."""
    if not isinstance(value, str) or not value:
        raise _refuse(field, "Must be a non-empty string.")
    return text(value, field=field, max_chars=max_chars)


def column_range(column: Field[Any, Any] | str) -> tuple[int, int]:
    """The (min, max) an integer column holds on every supported database."""
    internal_type = column if isinstance(column, str) else column.get_internal_type()
    low, high = BaseDatabaseOperations.integer_field_ranges[internal_type]
    return int(low), int(high)


def integer(value: Any, *, field: str, column: Field[Any, Any] | str, min_value: int | None = None) -> int:
    """A JSON integer (not a bool, a float or a string) within `column`'s range and `min_value`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(field, "Must be an integer.")
    low, high = column_range(column)
    if min_value is not None:
        low = max(low, min_value)
    if not low <= value <= high:
        raise _refuse(field, f"Must be between {low} and {high}.")
    return value


def optional_integer(
    value: Any, *, field: str, column: Field[Any, Any] | str, min_value: int | None = None
) -> int | None:
    return None if value is None else integer(value, field=field, column=column, min_value=min_value)


# --- JSON ----------------------------------------------------------------------------------------


def _too_deep(field: str, max_depth: int) -> ApplicationError:
    return ApplicationError(
        "invalid_request",
        f"Invalid request: '{field}' nests deeper than {max_depth} levels.",
        {"fields": {field: [f"Nested deeper than {max_depth} levels."]}, "max_depth": max_depth},
        status=400,
    )


def check_raw_depth(raw: str, *, max_depth: int = MAX_JSON_DEPTH, field: str = "body") -> None:
    """Refuse JSON text whose arrays and objects nest deeper than `max_depth`, before any parser sees
    it. Brackets inside strings do not count. The field named is the top-level key holding the deep
    value (`field` when the document itself is not an object)."""
    if raw.count("[") + raw.count("{") <= max_depth:
        return  # cannot nest deeper than it has brackets
    depth = 0
    top_is_object = False
    last_top_string = ""
    for match in _JSON_TOKEN.finditer(raw):
        token = match.group()
        if token[0] == '"':
            if len(token) == 1:
                return  # unterminated string: not JSON; the parser says so
            if depth == 1 and top_is_object:
                last_top_string = token
            continue
        if token in _OPENERS:
            if depth == 0:
                top_is_object = token == "{"
            depth += 1
            if depth > max_depth:
                raise _too_deep(_key_name(last_top_string) if top_is_object else field, max_depth)
        else:
            depth -= 1


def _key_name(token: str) -> str:
    try:
        name = json.loads(token)
    except ValueError:
        return "body"
    return name if isinstance(name, str) and name and bad_char_message(name) is None else "body"


def check_depth(value: Any, *, max_depth: int = MAX_JSON_DEPTH, field: str = "value") -> None:
    """Refuse a parsed value whose lists and dicts nest deeper than `max_depth` (iteratively: a value
    built in Python, e.g. by a provider SDK, may be deeper than any recursion could follow)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > max_depth:
            raise _too_deep(field, max_depth)
        stack.extend((child, depth + 1) for child in children)


def _walk_strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, string) for every string in a parsed document, keys included; iterative."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            for key, child in item.items():
                inner = f"{where}.{key}" if where else str(key)
                if isinstance(key, str):
                    yield inner, key
                stack.append((child, inner))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}.{i}" if where else str(i)) for i, child in enumerate(item))


def check_strings(value: Any, *, field: str = "", whole: str = "body") -> None:
    """Refuse a parsed document holding a NUL or a lone surrogate in any string or key, naming the
    dotted path of the first one found (below `field`; `whole` when the path is empty)."""
    for where, string in _walk_strings(value, field):
        message = bad_char_message(string)
        if message is not None:
            raise _refuse(_clean_path(where) or whole, message)


def _clean_path(path: str) -> str:
    """The longest leading part of a dotted path that can be quoted back (a key holding a refused
    character is named by its parent)."""
    kept: list[str] = []
    for part in path.split("."):
        if bad_char_message(part) is not None:
            break
        kept.append(part)
    return ".".join(kept)


def check_document(value: Any, *, field: str = "", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A parsed JSON value passed through the gate: bounded depth, storable strings."""
    check_depth(value, max_depth=max_depth, field=field or "body")
    check_strings(value, field=field)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse(raw: str) -> Any:
    """`json.loads` without the NaN and Infinity Python accepts (no column can hold them)."""
    return json.loads(raw, parse_constant=_no_constant)


def loads(raw: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, field: str = "body") -> Any:
    """Parse JSON text through the gate: depth first (on the text), then the parser, then the strings.
    Malformed JSON is `invalid_request` too."""
    if isinstance(raw, bytes | bytearray):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise invalid("The body is not valid UTF-8.", {field: ["Not valid UTF-8."]}) from exc
    check_raw_depth(raw, max_depth=max_depth, field=field)
    try:
        value = parse(raw)
    except ValueError as exc:
        raise invalid(f"Malformed JSON: {exc}", {field: ["Not valid JSON."]}) from exc
    if _BAD_IN_JSON.search(raw):  # only then can a parsed string hold what the gate refuses
        check_strings(value, whole=field)
    return value
