"""Logging without content: a database error is written as its class, code and table, never its message.

A database's error message quotes the data it refused (PostgreSQL's "Failing row contains (...)", the
key of a unique violation, the JSON it could not store), and a traceback repeats it. `DatabaseErrorFilter`
sits on the log handlers and replaces the exception of any record caused by a database error with
`database error: IntegrityError sqlstate=23502 table=graphs_workflow`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.db import DatabaseError

_SQLITE_TABLE = re.compile(r"constraint failed: ([A-Za-z_][A-Za-z0-9_]*)\.")


def exception_chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what caused it, outermost first (each once)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def database_error_summary(exc: BaseException) -> str | None:
    """`<Class> sqlstate=<code> table=<table>` when `exc` is (or was caused by) a database error, else
    None. Only names and codes: nothing of the error's message."""
    chain = exception_chain(exc)
    django_error = next((e for e in chain if isinstance(e, DatabaseError)), None)
    if django_error is None:
        return None
    parts = [type(django_error).__name__]
    for error in chain:
        diag: Any = getattr(error, "diag", None)
        sqlstate = getattr(error, "sqlstate", None)
        if sqlstate:
            parts.append(f"sqlstate={sqlstate}")
            for name in ("table_name", "constraint_name"):
                value = getattr(diag, name, None)
                if value:
                    parts.append(f"{name.removesuffix('_name')}={value}")
            break
        sqlite_name = getattr(error, "sqlite_errorname", None)
        if sqlite_name:
            parts.append(f"code={sqlite_name}")
            table = _SQLITE_TABLE.search(str(error))
            if table:
                parts.append(f"table={table.group(1)}")
            break
    return " ".join(parts)


def error_text(exc: BaseException, limit: int = 500) -> str:
    """A short description of `exc` fit to store or log: the database summary for a database error,
    else the class and the start of the message."""
    return database_error_summary(exc) or f"{type(exc).__name__}: {str(exc)[:limit]}"


class DatabaseErrorFilter(logging.Filter):
    """Replace the exception of a record caused by a database error with its summary (see module)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return True
        summary = database_error_summary(exc)
        if summary is not None:
            record.msg = f"{record.getMessage()} (database error: {summary})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True
