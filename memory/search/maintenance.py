"""Upkeep of the recall indexes, whatever the database: each backend does its own part."""

from __future__ import annotations

from memory.search.base import get_backend


def fts_rebuild(*, item_ids: list[int] | None = None) -> int:
    """Re-project items into the full-text tables (all items, or those pks); returns how many."""
    return get_backend().rebuild(item_ids)


def stems_prune(*, batch: int = 200) -> int:
    """Delete the indexed stems no item holds any more (PostgreSQL); returns how many."""
    return get_backend().prune_stems(batch)


def words_prune(*, batch: int = 200) -> int:
    """Delete the indexed words no item holds any more (PostgreSQL); returns how many."""
    return get_backend().prune_words(batch)
