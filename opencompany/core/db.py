"""Database helpers for the few hot statements written by hand (PostgreSQL only).

Django's psycopg backend binds parameters on the client by default: each call sends the whole
statement as text with every value quoted into it, and the server parses and plans it again; the ORM
compiles it again too. The per-turn append, the conversation load, the provider call record, the chat
send, a run's locks and draft, and memory's remember run on every turn, so the PostgreSQL stores run
them through `hot_fetchone` / `hot_fetchall`, which send the values apart from the
text (server-side binding, binary results) and, unless ``OPENCOMPANY_DB_PREPARE`` is off, keep the
statement prepared on the connection (parsed and planned once per connection; kept connections matter,
see ``DB_CONN_MAX_AGE``). The row helpers below build such a statement's INSERT from the model's
fields, so a hand-written statement never restates a column's default.

When something observes queries (``DEBUG`` query logging, ``CaptureQueriesContext``, an
``execute_wrapper``), the statement goes through Django's cursor wrapper like any other; otherwise
it skips that layer, whose cost per call is in docs/decisions.md. Errors are translated to Django's
exceptions either way.

A prepared statement is planned for its values for its first five runs before PostgreSQL settles on
a plan for any values; recall's statements cost more to plan than to run, and a connection runs many
shapes of them, so `configure_session` has a new connection use the generic plan from the
first run (``plan_cache_mode``). It only changes prepared statements: the ORM's never are.

Turn ``OPENCOMPANY_DB_PREPARE`` off behind a pooler that cannot keep prepared statements per client
(PgBouncer in transaction mode before 1.21, or without ``max_prepared_statements``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, models

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


def configure_session(raw: Any) -> bool:
    """Set up a new PostgreSQL session (called once per connection the backend opens, pooled or not):
    with preparing on, its prepared statements (and PL/pgSQL's) are planned once, for any values.
    Runs on the raw connection, so nothing that counts queries sees it. Returns whether it wrote
    anything a transaction would need committed (never: the session is in autocommit)."""
    if settings.OPENCOMPANY_DB_PREPARE:
        raw.execute("SET plan_cache_mode = force_generic_plan")
    return False


def hot_fetchone(sql: str, params: Params) -> tuple[Any, ...] | None:
    """Run one hot statement and return its first row (None when it returned none)."""
    return _run(sql, params, lambda cursor: cursor.fetchone())


def hot_fetchall(sql: str, params: Params) -> list[tuple[Any, ...]]:
    """Run one hot statement and return all its rows."""
    return _run(sql, params, lambda cursor: cursor.fetchall())


# --- rows a hot INSERT writes, derived from the model --------------------------------------------------


@cache
def insert_fields(model: type[models.Model]) -> dict[str, models.Field[Any, Any]]:
    """The fields an insert writes, by attname: every concrete field but a database-generated key."""
    return {f.attname: f for f in model._meta.concrete_fields if f is not model._meta.auto_field}


def column_of(field: models.Field[Any, Any]) -> str:
    if field.column is None:
        raise TypeError(f"{field.name} has no column")
    return field.column


def parameter_type(field: models.Field[Any, Any]) -> str:
    """The type a parameter is cast to: the column's, but unbounded for text, so the column's own length
    check refuses an over-long value instead of a cast cutting it short."""
    if isinstance(field, models.CharField):
        return str(connection.ops.cast_char_field_without_max_length)
    return str(field.cast_db_type(connection))


def insert_select_lists(
    model: type[models.Model], derived: Mapping[str, str], prefix: str
) -> tuple[str, str]:
    """The column list and the SELECT list of an `INSERT … SELECT` of one `model` row: the SQL
    expression `derived` gives a column, else the parameter `%(<prefix><attname>)s` cast to its type
    (a parameter in a SELECT list has no column to take its type from)."""
    columns, values = [], []
    for field in insert_fields(model).values():
        columns.append(column_of(field))
        if field.attname in derived:
            values.append(derived[field.attname])
        else:
            values.append(f"%({prefix}{field.attname})s::{parameter_type(field)}")
    return ", ".join(columns), ", ".join(values)


def row_with_defaults(
    model: type[models.Model], supplied: Mapping[str, Any], *, skip: frozenset[str], now: datetime
) -> dict[str, Any]:
    """Every insert column of `model` but `skip`, by attname: the supplied value, else the field's
    default (an `auto_now`/`auto_now_add` field takes `now`, as the ORM's save does)."""
    fields = insert_fields(model)
    unknown = sorted(set(supplied) - set(fields))
    if unknown:
        raise TypeError(f"{model.__name__} has no columns {unknown}")
    row: dict[str, Any] = {}
    for attname, field in fields.items():
        if attname in skip:
            continue
        if attname in supplied:
            row[attname] = supplied[attname]
        elif getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            row[attname] = now
        else:
            row[attname] = field.get_default()
    return row


def row_params(model: type[models.Model], row: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """`row`'s values as the statement's parameters (`<prefix><attname>`), prepared as the ORM saves them."""
    fields = insert_fields(model)
    return {
        prefix + attname: fields[attname].get_db_prep_save(value, connection)
        for attname, value in row.items()
    }


def stored[M: models.Model](model: type[M], values: Mapping[str, Any]) -> M:
    """The instance of a row a hot statement wrote, built as the ORM builds a loaded row."""
    names = [f.attname for f in model._meta.concrete_fields]
    return model.from_db(connection.alias, names, [values[name] for name in names])


# --- rows a hot SELECT loads, as the ORM loads them -----------------------------------------------------


def select_list(model: type[models.Model], alias: str) -> str:
    """Every concrete column of `model` in field order; JSON as text, the form its field's converter
    reads (as the ORM's own queries return it)."""
    quote = connection.ops.quote_name
    return ", ".join(
        f"{alias}.{quote(column_of(f))}" + ("::text" if isinstance(f, models.JSONField) else "")
        for f in model._meta.concrete_fields
    )


@cache
def _converters(model: type[models.Model]) -> list[tuple[Any, list[Any]]]:
    """Per concrete field, its column expression and the converters the ORM applies to a loaded value."""
    out = []
    for field in model._meta.concrete_fields:
        column = field.get_col(model._meta.db_table)
        out.append((column, connection.ops.get_db_converters(column) + field.get_db_converters(connection)))
    return out


def loaded[M: models.Model](model: type[M], row: tuple[Any, ...]) -> M:
    """The instance of a row selected with `select_list`, converted and built as the ORM loads one."""
    values = []
    for value, (column, converters) in zip(row, _converters(model), strict=True):
        for converter in converters:
            value = converter(value, column, connection)
        values.append(value)
    return model.from_db(connection.alias, [f.attname for f in model._meta.concrete_fields], values)
