"""Recall: one semantics on PostgreSQL and SQLite (this module runs in both passes against the same
fixed expectations, so passing twice proves the two databases agree)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from memory import selectors, services
from opencompany.core.errors import ApplicationError
from tests.memory.recall_fixtures import load_items

# (query, filters, expected keys best first)
PARITY_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("espresso", {}, ["espresso_title", "espresso_content"]),
    ("the espresso", {}, ["espresso_title", "espresso_content"]),
    ('"green tea"', {}, ["green_tea"]),
    ('"cup of coffee"', {}, ["cup_of_coffee"]),
    ("cherry blossoms", {}, ["vacation"]),
    ("tea -green", {}, ["black_tea"]),
    ("rust -kyoto", {}, ["languages"]),
    ("backend -design", {}, []),
    ("kyoto or osaka", {}, ["vacation"]),
    ('"green tea" or kyoto', {}, ["green_tea", "vacation"]),
    ("standup or standing", {}, ["meetings", "espresso_title"]),
    ("e-mail or kreuzberg", {}, ["cafes"]),
    ("roast*", {}, ["roasting"]),
    ("meet*", {}, ["meetings"]),
    ("pyth*", {}, ["languages"]),
    ("berlin*", {}, ["cafes"]),
    ("run*", {}, ["running"]),
    ("atlas", {}, ["atlas_deadline", "atlas_team"]),
    ("atlas deadline", {}, ["atlas_deadline"]),
    ("weekends", {}, ["black_tea", "languages"]),
    ("allergic", {}, ["allergy"]),
    ("peanuts", {}, ["allergy"]),
    ("birthday cake", {}, ["birthday"]),
    ("routine", {}, ["espresso_content", "running"]),
    ("morning", {}, ["espresso_content", "espresso_title"]),
    ("morning", {"categories": ["food"]}, ["espresso_title"]),
    ("coffee", {"tags": ["coffee"]}, ["roasting", "espresso_title"]),
    ("coffee", {"categories": ["places", "hobbies"]}, ["roasting", "cafes"]),
    ("tea", {"categories": ["food"], "tags": ["tea"]}, ["green_tea", "black_tea"]),
    ("shops", {}, ["cafes"]),
    ("kilometres", {}, ["running"]),
    ("february", {}, ["atlas_deadline"]),
    ("double shot", {}, ["espresso_title"]),
]


@pytest.mark.parametrize(
    ("query", "filters", "expected"), PARITY_CASES, ids=[c[0] + str(c[1]) for c in PARITY_CASES]
)
def test_recall_gives_the_same_ranked_results_on_both_databases(scope, query, filters, expected):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query=query, limit=100, **filters)

    assert [item["id"] for item in page.items] == [ids[key] for key in expected]
    assert page.retrieval == "fts"
    assert page.degraded is None
    assert page.next_cursor is None


def test_recall_pages_to_the_end_without_duplicates_or_gaps(scope):
    load_items(scope)
    query = "coffee or tea or atlas or routine or work"
    everything = [i["id"] for i in selectors.memory_recall(scope=scope, query=query, limit=100).items]

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = selectors.memory_recall(scope=scope, query=query, limit=3, cursor=cursor)
        seen.extend(i["id"] for i in page.items)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break

    assert len(everything) == 12
    assert seen == everything
    assert pages == 4


def test_list_pages_newest_first_to_the_end(scope):
    ids = load_items(scope)
    seen: list[str] = []
    cursor = None
    while True:
        page = selectors.memory_list(scope=scope, limit=4, cursor=cursor)
        seen.extend(i["id"] for i in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break

    active = [ids[k] for k in ids if k != "expired_espresso"]
    assert seen == list(reversed(active))


def test_tampered_cursor_is_invalid_cursor(scope):
    load_items(scope)
    page = selectors.memory_recall(scope=scope, query="coffee or tea", limit=2)
    tampered = page.next_cursor[:-2] + ("A" if page.next_cursor[-2] != "A" else "B") + page.next_cursor[-1]

    with pytest.raises(ApplicationError) as exc:
        selectors.memory_recall(scope=scope, query="coffee or tea", limit=2, cursor=tampered)

    assert exc.value.code == "invalid_cursor"


def test_cursor_from_another_query_or_namespace_is_invalid_cursor(scope, other_scope):
    load_items(scope)
    load_items(other_scope)
    cursor = selectors.memory_recall(scope=scope, query="coffee or tea", limit=2).next_cursor

    with pytest.raises(ApplicationError) as other_query:
        selectors.memory_recall(scope=scope, query="atlas", limit=2, cursor=cursor)
    with pytest.raises(ApplicationError) as other_namespace:
        selectors.memory_recall(scope=other_scope, query="coffee or tea", limit=2, cursor=cursor)

    assert other_query.value.code == "invalid_cursor"
    assert other_namespace.value.code == "invalid_cursor"


def test_expired_items_never_appear_in_recall_list_or_get(scope):
    ids = load_items(scope)
    expired = ids["expired_espresso"]

    recalled = [
        i["id"] for i in selectors.memory_recall(scope=scope, query="espresso or machine", limit=100).items
    ]
    listed = [i["id"] for i in selectors.memory_list(scope=scope, limit=100).items]
    with pytest.raises(ApplicationError) as exc:
        selectors.memory_get(scope=scope, memory_id=expired)

    assert expired not in recalled
    assert expired not in listed
    assert exc.value.code == "not_found"


def test_item_that_expires_later_disappears_once_its_time_passes(scope, monkeypatch):
    item = services.memory_remember(
        scope=scope,
        content="Parking spot 42",
        expires_at=timezone.now() + timedelta(hours=1),
        actor="owner:1",
    ).memory
    assert [i["id"] for i in selectors.memory_recall(scope=scope, query="parking").items] == [item["id"]]

    later = timezone.now() + timedelta(hours=2)
    monkeypatch.setattr("memory.selectors.timezone.now", lambda: later)

    assert selectors.memory_recall(scope=scope, query="parking").items == []


@pytest.mark.parametrize("query", ["!!!", "the and of", "-coffee", "  or  "])
def test_query_without_searchable_words_is_invalid_request(scope, query):
    load_items(scope)

    with pytest.raises(ApplicationError) as exc:
        selectors.memory_recall(scope=scope, query=query)

    assert exc.value.code == "invalid_request"
    assert "query" in exc.value.extra["fields"]


def test_fts_syntax_characters_in_a_query_are_searched_as_words_not_executed(scope):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query='peanuts) OR NEAR(" title:* ^tea')

    # peanuts | (near & "title tea"): FTS5/tsquery operators in the text are only words here.
    assert [i["id"] for i in page.items] == [ids["allergy"]]
    assert selectors.memory_recall(scope=scope, query='NEAR("tea" "green") title:tea').items == []
