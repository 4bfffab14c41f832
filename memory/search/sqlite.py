"""The SQLite recall backend: FTS5 conditions and the full-text tables' rebuild.

FTS5 tables `memory_item_fts` (porter + unicode61) and `memory_item_trigram` (trigram tokenizer),
kept by triggers in the writing transaction, and the `fts5vocab` table `memory_item_terms` over the
first, where prefixes are looked up among the indexed stems.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from memory.migration_ops import sqlite_trigram_text
from memory.search.base import CTE, ITEM_TABLE, TOLERANT_CANDIDATES, Match, with_ctes
from memory.search.query import QueryWord

FTS_TABLE = "memory_item_fts"
TERMS_TABLE = "memory_item_terms"  # every indexed stem with its item and column (fts5vocab)
TRIGRAM_TABLE = "memory_item_trigram"


_FTS5_COLUMNS = {"title": "title : ", "labels": "{tags category} : ", "content": "content : "}
_TERM_COLUMNS = {"title": "'title'", "labels": "'tags', 'category'", "content": "'content'"}


def _fts5(match: Match) -> str:
    # Words are runs of letters/digits only, so a double-quoted string is always literal text.
    return '"' + " ".join(match[1]) + '"'


def _prefix_range(prefix: str) -> list[str]:
    # The stems that begin with `prefix`: FTS5 compares terms as UTF-8 bytes, which order as code points.
    return [prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)]


def padded_trigrams(word: str) -> list[str]:
    """The trigrams of a word with a space on each side: a typo leaves at least one of them."""
    padded = f" {word} "
    return list(dict.fromkeys(padded[i : i + 3] for i in range(len(padded) - 2)))


class SqliteBackend:
    vendor = "sqlite"
    position = "instr"
    # Some parameters are computed from the words (prefix ranges, trigrams), not bound as given, so a
    # statement cannot be compiled once from placeholders.
    reuses_statements = False

    def join(self) -> str:
        return ""

    def statement(
        self, sql: str, params: list[Any], *, ctes: list[CTE] | None = None
    ) -> tuple[str, list[Any]]:
        return with_ctes(ctes or [], sql, params)

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
