"""Ranked full-text recall with one semantics on PostgreSQL and SQLite.

The query language is PostgreSQL's web-search syntax, parsed here once: words are ANDed, `"quoted
phrases"` match in order, `or` between items makes alternatives, `-item` excludes, and a trailing
`*` makes a word a prefix (`roast*` finds the tag `roasting`). English stop words are dropped the
same way on both databases, and a query that keeps no positive word is refused rather than read as
"everything".

- PostgreSQL: a stored generated `tsvector` column `search` (title weight A, category and tags B,
  content C) with a GIN index; the parsed query is re-rendered from its own tokens into
  `websearch_to_tsquery('english', …)` (plus `to_tsquery('english', 'word:*')` for prefixes), always
  as bound parameters; ranked by `ts_rank_cd(search, q, 1)`.
- SQLite: an FTS5 table `memory_item_fts(title, tags, category, content)` (porter tokenizer) kept by
  triggers in the writing transaction; the MATCH expression is compiled from the parsed tokens, each
  quoted, so user text never reaches FTS5's syntax; ranked by `-bm25()` with column weights in the
  same proportions (10 : 4 : 4 : 2).

Pages are keyset pages over `(score DESC, id DESC)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection

MAX_QUERY_ITEMS = 32
WORD_RE = re.compile(r"[^\W_]+")

# PostgreSQL's `english` stop-word list (Snowball), so both databases drop the same words.
_STOP_WORDS_TEXT = """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her
    hers herself it its itself they them their theirs themselves what which who whom this that these those
    am is are was were be been being have has had having do does did doing a an the and but if or because
    as until while of at by for with about against between into through during before after above below to
    from up down in out on off over under again further then once here there when where why how all any
    both each few more most other some such no nor not only own same so than too very s t can will just don
    should now"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

FTS_TABLE = "memory_item_fts"
# bm25 weights in FTS column order (title, tags, category, content): A 1.0, B 0.4, C 0.2.
BM25_WEIGHTS = "10.0, 4.0, 4.0, 2.0"
PG_RANK_NORMALIZATION = 1  # divide by 1 + log(document length): shorter documents win ties, as with bm25


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]
    prefix: bool = False
    negated: bool = False

    @property
    def is_phrase(self) -> bool:
        return len(self.words) > 1


@dataclass
class ParsedQuery:
    """OR of groups; each group ANDs its terms. Every group holds at least one positive term."""

    groups: list[list[Term]] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.groups

    def canonical(self) -> str:
        """A normalized text form: what cursors are bound to (same meaning → same string)."""
        parts = []
        for group in self.groups:
            items = []
            for term in group:
                text = " ".join(term.words)
                text = f'"{text}"' if term.is_phrase else text
                items.append(("-" if term.negated else "") + text + ("*" if term.prefix else ""))
            parts.append(" ".join(items))
        return " or ".join(parts)


def _make_term(text: str, *, quoted: bool, negated: bool) -> Term | None:
    prefix = not quoted and text.endswith("*")
    words = tuple(w.lower() for w in WORD_RE.findall(text))
    if not words:
        return None
    if len(words) == 1:
        if words[0] in STOP_WORDS:
            return None
        return Term(words=words, prefix=prefix, negated=negated)
    if all(w in STOP_WORDS for w in words):
        return None
    # "e-mail" and other joined words behave as a phrase of their parts (as in PostgreSQL).
    return Term(words=words, prefix=False, negated=negated)


def parse_query(text: str) -> ParsedQuery:
    """Parse web-search syntax into groups of terms (pure; never raises)."""
    tokens: list[tuple[str, Any]] = []  # ("or", None) or ("term", Term)
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        negated = False
        if ch == "-" and i + 1 < n and not text[i + 1].isspace():
            negated = True
            i += 1
            ch = text[i]
        if ch == '"':
            end = text.find('"', i + 1)
            end = n if end == -1 else end
            term = _make_term(text[i + 1 : end], quoted=True, negated=negated)
            i = end + 1
        else:
            end = i
            while end < n and not text[end].isspace() and text[end] != '"':
                end += 1
            chunk = text[i:end]
            i = end
            if not negated and chunk.lower() == "or":
                tokens.append(("or", None))
                continue
            term = _make_term(chunk, quoted=False, negated=negated)
        if term is not None:
            tokens.append(("term", term))

    groups: list[list[Term]] = [[]]
    count = 0
    for kind, term in tokens:
        if kind == "or":
            if groups[-1]:
                groups.append([])
            continue
        if count >= MAX_QUERY_ITEMS:
            break
        groups[-1].append(term)
        count += 1
    kept = [g for g in groups if any(not t.negated for t in g)]
    return ParsedQuery(groups=kept)


# --- SQLite FTS5 -----------------------------------------------------------------------------


def _fts5_term(term: Term) -> str:
    # Words are runs of letters/digits only, so double-quoting them is always a literal string.
    body = '"' + " ".join(term.words) + '"'
    return body + "*" if term.prefix else body


def to_fts5(parsed: ParsedQuery) -> str:
    """The FTS5 MATCH expression for a parsed query (never contains raw user syntax)."""
    groups = []
    for group in parsed.groups:
        positives = [_fts5_term(t) for t in group if not t.negated]
        expr = "(" + " AND ".join(positives) + ")"
        for negative in (t for t in group if t.negated):
            expr = f"({expr} NOT {_fts5_term(negative)})"
        groups.append(expr)
    return " OR ".join(groups)


# --- PostgreSQL ------------------------------------------------------------------------------


def _websearch_text(term: Term) -> str:
    text = " ".join(term.words)
    text = f'"{text}"' if term.is_phrase else text
    return ("-" if term.negated else "") + text


def to_pg_tsquery(parsed: ParsedQuery) -> tuple[str, list[str]]:
    """A SQL tsquery expression and its parameters for a parsed query."""
    group_sql: list[str] = []
    params: list[str] = []
    for group in parsed.groups:
        parts: list[str] = []
        plain = [_websearch_text(t) for t in group if not t.prefix]
        if plain:
            parts.append("websearch_to_tsquery('english', %s)")
            params.append(" ".join(plain))
        for term in (t for t in group if t.prefix):
            parts.append(("!!" if term.negated else "") + "to_tsquery('english', %s)")
            params.append(f"{term.words[0]}:*")
        group_sql.append("(" + " && ".join(parts) + ")")
    return " || ".join(group_sql), params


# --- candidates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    namespace: str
    now: datetime
    categories: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


def _filter_sql(filters: Filters, *, alias: str, vendor: str) -> tuple[str, list[Any]]:
    clauses = [f"{alias}.namespace = %s", f"({alias}.expires_at IS NULL OR {alias}.expires_at > %s)"]
    params: list[Any] = [filters.namespace, filters.now]
    if filters.categories:
        clauses.append(f"{alias}.category IN ({', '.join(['%s'] * len(filters.categories))})")
        params.extend(filters.categories)
    find = "strpos" if vendor == "postgresql" else "instr"
    for tag in filters.tags:
        clauses.append(f"{find}({alias}.tag_index, %s) > 0")
        params.append(f"\x1f{tag}\x1f")
    return " AND ".join(clauses), params


def ranked_ids(
    parsed: ParsedQuery, filters: Filters, *, after: tuple[float, int] | None, limit: int
) -> list[tuple[int, float]]:
    """`(item pk, score)` best first (score descending, then pk descending), starting after the
    keyset position `after`; at most `limit` rows."""
    vendor = connection.vendor
    where, params = _filter_sql(filters, alias="i", vendor=vendor)
    if vendor == "postgresql":
        tsquery, q_params = to_pg_tsquery(parsed)
        inner = (
            f"SELECT i.id AS id, ts_rank_cd(i.search, q.q, {PG_RANK_NORMALIZATION})::float8 AS score "  # noqa: S608 - values are bound
            f"FROM memory_memoryitem i, (SELECT {tsquery} AS q) q "
            f"WHERE i.search @@ q.q AND {where}"
        )
        inner_params: list[Any] = [*q_params, *params]
    else:
        inner = (
            f"SELECT i.id AS id, -bm25({FTS_TABLE}, {BM25_WEIGHTS}) AS score "  # noqa: S608 - values are bound
            f"FROM {FTS_TABLE} JOIN memory_memoryitem i ON i.id = {FTS_TABLE}.rowid "
            f"WHERE {FTS_TABLE} MATCH %s AND {where}"
        )
        inner_params = [to_fts5(parsed), *params]
    sql = f"SELECT id, score FROM ({inner}) ranked"  # noqa: S608 - fragments are ours, values bound
    if after is not None:
        sql += " WHERE (score < %s OR (score = %s AND id < %s))"
        inner_params.extend([after[0], after[0], after[1]])
    sql += " ORDER BY score DESC, id DESC LIMIT %s"
    inner_params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, inner_params)
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]


def fts_rebuild(*, item_ids: list[int] | None = None) -> int:
    """Re-project items into SQLite's FTS5 table (all items, or those pks). PostgreSQL's generated
    column cannot drift, so there it only reports how many items it covers."""
    from memory.models import MemoryItem

    queryset = MemoryItem.objects.all()
    if item_ids is not None:
        queryset = queryset.filter(pk__in=item_ids)
    if connection.vendor != "sqlite":
        return queryset.count()
    select = (
        "SELECT id, coalesce(title, ''), replace(tag_index, char(31), ' '), coalesce(category, ''), content "
        "FROM memory_memoryitem"
    )
    insert = f"INSERT INTO {FTS_TABLE}(rowid, title, tags, category, content) "
    with connection.cursor() as cursor:
        if item_ids is None:
            cursor.execute(f"DELETE FROM {FTS_TABLE}")  # noqa: S608 - our table name
            cursor.execute(insert + select)
            return queryset.count()
        pks = list(queryset.values_list("pk", flat=True))
        for start in range(0, len(pks), 500):
            chunk = pks[start : start + 500]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(f"DELETE FROM {FTS_TABLE} WHERE rowid IN ({marks})", chunk)  # noqa: S608
            cursor.execute(f"{insert}{select} WHERE id IN ({marks})", chunk)
    return len(pks)
