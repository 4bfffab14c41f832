"""PostgreSQL keeps every stem the items' `search` holds in `memory_stem`: recall reads it to skip a
prefix scan that could find nothing the written words did not, so the table must follow every write."""

from __future__ import annotations

import json
import threading
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from memory import selectors, services
from memory.scope import MemoryScope, memory_scope
from memory.search.query import WORD_RE, stem
from tests.conftest import make_workflow, node_id

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


def _prune_leftovers() -> None:
    """The stems and words tables are not Django models, so a transactional test's flush leaves rows of
    items it wrote; what an earlier test left is pruned first, so the counts here are this test's own."""
    services.memory_stems_prune(batch=1_000_000)
    services.memory_words_prune(batch=1_000_000)


def _remember(scope: MemoryScope, content: str) -> dict:
    return services.memory_remember(scope=scope, content=content, actor=ACTOR).memory


def test_writes_add_their_stems_and_the_prune_drops_those_no_item_holds(scope):
    _prune_leftovers()
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


@pytest.mark.django_db(transaction=True)
def test_a_prune_waits_for_a_write_in_flight_that_found_its_stem_present(scope, owner):
    """A write that found a stem already listed adds nothing; a prune that checked before it commits
    would not see its item and would drop the stem, hiding the item from prefix matches."""
    second = make_workflow(owner, name="Second")
    other = memory_scope(workflow=second, memory_node_id=node_id(second, "simpleMemory"))
    gardenia = _remember(scope, "A gardenia blooms by the door")
    services.memory_forget(scope=scope, memory_id=gardenia["id"], expected_version=1, actor=ACTOR)
    written, release = threading.Event(), threading.Event()
    kept: list[str] = []
    pruned: list[int] = []

    def write_in_flight() -> None:
        try:
            with transaction.atomic():
                kept.append(_remember(other, "Gardenia cuttings root in water")["id"])
                written.set()
                release.wait(10)
        finally:
            connection.close()

    def prune() -> None:
        try:
            pruned.append(services.memory_stems_prune())
        finally:
            connection.close()

    writer = threading.Thread(target=write_in_flight)
    writer.start()
    assert written.wait(10)
    pruning = threading.Thread(target=prune)
    pruning.start()
    pruning.join(0.5)
    assert pruning.is_alive()  # the prune waits for the write to commit
    release.set()
    writer.join(10)
    pruning.join(10)

    assert pruned
    assert _indexed({"gardenia"}) == {"gardenia"}
    assert _indexed(_stems_of("blooms door")) == set()  # the forgotten item's other words went
    assert [i["id"] for i in selectors.memory_recall(scope=other, query="garden").items] == kept


@pytest.mark.django_db(transaction=True)
def test_a_prune_that_cannot_lock_the_table_in_time_stops_without_an_error(scope, monkeypatch, caplog):
    from memory.search import postgres

    gone = _remember(scope, "Pangolins sleep all day")
    services.memory_forget(scope=scope, memory_id=gone["id"], expected_version=1, actor=ACTOR)
    monkeypatch.setattr(postgres, "STEM_LOCK_TIMEOUT", "50ms")
    written, release = threading.Event(), threading.Event()

    def write_in_flight() -> None:
        try:
            with transaction.atomic():
                _remember(scope, "Otters hold hands")
                written.set()
                release.wait(10)
        finally:
            connection.close()

    writer = threading.Thread(target=write_in_flight)
    writer.start()
    assert written.wait(10)
    try:
        assert services.memory_stems_prune() == 0
    finally:
        release.set()
        writer.join(10)

    assert "memory stems prune stopped" in caplog.text
    assert "pangolin" not in caplog.text  # metadata only
    assert services.memory_stems_prune() >= 1
    assert _indexed({"pangolin"}) == set()


def test_python_stems_every_word_of_the_recall_set_as_the_database_indexes_it(db):
    # Scoring and highlights re-stem item words in Python: a stem that differs from the index's
    # would score or highlight a word the database did not match.
    data = json.loads(
        (Path(__file__).resolve().parents[2] / "bench" / "data" / "recall_set.json").read_text()
    )
    texts = [" ".join([i["title"], i["content"], i["category"], *i["tags"]]) for i in data["items"]]
    texts += [q["query"] for q in data["queries"]]
    # Words of two letters or more: PostgreSQL leaves a word mixing digits and letters unstemmed (its
    # parser's `numword`), and keeps a lone "s" that Porter stems to nothing.
    words = sorted({w.lower() for text in texts for w in WORD_RE.findall(text) if w.isalpha() and len(w) > 1})
    assert len(words) > 1000
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w, tsvector_to_array(to_tsvector('memory_porter', w)) FROM unnest(%s::text[]) AS w",
            [words],
        )
        database = {w: lexemes[0] for w, lexemes in cursor.fetchall() if lexemes}  # stop words index nothing
    assert {w: stem(w) for w in database} == database


def _words_indexed(words: set[str]) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT word FROM memory_word WHERE word = ANY(%s)", [sorted(words)])
        return {row[0] for row in cursor.fetchall()}


def test_writes_add_their_words_and_the_prune_drops_those_no_item_holds(scope):
    _prune_leftovers()
    kept = _remember(scope, "Quokkas nap in the shade")
    item = _remember(scope, "Zanzibar's spices arrive")
    assert _words_indexed({"zanzibar", "s", "spices", "arrive"}) == {"zanzibar", "s", "spices", "arrive"}

    services.memory_update(
        scope=scope,
        memory_id=item["id"],
        expected_version=1,
        patch={"content": "Marmalade arrives"},
        actor=ACTOR,
    )
    assert _words_indexed({"marmalade", "arrives"}) == {"marmalade", "arrives"}
    assert _words_indexed({"zanzibar"}) == {"zanzibar"}  # until the prune runs

    # A word goes once no item holds it as written, even while a word of its stem stays ("arrive"
    # goes, "arrives" stays).
    assert services.memory_words_prune(batch=2) == 4  # zanzibar, s, spices, arrive
    assert _words_indexed({"zanzibar", "spices", "arrive"}) == set()
    assert _words_indexed({"marmalade", "arrives", "quokkas", "shade"}) == {
        "marmalade",
        "arrives",
        "quokkas",
        "shade",
    }
    assert kept["content"] == "Quokkas nap in the shade"


def test_every_word_recall_checks_for_typos_is_in_the_words_table(owner):
    # The typo pass finds its candidates through `memory_word`: an item word the table lacks could
    # never be matched through a typo.
    from memory.search.scoring import tokens_of

    data = json.loads(
        (Path(__file__).resolve().parents[2] / "bench" / "data" / "recall_set.json").read_text()
    )
    workflow = make_workflow(owner, name="Words")
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    tokens: set[str] = set()
    for spec in data["items"]:
        services.memory_remember(
            scope=scope,
            title=spec["title"],
            content=spec["content"],
            category=spec["category"],
            tags=spec["tags"],
            actor=ACTOR,
        )
        tokens |= tokens_of(" ".join([spec["title"], spec["content"], spec["category"], *spec["tags"]]))
    assert len(tokens) > 1000
    assert _words_indexed(tokens) == tokens


def test_a_typo_is_found_only_through_the_words_the_table_lists(scope):
    biscuit = _remember(scope, "The dog is called Biscuit")

    def found(query: str) -> list[str]:
        return [i["id"] for i in selectors.memory_recall(scope=scope, query=query).items]

    assert found("bisquit") == [biscuit["id"]]

    with connection.cursor() as cursor:  # a word the table lost: nothing is near the typo
        cursor.execute("DELETE FROM memory_word WHERE word = 'biscuit'")
    assert found("bisquit") == []

    call_command("rebuild_memory_index", stdout=StringIO())
    assert found("bisquit") == [biscuit["id"]]
