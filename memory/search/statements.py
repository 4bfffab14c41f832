"""The recall statements, composed once for every database from the conditions its backend writes.

Each backend (`memory.search.base.Backend`) answers the same three questions through these
statements, and `memory.search.scoring` ranks the answers the same way:

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
anywhere is near). Query words are runs of letters and digits, quoted for each syntax, and always
bound as parameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from django.db import connection

from memory.search.base import (
    CANDIDATES,
    ITEM_COLUMNS,
    ITEM_TABLE,
    NAMESPACE_TABLE,
    TOLERANT_CANDIDATES,
    Backend,
    Filters,
    Found,
    ItemRecord,
    Match,
    TolerantRow,
    get_backend,
    item_records,
)
from memory.search.query import Group, QueryWord, RecallQuery, Term, prefix_lexeme, stem
from memory.search.scoring import COMPOUND, EXACT, PREFIX, Candidate, within_edits


def _term_match(term: Term) -> Match:
    if term.is_phrase:
        return ("phrase", term.words)
    if term.prefix:
        return ("prefix", (prefix_lexeme(term.words[0]),))
    return ("word", term.words)


def _filter_sql(filters: Filters, *, backend: Backend) -> tuple[str, list[Any]]:
    clauses = ["i.namespace = %s", "(i.expires_at IS NULL OR i.expires_at > %s)"]
    params: list[Any] = [filters.namespace, filters.now]
    if filters.categories:
        clauses.append(f"i.category IN ({', '.join(['%s'] * len(filters.categories))})")
        params.extend(filters.categories)
    for tag in filters.tags:
        clauses.append(f"{backend.position}(i.tag_index, %s) > 0")
        params.append(f"\x1f{tag}\x1f")
    return " AND ".join(clauses), params


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
# may widen, how many categories and tags); its values are all bound. On a backend that reuses
# statements (PostgreSQL, where every value is a parameter), a plain-word query reuses the text and a
# recipe for its parameters, compiled once per shape with placeholders standing for the values.

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
    if not backend.reuses_statements or query.phrases or query.negatives:
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
    where, where_params = _filter_sql(filters, backend=backend)
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
    where, where_params = _filter_sql(filters, backend=backend)
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
    where, params = _filter_sql(filters, backend=backend)
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
