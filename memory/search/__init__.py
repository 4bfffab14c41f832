"""Recall: ranked, forgiving full-text search with one semantics on PostgreSQL and SQLite.

`query` parses what a person or a model typed, `backends` asks the database for candidates, and
`scoring` ranks them; `ranked_hits` ties the three together.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory.search.backends import Filters, ItemRow, find, find_tolerant, fts_rebuild, items_from_rows, recent
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

__all__ = [
    "MATCH_ALL",
    "MATCH_FUZZY",
    "MATCH_RECENT",
    "MATCH_SIMILAR",
    "MATCH_SOME",
    "STOP_WORDS",
    "Filters",
    "Hit",
    "ItemRow",
    "Ranking",
    "RecallQuery",
    "analyze",
    "fts_rebuild",
    "highlights",
    "items_from_rows",
    "parse_query",
    "ranked_hits",
    "recent",
]


@dataclass
class Ranking:
    hits: list[Hit]
    items: dict[int, ItemRow]  # every hit's item, as `items_from_rows` reads it


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
        for row in find_tolerant(query, missing, filters):
            total = row.total if total is None else total
            texts = {
                "title": tokens_of(row.title),
                "labels": tokens_of(row.labels),
                "content": tokens_of(row.content),
            }
            tokens = set().union(*texts.values())
            kinds: dict[int, str] = {}
            for i in missing:
                word = query.words[i]
                if word.surface_prefix and any(t.startswith(word.text) for t in tokens):
                    kinds[i] = PREFIX
                elif word.edits and _near(word.text, tokens, word.edits):
                    kinds[i] = TYPO
            if not kinds:
                continue
            known = candidates.get(row.candidate.pk)
            if known is None:
                known = candidates[row.candidate.pk] = row.candidate
                items[row.candidate.pk] = row.item
            for i, kind in kinds.items():
                df[f"w{i}"] += 1
                known.words[i] = kind
                word = query.words[i]
                known.fields[i] = {
                    name for name, found in texts.items() if any(token_matches(word, t, kind) for t in found)
                }
    if not candidates:
        return Ranking([], {})
    hits = rank(query, list(candidates.values()), df=df, total=total or 0)
    return Ranking(hits, items)


def _near(word: str, tokens: set[str], edits: int) -> bool:
    """Whether a token is within `edits` typos of `word` (lengths checked before the distance)."""
    size = len(word)
    return any(within_edits(word, t, edits) for t in tokens if abs(len(t) - size) <= edits)
