"""PostgreSQL: the `(namespace, search)` index keeps a small pending list, so a burst of writes never
leaves recall a long list to read."""

from __future__ import annotations

import pytest
from django.db import connection

from memory import services

PAGE_KB = 8


def _pending_pages(index: str) -> int:
    """Merges the index's pending list and returns how many pages it held."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index])
        return int(cursor.fetchone()[0])


@pytest.mark.postgres
def test_a_burst_of_writes_leaves_at_most_64_kb_pending_in_the_full_text_index(scope):
    _pending_pages("memory_item_ns_search_gin")
    _pending_pages("memory_item_trigram_gin")
    for n in range(300):
        services.memory_remember(
            scope=scope,
            content=f"Burst note {n}: word{n}a word{n}b word{n}c word{n}d espresso kyoto atlas deadline",
            actor="owner:1",
        )

    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'memory_item_ns_search_gin'")
        options = cursor.fetchone()[0]

    assert options == ["gin_pending_list_limit=64"]
    assert 0 < _pending_pages("memory_item_ns_search_gin") <= 64 // PAGE_KB
    # The trigram index keeps the default limit (4 MB): the same writes left it a longer list, so the
    # bound above is the setting's doing, not the burst's size.
    assert _pending_pages("memory_item_trigram_gin") > 64 // PAGE_KB
