"""Recall: ranked, forgiving full-text search with one semantics on PostgreSQL and SQLite.

`query` parses what a person or a model typed, `statements` asks the database for candidates
through its backend (`base` says what a backend answers; `postgres` and `sqlite` are the two),
`scoring` ranks them, and `maintenance` keeps the indexes; `ranked_hits` ties them together.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections

from memory.search.base import Backend, Filters, ItemRecord, ItemRow, item_records, recall_backend_use
from memory.search.maintenance import fts_rebuild, stems_prune, words_prune
from memory.search.postgres import PostgresBackend
from memory.search.query import STOP_WORDS, RecallQuery, analyze, parse_query
from memory.search.scoring import (
    MATCH_ALL,
    MATCH_FUZZY,
    MATCH_RECENT,
    MATCH_SIMILAR,
    MATCH_SOME,
    PREFIX,
    TYPO,
    Hit,
    highlights,
    rank,
    token_matches,
    tokens_of,
    within_edits,
)
from memory.search.sqlite import SqliteBackend
from memory.search.statements import find, find_tolerant, items_by_pk, recent

__all__ = [
    "MATCH_ALL",
    "MATCH_FUZZY",
    "MATCH_RECENT",
    "MATCH_SIMILAR",
    "MATCH_SOME",
    "STOP_WORDS",
    "Filters",
    "Hit",
    "ItemRecord",
    "ItemRow",
    "Ranking",
    "RecallQuery",
    "analyze",
    "backend_for_database",
    "fts_rebuild",
    "highlights",
    "item_records",
    "items_by_pk",
    "parse_query",
    "ranked_hits",
    "recall_backend_use",
    "recent",
    "stems_prune",
    "words_prune",
]


_BY_VENDOR: dict[str, type[Backend]] = {"postgresql": PostgresBackend, "sqlite": SqliteBackend}


def backend_for_database(alias: str = DEFAULT_DB_ALIAS) -> type[Backend]:
    """The recall backend of the database `alias`."""
    return _BY_VENDOR[connections[alias].vendor]


@dataclass
class Ranking:
    hits: list[Hit]
    items: dict[int, ItemRow]  # every hit's item, as `item_records` reads it


def ranked_hits(query: RecallQuery, filters: Filters) -> Ranking:
    """The items in scope that match `query`, best first (see `memory.search.scoring`).

    Words that no item matches as written get a second chance: a word of five letters or more
    matches words within its typo budget, and the last word typed (four letters or more) matches
    words it begins, among the items that share trigrams with it.
    """
    found = find(query, filters)
    candidates = {c.pk: c for c in found.candidates}
    items = found.items
    total = found.total
    df = dict(found.df)
    missing = [i for i, w in enumerate(query.words) if df[f"w{i}"] == 0 and (w.edits or w.surface_prefix)]
    if missing:
        # Item words already checked against a missing word and found not to match it, per word and
        # tolerance: the rows share most of their words, so each is checked once per statement.
        misses: dict[tuple[int, str], set[str]] = {
            (i, kind): set() for i in missing for kind in (PREFIX, TYPO)
        }
        for row in find_tolerant(query, missing, filters, near=found.near):
            total = row.total if total is None else total
            tokens = tokens_of(f"{row.title} {row.labels} {row.content}")  # a space never joins two words
            kinds: dict[int, str] = {}
            for i in missing:
                word = query.words[i]
                if word.surface_prefix and _begun(word.text, tokens, misses[i, PREFIX]):
                    kinds[i] = PREFIX
                elif word.edits and _near(word.text, tokens, word.edits, misses[i, TYPO]):
                    kinds[i] = TYPO
            if not kinds:
                continue
            known = candidates.get(row.candidate.pk)
            if known is None:
                known = candidates[row.candidate.pk] = row.candidate
                items[row.candidate.pk] = row.item
            texts = {"title": row.title, "labels": row.labels, "content": row.content}
            for i, kind in kinds.items():
                df[f"w{i}"] += 1
                known.words[i] = kind
                word = query.words[i]
                known.fields[i] = frozenset(
                    name
                    for name, text in texts.items()
                    if any(token_matches(word, t, kind) for t in tokens_of(text))
                )
    if not candidates:
        return Ranking([], {})
    hits = rank(query, list(candidates.values()), df=df, total=total or 0)
    return Ranking(hits, items)


def _begun(word: str, tokens: set[str], misses: set[str]) -> bool:
    """Whether a token begins with `word`; the tokens that do not join `misses`."""
    fresh = tokens - misses
    if any(t.startswith(word) for t in fresh):
        return True
    misses |= fresh
    return False


def _near(word: str, tokens: set[str], edits: int, misses: set[str]) -> bool:
    """Whether a token is within `edits` typos of `word` (lengths checked before the distance); the
    tokens that are not join `misses`."""
    fresh = tokens - misses
    size = len(word)
    if any(within_edits(word, t, edits) for t in fresh if abs(len(t) - size) <= edits):
        return True
    misses |= fresh
    return False
