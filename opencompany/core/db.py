"""Database helpers for the few hot statements written by hand (PostgreSQL only).

Django's psycopg backend binds parameters on the client by default: each call sends the whole
statement as text with every value quoted into it, and the server parses and plans it again. The
per-turn append, the conversation load, the chat send and memory's remember run on every turn, so the
PostgreSQL stores run them through `hot_fetchone` / `hot_fetchall`, which send the values apart from the
text (server-side binding, binary results) and, unless ``OPENCOMPANY_DB_PREPARE`` is off, keep the
statement prepared on the connection (parsed and planned once per connection; kept connections matter,
see ``DB_CONN_MAX_AGE``).

When something observes queries (``DEBUG`` query logging, ``CaptureQueriesContext``, an
``execute_wrapper``), the statement goes through Django's cursor wrapper like any other; otherwise
it skips that layer, whose cost per call is in docs/benchmarks.md. Errors are translated to Django's
exceptions either way.

Turn ``OPENCOMPANY_DB_PREPARE`` off behind a pooler that cannot keep prepared statements per client
(PgBouncer in transaction mode before 1.21, or without ``max_prepared_statements``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection

type Params = Sequence[Any] | dict[str, Any]

# psycopg only prepares on a connection that has a threshold, and Django opens its connections with
# none (prepared statements off, for poolers): without one, ``prepare=True`` is silently ignored. The
# ORM's cursors bind on the client and never prepare, so a threshold no query reaches makes exactly
# the statements that ask for it (ours) prepared.
_ONLY_WHEN_ASKED = 2**62


@cache
def _cursor_class() -> type:
    from django.db.backends.postgresql.base import ServerBindingCursor

    class HotCursor(ServerBindingCursor):  # type: ignore[misc, valid-type]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs.setdefault("prepare", bool(settings.OPENCOMPANY_DB_PREPARE))
            kwargs.setdefault("binary", True)
            return super().execute(query, params, **kwargs)  # type: ignore[misc]

    return HotCursor


def _run[T](sql: str, params: Params, fetch: Callable[[Any], T]) -> T:
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None and settings.OPENCOMPANY_DB_PREPARE:
        raw.prepare_threshold = _ONLY_WHEN_ASKED
    cursor = _cursor_class()(raw)
    if connection.queries_logged or connection.execute_wrappers:
        with connection._prepare_cursor(cursor) as wrapped:  # type: ignore[attr-defined]
            wrapped.execute(sql, params)
            return fetch(wrapped)
    connection.validate_thread_sharing()
    with connection.wrap_database_errors, cursor:
        cursor.execute(sql, params)
        return fetch(cursor)


def hot_fetchone(sql: str, params: Params) -> tuple[Any, ...] | None:
    """Run one hot statement and return its first row (None when it returned none)."""
    return _run(sql, params, lambda cursor: cursor.fetchone())


def hot_fetchall(sql: str, params: Params) -> list[tuple[Any, ...]]:
    """Run one hot statement and return all its rows."""
    return _run(sql, params, lambda cursor: cursor.fetchall())
