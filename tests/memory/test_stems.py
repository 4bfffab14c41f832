"""PostgreSQL keeps every stem the items' `search` holds in `memory_stem`: recall reads it to skip a
prefix scan that could find nothing the written words did not, so the table must follow every write."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from memory import selectors, services
from memory.scope import MemoryScope

pytestmark = pytest.mark.postgres

ACTOR = "system:stems"


def _stems_of(text: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector('memory_porter', %s))", [text])
        return set(cursor.fetchone()[0])


def _indexed(stems: set[str]) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT stem FROM memory_stem WHERE stem = ANY(%s)", [sorted(stems)])
        return {row[0] for row in cursor.fetchall()}


def _remember(scope: MemoryScope, content: str) -> dict:
    return services.memory_remember(scope=scope, content=content, actor=ACTOR).memory


def test_writes_add_their_stems_and_the_prune_drops_those_no_item_holds(scope):
    kept = _remember(scope, "Quokkas nap in the shade")
    first = _stems_of("Zanzibar spices arrive")
    item = _remember(scope, "Zanzibar spices arrive")
    assert _indexed(first) == first

    updated = services.memory_update(
        scope=scope,
        memory_id=item["id"],
        expected_version=1,
        patch={"content": "Marmalade arrives"},
        actor=ACTOR,
    ).memory
    assert _indexed(_stems_of("Marmalade")) == _stems_of("Marmalade")

    services.memory_forget(scope=scope, memory_id=updated["id"], expected_version=2, actor=ACTOR)
    gone = _stems_of("Zanzibar spices arrive marmalade")
    assert _indexed(gone) == gone  # until the prune runs

    assert services.memory_stems_prune(batch=2) == len(gone)
    assert _indexed(gone) == set()
    assert _indexed(_stems_of(kept["content"])) == _stems_of(kept["content"])


def test_recall_widens_a_prefix_only_through_the_stems_it_lists(scope):
    garden = _remember(scope, "The garden needs water")
    gardenia = _remember(scope, "A gardenia blooms by the door")

    def found(query: str) -> list[str]:
        return [i["id"] for i in selectors.memory_recall(scope=scope, query=query).items]

    assert set(found("garden")) == {garden["id"], gardenia["id"]}

    with connection.cursor() as cursor:  # a stem the table lost: the prefix scan is skipped
        cursor.execute("DELETE FROM memory_stem WHERE stem = 'gardenia'")
    assert found("garden") == [garden["id"]]

    call_command("rebuild_memory_index", stdout=StringIO())
    assert set(found("garden")) == {garden["id"], gardenia["id"]}
