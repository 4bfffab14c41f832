"""PostgreSQL: the `(namespace, search)` index takes new entries directly, so no burst of writes leaves
a pending list for every recall to read."""

from __future__ import annotations

import pytest
from django.db import connection

from memory import services


@pytest.mark.postgres
def test_writes_leave_nothing_pending_in_the_full_text_index(scope):
    for n in range(40):
        services.memory_remember(
            scope=scope, content=f"Burst note {n}: espresso, kyoto, atlas deadline", actor="owner:1"
        )

    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'memory_item_ns_search_gin'")
        options = cursor.fetchone()[0]
        cursor.execute("SELECT gin_clean_pending_list('memory_item_ns_search_gin'::regclass)")
        search_pending = cursor.fetchone()[0]
        cursor.execute("SELECT gin_clean_pending_list('memory_item_trigram_gin'::regclass)")
        trigram_pending = cursor.fetchone()[0]

    assert options == ["fastupdate=off"]
    assert search_pending == 0
    # The trigram index keeps its pending list (an item adds hundreds of trigrams): the same writes left
    # pages there, so the check above is not vacuous.
    assert trigram_pending > 0
