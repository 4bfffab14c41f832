"""Database helpers for the few hot statements written by hand (PostgreSQL only).

Django's psycopg backend binds parameters on the client by default: each call sends the whole
statement as text with every value quoted into it, and the server parses and plans it again. The
per-turn append and the chat send are one statement each and run on every turn, so they use a
cursor that sends the values apart from the text (server-side binding) and, unless
``OPENCOMPANY_DB_PREPARE`` is off, keeps the statement prepared on the connection (parsed once,
planned with the parameters). The cursor still goes through Django's wrapper: query logging,
``execute_wrapper`` hooks and error translation work as for any other query.

Turn ``OPENCOMPANY_DB_PREPARE`` off behind a pooler that cannot keep prepared statements per client
(PgBouncer in transaction mode before 1.21, or without ``max_prepared_statements``).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.backends.utils import CursorWrapper


@cache
def _cursor_class(prepare: bool) -> type:
    from django.db.backends.postgresql.base import ServerBindingCursor

    class HotCursor(ServerBindingCursor):  # type: ignore[misc, valid-type]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs.setdefault("prepare", True if prepare else None)
            kwargs.setdefault("binary", True)
            return super().execute(query, params, **kwargs)  # type: ignore[misc]

    return HotCursor


def hot_cursor() -> CursorWrapper:
    """A Django-wrapped cursor with server-side binding (prepared when the setting allows)."""
    connection.ensure_connection()
    cursor = _cursor_class(bool(settings.OPENCOMPANY_DB_PREPARE))(connection.connection)
    return connection._prepare_cursor(cursor)  # type: ignore[attr-defined, no-any-return]
