"""What every recall backend answers and what the answers hold, whatever the database.

A backend (`memory.search.postgres`, `memory.search.sqlite`) turns a match into a condition of its
own dialect and runs the statements `memory.search.statements` composes from them; the one for the
default database is chosen when the app loads (`recall_backend_use`), as Django picks a database
backend, and nothing outside the backends asks which database it is.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections

from memory.search.query import QueryWord
from memory.search.scoring import Candidate

CANDIDATES = 200  # items ranked per query: the best-covered ones, newest first among equals
TOLERANT_CANDIDATES = 100

ITEM_TABLE = "memory_memoryitem"
NAMESPACE_TABLE = "memory_memorynamespace"
# What a recall result shows of an item, read with the candidates so a page needs no second statement;
# in the model's field order, as `Model.from_db` reads them.
ITEM_COLUMNS = (
    "id",
    "memory_id",
    "title",
    "content",
    "category",
    "tags",
    "version",
    "expires_at",
    "indexing_state",
    "created_at",
    "updated_at",
    "created_by",
    "updated_by",
)


@dataclass(frozen=True)
class Filters:
    namespace: str
    now: datetime
    categories: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


type ItemRow = tuple[Any, ...]  # an item's `ITEM_COLUMNS`, as the database returned them


@dataclass
class Found:
    candidates: list[Candidate]
    df: dict[str, int]
    total: int | None  # the namespace's item count; None when nothing matched
    items: dict[int, ItemRow]
    # Per word no candidate matched, the words items hold that it may mean (see `near_words`); None
    # where the backend keeps no table of words.
    near: dict[int, list[str]] | None = None


@dataclass
class TolerantRow:
    candidate: Candidate
    title: str
    labels: str
    content: str
    item: ItemRow
    total: int  # the namespace's item count


# A match the backends compile: ("word", (w,)) matches w's stem, ("prefix", (p,)) the indexed stems
# that begin with p as given (see `prefix_lexeme`), ("phrase", (w1, w2, ...)) the stems in sequence.
Match = tuple[str, tuple[str, ...]]


type CTE = tuple[str, str, list[Any]]  # a common table expression: name, body, its parameters in order


class Backend(Protocol):
    vendor: str
    # The SQL function that finds a text in another (its position, 0 when absent).
    position: str
    # Whether every parameter of a statement is a query value as given, so that `statements` may
    # compile the statement once per shape, from placeholders, and reuse it.
    reuses_statements: bool

    def cond(self, match: Match, *, field: str | None = None) -> tuple[str, list[Any]]: ...

    def fetch(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]: ...

    def any_match(self, matches: list[Match]) -> tuple[str, str, list[Any]]: ...

    def widens(self, prefixes: list[str], written: list[str]) -> tuple[str, list[Any]]: ...

    def join(self) -> str: ...

    def statement(
        self, sql: str, params: list[Any], *, ctes: list[CTE] | None = None
    ) -> tuple[str, list[Any]]: ...

    def near(self, word: QueryWord) -> tuple[str, list[Any]] | None: ...

    def similar(self, word: str, namespace: str, near: list[str] | None) -> tuple[str, list[Any]]: ...

    def contains(self, text: str, namespace: str) -> tuple[str, list[Any]]: ...

    def rebuild(self, item_ids: list[int] | None) -> int: ...

    def prune_stems(self, batch: int) -> int: ...

    def prune_words(self, batch: int) -> int: ...


def with_ctes(ctes: list[CTE], sql: str, params: list[Any]) -> tuple[str, list[Any]]:
    """`sql` after its common table expressions, each computed once, with the parameters in order."""
    if not ctes:
        return sql, params
    heads = ", ".join(f"{name} AS MATERIALIZED ({body})" for name, body, _ in ctes)
    return f"WITH {heads} {sql}", [*(value for _, _, p in ctes for value in p), *params]


_chosen: type[Backend] | None = None


def recall_backend_use(backend: type[Backend]) -> None:
    """Make `backend` the one recall uses from now on."""
    global _chosen
    _chosen = backend


def get_backend() -> Backend:
    """A fresh backend of the default database (one per statement: it collects the statement's
    parts), of the kind chosen when the app loaded."""
    if _chosen is None:
        raise ImproperlyConfigured("The recall backend is chosen when the memory app loads.")
    return _chosen()


class ItemRecord(NamedTuple):
    """What a recall result shows of an item (`ITEM_COLUMNS`), read from its row without building
    a model: the attribute names are the model's."""

    pk: int
    memory_id: str
    title: str | None
    content: str
    category: str | None
    tags: list[str]
    version: int
    expires_at: datetime | None
    indexing_state: str
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str


@cache
def _item_expressions() -> list[Any]:
    from memory.models import MemoryItem

    return [MemoryItem._meta.get_field(column).get_col(ITEM_TABLE) for column in ITEM_COLUMNS]  # type: ignore[union-attr]


# Per database connection (each thread has its own): the conversions Django applies to
# `ITEM_COLUMNS` when it loads them (SQLite returns datetimes as text), with the column of each.
_converters: weakref.WeakKeyDictionary[Any, list[tuple[int, Any, Any]]] = weakref.WeakKeyDictionary()


def _item_converters(wrapper: Any) -> list[tuple[int, Any, Any]]:
    found = _converters.get(wrapper)
    if found is None:
        found = _converters[wrapper] = [
            (n, expression, convert)
            for n, expression in enumerate(_item_expressions())
            for convert in wrapper.ops.get_db_converters(expression)
        ]
    return found


_TAGS_AT = ITEM_COLUMNS.index("tags")


def item_records(rows: list[ItemRow]) -> list[ItemRecord]:
    """The items rows of `ITEM_COLUMNS` hold, converted as Django converts them when it loads them."""
    if not rows:
        return []
    wrapper = connections[DEFAULT_DB_ALIAS]
    converters = _item_converters(wrapper)
    records = []
    for row in rows:
        values = list(row)
        for n, expression, convert in converters:
            values[n] = convert(values[n], expression, wrapper)
        values[_TAGS_AT] = json.loads(values[_TAGS_AT])
        records.append(ItemRecord._make(values))
    return records
