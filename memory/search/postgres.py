"""The PostgreSQL recall backend: its conditions, its statements' one-row `q`, and its index upkeep.

A stored generated `tsvector` (`search`, text search configuration `memory_porter`: Porter stems of
every word, punctuation read as spaces) with a GIN index over `(namespace, search)`, and a `pg_trgm`
GIN index over `(namespace, item text)`; prefixes are stem prefixes read by the `simple`
configuration, so they are not stemmed again, and a prefix is scanned only when the table
`memory_stem` (every indexed stem, kept by triggers) lists a stem it begins beyond the written words'
own; `memory_word` (every word items hold, with a trigram index, kept by the same triggers) is where
a misspelled word's near words are looked up.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import OperationalError, connection, transaction

from memory.migration_ops import PG_TRIGRAM_TEXT, pg_item_words
from memory.search.base import CTE, ITEM_TABLE, Match, with_ctes
from memory.search.query import QueryWord
from opencompany.core.db import hot_fetchall

logger = logging.getLogger(__name__)

STEM_TABLE = "memory_stem"  # every stem some item's `search` holds (migration 0006)
WORD_TABLE = "memory_word"  # every word some item holds, as written (migration 0007)
STEM_LOCK_TIMEOUT = "2s"  # how long a stems or words prune waits for item writes in flight
LOCK_NOT_AVAILABLE = "55P03"
PG_CONFIG = "memory_porter"
PG_RAW_CONFIG = "simple"  # reads a prefix as given: the stem prefix is chosen in Python
TRIGRAM_THRESHOLD = 0.3  # pg_trgm word similarity a typo candidate needs (most one-typo words reach it)


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


# An entry being pruned as a quoted tsquery lexeme: quotes (39) and backslashes (92) doubled.
_PG_QUOTED_ENTRY = "(chr(39) || replace(replace(b.entry, chr(92), chr(92) || chr(92)), chr(39), chr(39) || chr(39)) || chr(39))"


class PostgresBackend:
    """Every tsquery of a statement is parsed once, in a one-row `q` it joins: written inline, a
    prepared statement's generic plan would parse and stem it again for every row it looks at."""

    vendor = "postgresql"
    position = "strpos"
    reuses_statements = True

    def __init__(self) -> None:
        self._queries: dict[tuple[str, ...], str] = {}  # (config, text, ...) → column of `q`

    def _ref(self, *key: str) -> str:
        return "q." + self._queries.setdefault(key, f"t{len(self._queries)}")

    def join(self) -> str:
        return " CROSS JOIN q" if self._queries else ""

    def statement(
        self, sql: str, params: list[Any], *, ctes: list[CTE] | None = None
    ) -> tuple[str, list[Any]]:
        named: list[CTE] = []
        if self._queries:
            columns: list[str] = []
            prelude: list[Any] = []
            for key, alias in self._queries.items():
                parts = [f"to_tsquery('{key[n]}', %s)" for n in range(0, len(key), 2)]
                columns.append(f"({' || '.join(parts)}) AS {alias}")
                prelude += key[1::2]
            named.append(("q", f"SELECT {', '.join(columns)}", prelude))
        return with_ctes([*named, *(ctes or [])], sql, params)

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
