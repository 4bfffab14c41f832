"""Recall: ranked, forgiving full-text search with one semantics on PostgreSQL and SQLite.

`query` parses what a person or a model typed, `backends` asks the database for candidates, and
`scoring` ranks them; `ranked_hits` ties the three together.
"""

from __future__ import annotations

from memory.search.backends import Filters, find, find_tolerant, fts_rebuild, namespace_total, recent
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
    "RecallQuery",
    "analyze",
    "fts_rebuild",
    "highlights",
    "parse_query",
    "ranked_hits",
    "recent",
]


def ranked_hits(query: RecallQuery, filters: Filters) -> list[Hit]:
    """The items in scope that match `query`, best first (see `memory.search.scoring`).

    Words that no item matches as written get a second chance: a word of five letters or more
    matches words within its typo budget, and the last word typed (four letters or more) matches
    words it begins, among the items that share trigrams with it.
    """
    found = find(query, filters)
    candidates = {c.pk: c for c in found.candidates}
    df = dict(found.df)
    missing = [i for i, w in enumerate(query.words) if df[f"w{i}"] == 0 and (w.edits or w.surface_prefix)]
    if missing:
        for row in find_tolerant(query, missing, filters):
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
            for i, kind in kinds.items():
                df[f"w{i}"] += 1
                known.words[i] = kind
                word = query.words[i]
                known.fields[i] = {
                    name for name, found in texts.items() if any(token_matches(word, t, kind) for t in found)
                }
    if not candidates:
        return []
    total = found.total if found.total is not None else namespace_total(filters.namespace)
    return rank(query, list(candidates.values()), df=df, total=total)


def _near(word: str, tokens: set[str], edits: int) -> bool:
    """Whether a token is within `edits` typos of `word` (lengths checked before the distance)."""
    size = len(word)
    return any(within_edits(word, t, edits) for t in tokens if abs(len(t) - size) <= edits)
