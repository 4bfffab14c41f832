"""The full-text backends: what each database answers for recall, compiled from the parsed query.

This module and the migrations are the only places that know PostgreSQL from SQLite. Each backend
answers the same three questions, and `memory.search.scoring` ranks the answers the same way:

- `find`: the items in scope that match any query word as written (its Porter stem), as a prefix
  (the last word as typed, `word*`, or a compound part for words of four letters or more, while the
  words as written leave room among the candidates) or a quoted phrase, each with how every word
  matched, plus per word the number of items in scope that match it;
- `find_tolerant`: items that may hold a typo of a word no item matches as written (PostgreSQL:
  through the near words `memory_word` lists; SQLite: trigram candidates; checked word by word in
  Python);
- `recent`: the most recently updated items, for a query without searchable words.

`find` and `find_tolerant` also read what a result shows of each item (`ITEM_COLUMNS`), so a recall
takes one statement; a word that takes the typo pass adds one for the items that may hold its typo
(on PostgreSQL the first statement has looked its near words up, and none is added when no word
anywhere is near).

PostgreSQL: a stored generated `tsvector` (`search`, text search configuration `memory_porter`:
Porter stems of every word, punctuation read as spaces) with a GIN index over `(namespace, search)`,
and a `pg_trgm` GIN index over `(namespace, item text)`; prefixes are stem prefixes read by the
`simple` configuration, so they are not stemmed again, and a prefix is scanned only when the table
`memory_stem` (every indexed stem, kept by triggers) lists a stem it begins beyond the written
words' own; `memory_word` (every word items hold, with a trigram index, kept by the same
triggers) is where a misspelled word's near words are looked up. SQLite: FTS5 tables
`memory_item_fts` (porter + unicode61) and `memory_item_trigram` (trigram tokenizer), kept by
triggers in the writing transaction, and the `fts5vocab` table `memory_item_terms` over the first,
where prefixes are looked up among the indexed stems. Query
words are runs of letters and digits, quoted for each syntax, and always bound as parameters.
"""

from __future__ import annotations

import json
import logging
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple, Protocol, cast

from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections, transaction

from memory.migration_ops import PG_TRIGRAM_TEXT, pg_item_words, sqlite_trigram_text
from memory.search.query import Group, QueryWord, RecallQuery, Term, prefix_lexeme, stem
from memory.search.scoring import COMPOUND, EXACT, PREFIX, Candidate, within_edits
from opencompany.core.db import hot_fetchall

logger = logging.getLogger(__name__)

FTS_TABLE = "memory_item_fts"
TERMS_TABLE = "memory_item_terms"  # SQLite: every indexed stem with its item and column (fts5vocab)
TRIGRAM_TABLE = "memory_item_trigram"
STEM_TABLE = "memory_stem"  # PostgreSQL: every stem some item's `search` holds (migration 0006)
WORD_TABLE = "memory_word"  # PostgreSQL: every word some item holds, as written (migration 0007)
STEM_LOCK_TIMEOUT = "2s"  # how long a stems or words prune waits for item writes in flight
LOCK_NOT_AVAILABLE = "55P03"
PG_CONFIG = "memory_porter"
PG_RAW_CONFIG = "simple"  # reads a prefix as given: the stem prefix is chosen in Python
CANDIDATES = 200  # items ranked per query: the best-covered ones, newest first among equals
TOLERANT_CANDIDATES = 100
TRIGRAM_THRESHOLD = 0.3  # pg_trgm word similarity a typo candidate needs (most one-typo words reach it)

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


def _term_match(term: Term) -> Match:
    if term.is_phrase:
        return ("phrase", term.words)
    if term.prefix:
        return ("prefix", (prefix_lexeme(term.words[0]),))
    return ("word", term.words)


class Backend(Protocol):
    vendor: str

    def cond(self, match: Match, *, field: str | None = None) -> tuple[str, list[Any]]: ...

    def fetch(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]: ...

    def any_match(self, matches: list[Match]) -> tuple[str, str, list[Any]]: ...

    def widens(self, prefixes: list[str], written: list[str]) -> tuple[str, list[Any]]: ...

    def join(self) -> str: ...

    def statement(
        self, sql: str, params: list[Any], *, ctes: list[tuple[str, str, list[Any]]] | None = None
    ) -> tuple[str, list[Any]]: ...

    def near(self, word: QueryWord) -> tuple[str, list[Any]] | None: ...

    def similar(self, word: str, namespace: str, near: list[str] | None) -> tuple[str, list[Any]]: ...

    def contains(self, text: str, namespace: str) -> tuple[str, list[Any]]: ...

    def rebuild(self, item_ids: list[int] | None) -> int: ...

    def prune_stems(self, batch: int) -> int: ...

    def prune_words(self, batch: int) -> int: ...


def _filter_sql(filters: Filters, *, vendor: str) -> tuple[str, list[Any]]:
    clauses = ["i.namespace = %s", "(i.expires_at IS NULL OR i.expires_at > %s)"]
    params: list[Any] = [filters.namespace, filters.now]
    if filters.categories:
        clauses.append(f"i.category IN ({', '.join(['%s'] * len(filters.categories))})")
        params.extend(filters.categories)
    find = "strpos" if vendor == "postgresql" else "instr"
    for tag in filters.tags:
        clauses.append(f"{find}(i.tag_index, %s) > 0")
        params.append(f"\x1f{tag}\x1f")
    return " AND ".join(clauses), params


def _with(ctes: list[tuple[str, str, list[Any]]], sql: str, params: list[Any]) -> tuple[str, list[Any]]:
    """`sql` after its common table expressions, each computed once, with the parameters in order."""
    if not ctes:
        return sql, params
    heads = ", ".join(f"{name} AS MATERIALIZED ({body})" for name, body, _ in ctes)
    return f"WITH {heads} {sql}", [*(value for _, _, p in ctes for value in p), *params]


def _and(parts: list[str]) -> str:
    return "(" + " AND ".join(parts) + ")" if parts else "(1 = 1)"


def _or(parts: list[str]) -> str:
    return "(" + " OR ".join(parts) + ")" if parts else "(1 = 0)"


def _negation_sql(backend: Backend, negatives: tuple[Term, ...]) -> tuple[str, list[Any]]:
    parts, params = [], []
    for term in negatives:
        sql, p = backend.cond(_term_match(term))
        parts.append(sql)
        params += p
    return "NOT " + _or(parts), params


def _match_columns(backend: Backend, query: RecallQuery) -> tuple[list[tuple[str, str]], list[Any]]:
    """`(alias, boolean SQL)` for every item that matches: e<i> (word i as written), x<i> (as a
    prefix), p<j> (phrase j), g<k> (alternative k: its phrases present and nothing it excludes)."""
    columns: list[tuple[str, str]] = []
    params: list[Any] = []

    def add(alias: str, sql_params: tuple[str, list[Any]]) -> None:
        columns.append((alias, sql_params[0]))
        params.extend(sql_params[1])

    for i, word in enumerate(query.words):
        add(f"e{i}", backend.cond(("word", (word.text,))))
        if word.prefix or word.compound:
            add(f"x{i}", backend.cond(("prefix", (word.prefix_lexeme,))))
    for j, phrase in enumerate(query.phrases):
        add(f"p{j}", backend.cond(("phrase", phrase)))
    for k, group in enumerate(query.groups):
        parts: list[str] = []
        group_params: list[Any] = []
        for j in group.phrases:
            sql, p = backend.cond(("phrase", query.phrases[j]))
            parts.append(sql)
            group_params += p
        if group.negatives:
            sql, p = _negation_sql(backend, group.negatives)
            parts.append(sql)
            group_params += p
        add(f"g{k}", (_and(parts), group_params))
    return columns, params


FIELDS = ("title", "labels", "content")


def _field_columns(backend: Backend, query: RecallQuery) -> tuple[list[tuple[str, str]], list[Any]]:
    """`(alias, boolean SQL)` for the fields each word is found in: <field><i> (title, labels: tags
    and category, content); computed only for the candidates kept."""
    columns: list[tuple[str, str]] = []
    params: list[Any] = []
    for i, word in enumerate(query.words):
        matches: list[Match] = [("word", (word.text,))]
        if word.prefix or word.compound:
            # The prefix covers the word as written unless it is the word as typed ("one" stems to "on").
            prefix: Match = ("prefix", (word.prefix_lexeme,))
            matches = [prefix] if word.prefix_covers else [*matches, prefix]
        for name in FIELDS:
            conditions = [backend.cond(match, field=name) for match in matches]
            columns.append((f"{name}{i}", _or([sql for sql, _ in conditions])))
            params += [value for _, p in conditions for value in p]
    return columns, params


def _reader(query: RecallQuery, names: list[str]) -> Callable[[tuple[Any, ...]], Candidate]:
    """Reads a row of the columns `names` (see `_match_columns`, `_field_columns`) as a Candidate;
    the positions are looked up once per statement, not once per row."""
    at = {name: n for n, name in enumerate(names)}
    words = [
        (
            i,
            at.get(f"e{i}"),
            at.get(f"x{i}"),
            PREFIX if word.prefix else COMPOUND,
            [(name, at[f"{name}{i}"]) for name in FIELDS if f"{name}{i}" in at],
        )
        for i, word in enumerate(query.words)
    ]
    phrases = [(j, at.get(f"p{j}")) for j in range(len(query.phrases))]
    groups = [at.get(f"g{k}") for k in range(len(query.groups))]
    pk_at, length_at = at["id"], at["len"]

    def read(row: tuple[Any, ...]) -> Candidate:
        matched: dict[int, str] = {}
        fields: dict[int, frozenset[str]] = {}
        for i, exact, widened, kind, found_in in words:
            if exact is not None and row[exact]:
                matched[i] = EXACT
            elif widened is not None and row[widened]:
                matched[i] = kind
            else:
                continue
            fields[i] = frozenset([name for name, n in found_in if row[n]])
        return Candidate(
            pk=int(row[pk_at]),
            length=int(row[length_at] or 0),
            words=matched,
            fields=fields,
            phrases=frozenset(j for j, n in phrases if n is not None and row[n]),
            groups=tuple(n is not None and bool(row[n]) for n in groups),
        )

    return read


def _select(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"{sql} AS {alias}" for alias, sql in columns)


def _word_matched(query: RecallQuery, i: int) -> str:
    return f"(c.e{i} OR c.x{i})" if (query.words[i].prefix or query.words[i].compound) else f"c.e{i}"


# --- statements compiled once per shape ----------------------------------------------------------
#
# A statement's text depends only on the shape of the query and filters (how many words, how each
# may widen, how many categories and tags); its values are all bound. On PostgreSQL, where every
# value is a parameter, a plain-word query reuses the text and a recipe for its parameters, compiled
# once per shape with placeholders standing for the values.

type Compiled = tuple[str, list[Any], list[str]]  # SQL, parameters, the names of the columns it returns
type Build = Callable[..., Compiled]

_SLOT = re.compile("\x00(\\d+)\x00")
_SHAPES_MAX = 512
_shapes: dict[tuple[Any, ...], tuple[str, list[tuple[int, Any]], list[str]]] = {}


def _given_word(text: str, lexeme: str, shape: tuple[bool, bool, bool, int, bool]) -> QueryWord:
    """A query word whose text is a placeholder: its tolerances are given, not derived from it."""
    word = QueryWord(text=text)
    prefix, compound, covers, edits, surface_prefix = shape
    word.__dict__.update(
        prefix_lexeme=lexeme,
        prefix=prefix,
        compound=compound,
        prefix_covers=covers,
        edits=edits,
        surface_prefix=surface_prefix,
    )
    return word


def _recipe(value: Any) -> tuple[int, Any]:
    """How to rebuild a parameter compiled from placeholders: as is (0), the value of one slot (1),
    or a format string over the slots (2)."""
    if not isinstance(value, str) or "\x00" not in value:
        return 0, value
    whole = _SLOT.fullmatch(value)
    if whole:
        return 1, int(whole[1])
    escaped = value.replace("{", "{{").replace("}", "}}")
    return 2, _SLOT.sub(lambda m: "{" + m[1] + "}", escaped)


def _compiled(
    backend: Backend, build: Build, query: RecallQuery, filters: Filters, limit: int, *shape: Any
) -> Compiled:
    """`build(backend, query, filters, limit, *shape)`, from the cache of its shape when it has one."""
    if backend.vendor != "postgresql" or query.phrases or query.negatives:
        return build(backend, query, filters, limit, *shape)
    words = tuple((w.prefix, w.compound, w.prefix_covers, w.edits, w.surface_prefix) for w in query.words)
    key = (
        build.__name__,
        shape,
        words,
        tuple(g.words for g in query.groups),
        len(filters.categories),
        len(filters.tags),
    )
    values: list[Any] = [value for w in query.words for value in (w.text, w.prefix_lexeme)]
    values += [filters.namespace, filters.now, *filters.categories, *filters.tags, limit]
    entry = _shapes.get(key)
    if entry is None:
        slots = [f"\x00{n}\x00" for n in range(len(values))]
        given = RecallQuery(
            words=tuple(_given_word(slots[2 * i], slots[2 * i + 1], flags) for i, flags in enumerate(words)),
            phrases=(),
            groups=tuple(Group(ids, (), ()) for ids in key[3]),
            canonical="",
        )
        at = 2 * len(words)
        categories, tags = len(filters.categories), len(filters.tags)
        placeholders = Filters(
            namespace=slots[at],
            now=cast(datetime, slots[at + 1]),
            categories=tuple(slots[at + 2 : at + 2 + categories]),
            tags=tuple(slots[at + 2 + categories : at + 2 + categories + tags]),
        )
        sql, params, names = build(type(backend)(), given, placeholders, cast(int, slots[-1]), *shape)
        if "\x00" in sql:  # a value written into the text would be reused for every query of the shape
            raise RuntimeError("a recall statement holds a value in its text")
        if len(_shapes) >= _SHAPES_MAX:
            _shapes.clear()
        entry = _shapes[key] = (sql, [_recipe(p) for p in params], names)
    sql, recipe, names = entry
    params = [p if how == 0 else values[p] if how == 1 else p.format(*values) for how, p in recipe]
    return sql, params, names


def _find_statement(backend: Backend, query: RecallQuery, filters: Filters, limit: int) -> Compiled:
    where, where_params = _filter_sql(filters, vendor=backend.vendor)
    written: list[Match] = [("word", (w.text,)) for w in query.words] + [("phrase", p) for p in query.phrases]
    widening: list[Match] = [("prefix", (w.prefix_lexeme,)) for w in query.words if w.prefix or w.compound]
    columns, column_params = _match_columns(backend, query)
    fields, field_params = _field_columns(backend, query)
    select = (
        f"SELECT i.id AS id, length(i.content) + length(coalesce(i.title, '')) AS len, {_select(columns)} "  # noqa: S608 - fragments are ours, values bound
        f"FROM {ITEM_TABLE} i{backend.join()} WHERE {where} AND "
    )
    _source, written_sql, written_params = backend.any_match(written)
    ctes = [("written", select + written_sql, [*column_params, *where_params, *written_params])]
    candidates, candidate_params = "SELECT * FROM written", []
    if widening:
        # Prefixes and compounds widen the candidates only while the words as written match fewer
        # than `limit` items: a word that many items hold is typed in full, and a prefix match reads
        # the posting lists of every stem it begins.
        _source, widening_sql, widening_params = backend.any_match(widening)
        gate, gate_params = backend.widens(
            [w.prefix_lexeme for w in query.words if w.prefix or w.compound], [w.text for w in query.words]
        )
        candidates += f" UNION {select}{widening_sql} AND (SELECT count(*) FROM written) < %s AND {gate}"  # noqa: S608
        candidate_params = [*column_params, *where_params, *widening_params, limit, *gate_params]
    groups = _or([f"c.g{k}" for k in range(len(query.groups))]) if query.strict else "(1 = 1)"
    near = [
        (i, lookup) for i, word in enumerate(query.words) if word.edits and (lookup := backend.near(word))
    ]
    near_columns = [
        # A word that an item holding the words as written matches looks nothing up (the widened
        # candidates are not waited for: a word only they match looks up words it does not need).
        (
            f"near{i}",
            f"CASE WHEN EXISTS (SELECT 1 FROM written c WHERE {groups} AND {_word_matched(query, i)}) "  # noqa: S608 - fragments are ours
            f"THEN NULL ELSE {lookup[0]} END",
        )
        for i, lookup in near
    ]
    if near_columns:
        ctes.append(
            ("near", f"SELECT {_select(near_columns)}", [p for _, (_, params) in near for p in params])
        )
    counts = [
        (f"dw{i}", f"count(*) FILTER (WHERE {_word_matched(query, i)}) OVER ()")
        for i in range(len(query.words))
    ]
    counts += [(f"dp{j}", f"count(*) FILTER (WHERE c.p{j}) OVER ()") for j in range(len(query.phrases))]
    coverage = " + ".join(
        [f"CASE WHEN {_word_matched(query, i)} THEN 1 ELSE 0 END" for i in range(len(query.words))]
        + [f"CASE WHEN c.p{j} THEN 1 ELSE 0 END" for j in range(len(query.phrases))]
    )
    kept = ["id", "len", *(alias for alias, _ in columns), *(alias for alias, _ in counts), "total"]
    names = [*kept, *(alias for alias, _ in fields), *(f"item_{column}" for column in ITEM_COLUMNS)]
    # The fields each word is found in, and what a result shows, are read only for the candidates
    # kept (joined back by id).
    outer = [*(f"m.{name}" for name in kept), *([_select(fields)] if fields else []), _item_select("i")]
    sql = (
        f"SELECT {', '.join(outer)} FROM ("  # noqa: S608 - fragments are ours, values bound
        f"SELECT c.*, {_select(counts)}, ({coverage}) AS coverage, "
        f"(SELECT item_count FROM {NAMESPACE_TABLE} WHERE id = %s) AS total "
        f"FROM ({candidates}) c "
        f"WHERE {groups} ORDER BY coverage DESC, c.id DESC LIMIT %s"
        f") m JOIN {ITEM_TABLE} i ON i.id = m.id{backend.join()}"
    )
    params = [*field_params, filters.namespace, *candidate_params, limit]
    if near_columns:
        # One row of near words even when no item matched: the candidates join it.
        sql = f"SELECT near.*, f.* FROM near LEFT JOIN ({sql}) f ON true"  # noqa: S608 - fragments are ours
        names = [*(alias for alias, _ in near_columns), *names]
    sql, params = backend.statement(sql, params, ctes=ctes)
    return sql, params, names


def _item_select(alias: str) -> str:
    # Tags as text: decoded only for the page's items, as Django decodes them when it loads a row.
    return ", ".join(
        f"CAST({alias}.{column} AS text) AS item_{column}"
        if column == "tags"
        else f"{alias}.{column} AS item_{column}"
        for column in ITEM_COLUMNS
    )


def find(query: RecallQuery, filters: Filters, *, limit: int = CANDIDATES) -> Found:
    """Items in scope matching any word or phrase of the query (best-covered first, then newest),
    with per-word and per-phrase match counts over all of them and what a result shows of each.
    Prefixes and compound parts add their items only while the words and phrases as written match
    fewer than `limit` items. On PostgreSQL the same statement looks up, for each word with a typo
    budget that no candidate matched, the words items hold that it may mean (`Found.near`)."""
    backend = get_backend()
    sql, params, names = _compiled(backend, _find_statement, query, filters, limit)
    rows = backend.fetch(sql, params)
    df = {f"w{i}": 0 for i in range(len(query.words))} | {f"p{j}": 0 for j in range(len(query.phrases))}
    at = {name: n for n, name in enumerate(names)}
    near: dict[int, list[str]] | None = None
    if rows and names[0].startswith("near"):
        first = rows[0]
        near = {
            i: near_words(query, i, first[at[f"near{i}"]] or [])
            for i in range(len(query.words))
            if f"near{i}" in at
        }
        if first[at["id"]] is None:  # no candidate: the one row holds only the near words
            rows = []
    if not rows:
        return Found([], df, None, {}, near)
    first = rows[0]
    df = {key: int(first[at[f"d{key}"]]) for key in df}
    read = _reader(query, names)
    item_at = at["item_id"]
    return Found(
        [read(row) for row in rows],
        df,
        int(first[at["total"]] or 0),
        {int(row[item_at]): row[item_at:] for row in rows},
        near,
    )


def _tolerant_statement(
    backend: Backend,
    query: RecallQuery,
    filters: Filters,
    limit: int,
    word_ids: tuple[int, ...],
    near: dict[int, list[str]] | None = None,
) -> Compiled:
    where, where_params = _filter_sql(filters, vendor=backend.vendor)
    parts: list[str] = []
    tolerant_params: list[Any] = []
    for i in word_ids:
        word = query.words[i]
        conditions = []
        if word.edits:
            conditions.append(
                backend.similar(word.text, filters.namespace, None if near is None else near.get(i))
            )
        elif word.surface_prefix:  # a longer word begins the words it is similar to
            conditions.append(backend.contains(word.text, filters.namespace))
        for sql, p in conditions:
            parts.append(sql)
            tolerant_params += p
    columns, column_params = _match_columns(backend, query)
    groups = _or([f"g{k}" for k in range(len(query.groups))]) if query.strict else "(1 = 1)"
    names = [
        "id",
        "len",
        "tag_index",
        *(alias for alias, _ in columns),
        *(f"item_{column}" for column in ITEM_COLUMNS),
    ]
    sql = (
        f"SELECT {', '.join(names)}, (SELECT item_count FROM {NAMESPACE_TABLE} WHERE id = %s) AS total "  # noqa: S608 - fragments are ours, values bound
        "FROM (SELECT i.id AS id, length(i.content) + length(coalesce(i.title, '')) AS len, "
        f"i.tag_index AS tag_index, {_select(columns)}, {_item_select('i')} "
        f"FROM {ITEM_TABLE} i{backend.join()} WHERE {where} AND {_or(parts)}) c "
        f"WHERE {groups} ORDER BY id DESC LIMIT %s"
    )
    params = [filters.namespace, *column_params, *where_params, *tolerant_params, limit]
    sql, params = backend.statement(sql, params)
    return sql, params, [*names, "total"]


def near_words(query: RecallQuery, i: int, found: list[str]) -> list[str]:
    """The words of `found` that query word `i` may mean: within its typo budget or, typed last,
    begun by it; words of its own stem are left out (no item in scope holds them, or the word would
    have matched)."""
    word = query.words[i]
    return [
        w
        for w in found
        if (within_edits(word.text, w, word.edits) or (word.surface_prefix and w.startswith(word.text)))
        and stem(w) != word.stem
    ]


def find_tolerant(
    query: RecallQuery,
    word_ids: list[int],
    filters: Filters,
    *,
    near: dict[int, list[str]] | None = None,
    limit: int = TOLERANT_CANDIDATES,
) -> list[TolerantRow]:
    """Items in scope that may hold a typo of the words `word_ids` or a word they begin (newest first),
    with their text: the caller checks each word of it. On PostgreSQL `near` holds the words within
    each word's typo budget that items hold (`Found.near`), and the items holding their stems are
    read; SQLite (no `near`) reads the items sharing the most trigrams with the word. Both also read
    the items containing a word typed last that has no typo budget."""
    backend = get_backend()
    typo = [i for i in word_ids if query.words[i].edits]
    if near is None:
        sql, params, names = _compiled(backend, _tolerant_statement, query, filters, limit, tuple(word_ids))
    elif len(typo) == len(word_ids) and not any(near.get(i) for i in typo):
        return []  # no item anywhere holds a word these may be typos of
    else:  # the near words are values of this query only: no statement to reuse
        sql, params, names = _tolerant_statement(backend, query, filters, limit, tuple(word_ids), near)
    rows = backend.fetch(sql, params)
    at = {name: n for n, name in enumerate(names)}
    read = _reader(query, names)
    tags_at, total_at = at["tag_index"], at["total"]
    item_at, item_end = at["item_id"], at["item_id"] + len(ITEM_COLUMNS)
    title_at, category_at, content_at = at["item_title"], at["item_category"], at["item_content"]
    return [
        TolerantRow(
            read(row),
            title=str(row[title_at] or ""),
            labels=f"{row[category_at] or ''} {row[tags_at] or ''}",
            content=str(row[content_at]),
            item=row[item_at:item_end],
            total=int(row[total_at] or 0),
        )
        for row in rows
    ]


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


def items_by_pk(pks: list[int]) -> dict[int, ItemRecord]:
    """The items with these pks, read as a recall page shows them (`item_records`)."""
    if not pks:
        return {}
    marks = ", ".join(["%s"] * len(pks))
    sql = f"SELECT {_item_select('i')} FROM {ITEM_TABLE} i WHERE i.id IN ({marks})"  # noqa: S608 - our table, values bound
    with connection.cursor() as cursor:
        cursor.execute(sql, pks)
        rows = cursor.fetchall()
    return {record.pk: record for record in item_records(rows)}


def recent(
    query: RecallQuery, filters: Filters, *, after: tuple[datetime, int] | None, limit: int
) -> list[int]:
    """Pks of the most recently updated items in scope (minus what the query excludes), newest
    first by `(updated_at, id)`, after the keyset position `after`."""
    backend = get_backend()
    where, params = _filter_sql(filters, vendor=backend.vendor)
    if query.negatives:
        negation, negation_params = _negation_sql(backend, query.negatives)
        where += f" AND {negation}"
        params += negation_params
    if after is not None:
        where += " AND (i.updated_at < %s OR (i.updated_at = %s AND i.id < %s))"
        at = connection.ops.adapt_datetimefield_value(after[0])
        params += [at, at, after[1]]
    sql = f"SELECT i.id FROM {ITEM_TABLE} i{backend.join()} WHERE {where} ORDER BY i.updated_at DESC, i.id DESC LIMIT %s"  # noqa: S608 - fragments are ours, values bound
    params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(*backend.statement(sql, params))
        return [int(row[0]) for row in cursor.fetchall()]


# --- PostgreSQL ----------------------------------------------------------------------------------


_PG_WEIGHTS = {"title": "A", "labels": "B", "content": "C"}


def _pg_lexeme(word: str) -> str:
    # Quoted, so the tsquery parser reads it as text; query words hold no quote characters.
    return f"'{word}'"


def _pg_tsquery(match: Match) -> str:
    kind, words = match
    if kind == "phrase":
        return " <-> ".join(_pg_lexeme(w) for w in words)
    return _pg_lexeme(words[0]) + (":*" if kind == "prefix" else "")


def _pg_config(match: Match) -> str:
    # A prefix is already the stem prefix to look for: stemming it again would shorten it.
    return PG_RAW_CONFIG if match[0] == "prefix" else PG_CONFIG


def padded_trigrams(word: str) -> list[str]:
    """The trigrams of a word with a space on each side: a typo leaves at least one of them."""
    padded = f" {word} "
    return list(dict.fromkeys(padded[i : i + 3] for i in range(len(padded) - 2)))


# An entry being pruned as a quoted tsquery lexeme: quotes (39) and backslashes (92) doubled.
_PG_QUOTED_ENTRY = "(chr(39) || replace(replace(b.entry, chr(92), chr(92) || chr(92)), chr(39), chr(39) || chr(39)) || chr(39))"


class PostgresBackend:
    """Every tsquery of a statement is parsed once, in a one-row `q` it joins: written inline, a
    prepared statement's generic plan would parse and stem it again for every row it looks at."""

    vendor = "postgresql"

    def __init__(self) -> None:
        self._queries: dict[tuple[str, ...], str] = {}  # (config, text, ...) → column of `q`

    def _ref(self, *key: str) -> str:
        return "q." + self._queries.setdefault(key, f"t{len(self._queries)}")

    def join(self) -> str:
        return " CROSS JOIN q" if self._queries else ""

    def statement(
        self, sql: str, params: list[Any], *, ctes: list[tuple[str, str, list[Any]]] | None = None
    ) -> tuple[str, list[Any]]:
        named: list[tuple[str, str, list[Any]]] = []
        if self._queries:
            columns: list[str] = []
            prelude: list[Any] = []
            for key, alias in self._queries.items():
                parts = [f"to_tsquery('{key[n]}', %s)" for n in range(0, len(key), 2)]
                columns.append(f"({' || '.join(parts)}) AS {alias}")
                prelude += key[1::2]
            named.append(("q", f"SELECT {', '.join(columns)}", prelude))
        return _with([*named, *(ctes or [])], sql, params)

    def cond(self, match: Match, *, field: str | None = None) -> tuple[str, list[Any]]:
        text = _pg_tsquery(match)
        if field is not None:  # `search` weighs the title A, tags and category B, the content C
            weight = _PG_WEIGHTS[field]
            text = text + weight if text.endswith(":*") else f"{text}:{weight}"
        return f"(i.search @@ {self._ref(_pg_config(match), text)})", []

    def fetch(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        # Prepared on the connection: these statements repeat with every recall.
        return hot_fetchall(sql, params)

    def any_match(self, matches: list[Match]) -> tuple[str, str, list[Any]]:
        key: list[str] = []
        for config in (PG_CONFIG, PG_RAW_CONFIG):
            texts = [f"({_pg_tsquery(m)})" for m in matches if _pg_config(m) == config]
            if texts:
                key += [config, " | ".join(texts)]
        if not key:
            return f"{ITEM_TABLE} i", "(1 = 0)", []
        # One tsquery, so the (namespace, search) index answers it in one scan.
        return f"{ITEM_TABLE} i", f"i.search @@ {self._ref(*key)}", []

    def widens(self, prefixes: list[str], written: list[str]) -> tuple[str, list[Any]]:
        """True when some item's stem begins one of `prefixes` and is not a stem of the `written`
        words; otherwise a prefix scan could only find items the written words already found, and the
        statement skips it (one range lookup per prefix in `memory_stem`, ordered by byte)."""
        values = ", ".join(["%s"] * len(prefixes))
        sql = (
            f"EXISTS (SELECT 1 FROM unnest(ARRAY[{values}]::text[]) AS p(prefix) CROSS JOIN LATERAL ("  # noqa: S608 - our table, values bound
            f'SELECT 1 FROM {STEM_TABLE} s WHERE s.stem >= p.prefix COLLATE "C" '
            'AND s.stem < (p.prefix || chr(1114111)) COLLATE "C" '
            f"AND s.stem <> ALL (CAST((SELECT tsvector_to_array(to_tsvector('{PG_CONFIG}', %s))) AS text[])) "
            "LIMIT 1) found)"
        )
        return sql, [*prefixes, " ".join(written)]

    def near(self, word: QueryWord) -> tuple[str, list[Any]]:
        """The words items hold that `word` may be a typo of (pg_trgm word similarity of at least
        `TRIGRAM_THRESHOLD`, about its length) or, typed last, may begin: `near_words` keeps those
        within its typo budget."""
        return "memory_near_words(%s, %s, %s)", [word.text, word.edits, word.surface_prefix]

    def similar(self, word: str, namespace: str, near: list[str] | None) -> tuple[str, list[Any]]:
        # The items holding a near word hold its stem: the (namespace, search) index finds them.
        if not near:
            return "(1 = 0)", []
        lexemes = " | ".join(_pg_lexeme(w.replace("\\", "\\\\").replace("'", "''")) for w in near)
        return f"(i.search @@ {self._ref(PG_CONFIG, lexemes)})", []

    def contains(self, text: str, namespace: str) -> tuple[str, list[Any]]:
        item_text = PG_TRIGRAM_TEXT.replace("i.", "j.")
        sql = f"(i.id IN (SELECT j.id FROM {ITEM_TABLE} j WHERE j.namespace = %s AND {item_text} ILIKE %s))"  # noqa: S608 - our table, values bound
        return sql, [namespace, f"%{text}%"]

    def rebuild(self, item_ids: list[int] | None) -> int:
        # The generated column and the expression index cannot drift from the rows; the stems
        # table gets what it misses (as its triggers add them).
        from memory.models import MemoryItem

        queryset = MemoryItem.objects.all()
        if item_ids is not None:
            queryset = queryset.filter(pk__in=item_ids)
        ids = "" if item_ids is None else "WHERE i.id = ANY(%s)"
        params = [] if item_ids is None else [list(item_ids)]
        with connection.cursor() as cursor:
            cursor.execute(
                f'INSERT INTO {STEM_TABLE} (stem) SELECT DISTINCT s COLLATE "C" FROM {ITEM_TABLE} i, '  # noqa: S608 - our tables, values bound
                f"unnest(tsvector_to_array(i.search)) AS s {ids} EXCEPT SELECT stem FROM {STEM_TABLE}",
                params,
            )
            cursor.execute(
                f'INSERT INTO {WORD_TABLE} (word) SELECT DISTINCT w COLLATE "C" FROM {ITEM_TABLE} i, '  # noqa: S608 - our tables, values bound
                f"unnest({pg_item_words('i')}) AS w {ids} EXCEPT SELECT word FROM {WORD_TABLE}",
                params,
            )
        return queryset.count()

    def prune_stems(self, batch: int) -> int:
        """Deletes the stems no item holds any more (a removed item's words); see `_prune`."""
        return self._prune(
            STEM_TABLE,
            "stem",
            held=f'SELECT unnest(tsvector_to_array(search)) COLLATE "C" FROM {ITEM_TABLE}',  # noqa: S608 - our table
            holds=f"i.search @@ {_PG_QUOTED_ENTRY}::tsquery",
            batch=batch,
        )

    def prune_words(self, batch: int) -> int:
        """Deletes the words no item holds any more (a removed item's words); see `_prune`."""
        return self._prune(
            WORD_TABLE,
            "word",
            held=f'SELECT unnest({pg_item_words("i")}) COLLATE "C" FROM {ITEM_TABLE} i',  # noqa: S608 - our table
            # The stem narrows the items to read by the index; the words themselves decide.
            holds=f"i.search @@ to_tsquery('{PG_CONFIG}', {_PG_QUOTED_ENTRY}) AND b.entry = ANY({pg_item_words('i')})",
            batch=batch,
        )

    def _prune(self, table: str, column: str, *, held: str, holds: str, batch: int) -> int:
        """Deletes the entries of `table` that no item holds any more. One pass over the items
        (`held`: what they hold), without a lock, lists the candidates; then each `batch` of them is
        checked again (`holds`: whether item `i` holds entry `b.entry`) and deleted under a lock that
        keeps item writes out until it commits, so an entry that an uncommitted write found already
        present is never pruned under it. When writes hold the table longer than
        `STEM_LOCK_TIMEOUT`, the prune stops there and the next one takes the rest."""
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {column} FROM {table} EXCEPT {held}")  # noqa: S608 - our tables
            candidates = sorted(row[0] for row in cursor.fetchall())
        sql = (
            f"WITH gone AS (DELETE FROM {table} m USING unnest(%s::text[]) AS b(entry) "  # noqa: S608 - our tables, values bound
            f'WHERE m.{column} = b.entry COLLATE "C" '
            f"AND NOT EXISTS (SELECT 1 FROM {ITEM_TABLE} i WHERE {holds}) RETURNING m.{column}) "
            f"SELECT count(DISTINCT {column}) FROM gone"
        )
        pruned = 0
        for start in range(0, len(candidates), batch):
            try:
                with transaction.atomic(), connection.cursor() as cursor:
                    # A waiting lock holds up every write queued behind it: wait briefly, or give up.
                    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [STEM_LOCK_TIMEOUT])
                    cursor.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")
                    cursor.execute(sql, [candidates[start : start + batch]])
                    pruned += int(cursor.fetchone()[0])
            except OperationalError as exc:
                if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                    raise
                logger.warning(
                    "memory %s prune stopped: item writes held the table pruned=%d", column + "s", pruned
                )
                break
        return pruned


# --- SQLite --------------------------------------------------------------------------------------


_FTS5_COLUMNS = {"title": "title : ", "labels": "{tags category} : ", "content": "content : "}
_TERM_COLUMNS = {"title": "'title'", "labels": "'tags', 'category'", "content": "'content'"}


def _fts5(match: Match) -> str:
    # Words are runs of letters/digits only, so a double-quoted string is always literal text.
    return '"' + " ".join(match[1]) + '"'


def _prefix_range(prefix: str) -> list[str]:
    # The stems that begin with `prefix`: FTS5 compares terms as UTF-8 bytes, which order as code points.
    return [prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)]


class SqliteBackend:
    vendor = "sqlite"

    def join(self) -> str:
        return ""

    def statement(
        self, sql: str, params: list[Any], *, ctes: list[tuple[str, str, list[Any]]] | None = None
    ) -> tuple[str, list[Any]]:
        return _with(ctes or [], sql, params)

    # FTS5 would stem a prefix query again ("one"* reads as "on"*), so prefixes are looked up among
    # the indexed stems themselves (the fts5vocab table), as PostgreSQL's `simple` configuration does.
    def cond(self, match: Match, *, field: str | None = None) -> tuple[str, list[Any]]:
        if match[0] == "prefix":
            columns = f" AND col IN ({_TERM_COLUMNS[field]})" if field is not None else ""
            sql = f"(i.id IN (SELECT doc FROM {TERMS_TABLE} WHERE term >= %s AND term < %s{columns}))"  # noqa: S608 - our table, values bound
            return sql, _prefix_range(match[1][0])
        text = (_FTS5_COLUMNS[field] if field is not None else "") + _fts5(match)
        return f"(i.id IN (SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s))", [text]  # noqa: S608 - our table, value bound

    def fetch(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def any_match(self, matches: list[Match]) -> tuple[str, str, list[Any]]:
        # One set of rowids, so SQLite can start from the matches rather than from the namespace.
        parts, params = [], []
        words = [_fts5(m) for m in matches if m[0] != "prefix"]
        if words:
            parts.append(f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s")  # noqa: S608 - our table
            params.append(" OR ".join(words))
        for match in matches:
            if match[0] == "prefix":
                parts.append(f"SELECT doc FROM {TERMS_TABLE} WHERE term >= %s AND term < %s")  # noqa: S608 - our table
                params += _prefix_range(match[1][0])
        if not parts:
            return f"{ITEM_TABLE} i", "(1 = 0)", []
        return f"{ITEM_TABLE} i", f"i.id IN ({' UNION '.join(parts)})", params

    def widens(self, prefixes: list[str], written: list[str]) -> tuple[str, list[Any]]:
        # The prefix lookup above reads the stems' own table: nothing to skip.
        return "(1 = 1)", []

    def near(self, word: QueryWord) -> None:
        # SQLite keeps no table of words: the trigram index answers for the items themselves.
        return None

    def similar(self, word: str, namespace: str, near: list[str] | None) -> tuple[str, list[Any]]:
        # Items sharing any trigram, the ones sharing the most (rarest) first: bm25 over trigrams.
        expression = " OR ".join(f'"{piece}"' for piece in padded_trigrams(word))
        sql = (
            f"(i.id IN (SELECT t.rowid FROM {TRIGRAM_TABLE} t JOIN {ITEM_TABLE} j ON j.id = t.rowid "  # noqa: S608 - our tables, values bound
            f"WHERE {TRIGRAM_TABLE} MATCH %s AND j.namespace = %s ORDER BY t.rank LIMIT {TOLERANT_CANDIDATES}))"
        )
        return sql, [expression, namespace]

    def contains(self, text: str, namespace: str) -> tuple[str, list[Any]]:
        return f"(i.id IN (SELECT rowid FROM {TRIGRAM_TABLE} WHERE {TRIGRAM_TABLE} MATCH %s))", [f'"{text}"']  # noqa: S608 - our table, value bound

    def rebuild(self, item_ids: list[int] | None) -> int:
        from memory.models import MemoryItem

        queryset = MemoryItem.objects.all()
        if item_ids is not None:
            queryset = queryset.filter(pk__in=item_ids)
        fts_select = (
            "SELECT id, coalesce(title, ''), replace(tag_index, char(31), ' '), coalesce(category, ''), content "  # noqa: S608 - our table
            f"FROM {ITEM_TABLE}"
        )
        fts_insert = f"INSERT INTO {FTS_TABLE}(rowid, title, tags, category, content) "
        trigram_select = f"SELECT i.id, {sqlite_trigram_text('i')} FROM {ITEM_TABLE} i"  # noqa: S608
        trigram_insert = f"INSERT INTO {TRIGRAM_TABLE}(rowid, text) "
        with connection.cursor() as cursor:
            if item_ids is None:
                cursor.execute(f"DELETE FROM {FTS_TABLE}")  # noqa: S608 - our table names
                cursor.execute(fts_insert + fts_select)
                cursor.execute(f"DELETE FROM {TRIGRAM_TABLE}")  # noqa: S608
                cursor.execute(trigram_insert + trigram_select)
                return queryset.count()
            pks = list(queryset.values_list("pk", flat=True))
            for start in range(0, len(pks), 500):
                chunk = pks[start : start + 500]
                marks = ", ".join(["%s"] * len(chunk))
                cursor.execute(f"DELETE FROM {FTS_TABLE} WHERE rowid IN ({marks})", chunk)  # noqa: S608
                cursor.execute(f"{fts_insert}{fts_select} WHERE id IN ({marks})", chunk)
                cursor.execute(f"DELETE FROM {TRIGRAM_TABLE} WHERE rowid IN ({marks})", chunk)  # noqa: S608
                cursor.execute(f"{trigram_insert}{trigram_select} WHERE i.id IN ({marks})", chunk)
        return len(pks)

    def prune_stems(self, batch: int) -> int:
        # FTS5 drops a stem from its index when the last row holding it goes.
        return 0

    def prune_words(self, batch: int) -> int:
        return 0


_BY_VENDOR: dict[str, type[Backend]] = {"postgresql": PostgresBackend, "sqlite": SqliteBackend}


def get_backend() -> Backend:
    """The default database's backend."""
    return _BY_VENDOR[connection.vendor]()


def fts_rebuild(*, item_ids: list[int] | None = None) -> int:
    """Re-project items into the full-text tables (all items, or those pks); returns how many."""
    return get_backend().rebuild(item_ids)


def stems_prune(*, batch: int = 200) -> int:
    """Delete the indexed stems no item holds any more (PostgreSQL); returns how many."""
    return get_backend().prune_stems(batch)


def words_prune(*, batch: int = 200) -> int:
    """Delete the indexed words no item holds any more (PostgreSQL); returns how many."""
    return get_backend().prune_words(batch)
