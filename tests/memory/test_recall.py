"""Recall: one semantics on PostgreSQL and SQLite (this module runs in both passes against the same
fixed expectations, so passing twice proves the two databases agree)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import selectors, services
from memory.fields import QUERY_MAX
from memory.models import MemoryItem
from memory.scope import memory_scope
from memory.search import analyze
from memory.search.postgres import PostgresBackend
from opencompany.core.errors import ApplicationError
from opencompany.core.gate import bad_char_message
from tests.conftest import make_workflow, node_id
from tests.memory.recall_fixtures import ITEMS, load_items

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
    ("standup or standing", {}, ["espresso_title", "meetings"]),
    ("e-mail or kreuzberg", {}, ["cafes"]),
    ("roast*", {}, ["roasting"]),
    ("meet*", {}, ["meetings"]),
    ("pyth*", {}, ["languages"]),
    ("berlin*", {}, ["cafes"]),
    ("run*", {}, ["running", "staging_db"]),
    ("atlas", {}, ["atlas_deadline", "atlas_team"]),
    ("atlas deadline", {}, ["atlas_deadline", "atlas_team"]),
    ("weekends", {}, ["black_tea", "languages"]),
    ("allergic", {}, ["allergy"]),
    ("peanuts", {}, ["allergy"]),
    ("peanut allergy", {}, ["allergy"]),
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
    ("morning coffee", {}, ["espresso_title", "espresso_content", "roasting", "cafes", "cup_of_coffee"]),
    ("green coffee beans", {}, ["roasting", "green_tea", "cafes", "espresso_title", "cup_of_coffee"]),
    ("staging postgres", {}, ["staging_db"]),
    ("postgresql", {}, ["staging_db"]),
    ("dog's name", {}, ["dog"]),
    ("coff", {}, ["roasting", "cafes", "espresso_title", "cup_of_coffee"]),
    ("meetin", {}, ["meetings"]),
    ("expresso", {}, ["espresso_title", "espresso_content"]),
    ("bisquit", {}, ["dog"]),
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


def test_every_result_says_why_it_matched(scope):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query="staging postgres")

    assert [(i["id"], i["match"], i["matched"], i["highlight"]) for i in page.items] == [
        (ids["staging_db"], "all", ["staging", "postgres"], ["staging", "postgresql"])
    ]
    assert page.items[0]["score"] == pytest.approx(5.756155)


def test_a_natural_question_finds_the_item_by_its_content_words(scope):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query="What is my dog's name?")

    assert [(i["id"], i["match"], i["matched"]) for i in page.items] == [(ids["dog"], "some", ["dog"])]


@pytest.mark.parametrize(
    ("query", "expected", "highlight"),
    [
        ("bisquit", ["dog"], ["biscuit"]),
        ("expresso", ["espresso_title", "espresso_content"], ["espresso"]),
        ("kreuzburg", ["cafes"], ["kreuzberg"]),
        ("blossms cherry", ["vacation"], ["cherry", "blossoms"]),
    ],
)
def test_a_misspelled_word_of_five_letters_or_more_finds_its_item(scope, query, expected, highlight):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query=query)

    assert [i["id"] for i in page.items] == [ids[key] for key in expected]
    assert {i["match"] for i in page.items} == {"fuzzy"}
    assert page.items[0]["highlight"] == highlight


@pytest.mark.parametrize("query", ["kyto", "teaa", "5434"])
def test_a_word_shorter_than_five_letters_or_with_digits_gets_no_typo_tolerance(scope, query):
    load_items(scope)

    assert selectors.memory_recall(scope=scope, query=query).items == []


def test_a_word_that_matches_as_written_is_not_also_matched_by_its_typos(scope):
    barking = services.memory_remember(scope=scope, content="Barking dogs next door", actor="owner:1").memory
    parking = services.memory_remember(scope=scope, content="Parking at the mall", actor="owner:1").memory

    as_written = selectors.memory_recall(scope=scope, query="barking")
    misspelled = selectors.memory_recall(scope=scope, query="darking")

    assert [(i["id"], i["match"]) for i in as_written.items] == [(barking["id"], "all")]
    assert [(i["id"], i["match"]) for i in misspelled.items] == [
        (parking["id"], "fuzzy"),
        (barking["id"], "fuzzy"),
    ]


@pytest.mark.parametrize(
    ("query", "highlight"), [("coff", ["coffee"]), ("cof", ["coffee"]), ("Coff", ["coffee"])]
)
def test_the_last_word_as_typed_matches_words_it_begins(scope, query, highlight):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query=query)

    assert [i["id"] for i in page.items] == [
        ids[k] for k in ("roasting", "cafes", "espresso_title", "cup_of_coffee")
    ]
    assert (page.items[0]["match"], page.items[0]["matched"], page.items[0]["highlight"]) == (
        "all",
        [query.lower()],
        highlight,
    )


@pytest.mark.parametrize(("query", "found", "missed"), [("one", "One", "Only"), ("cas", "Cases", "Cats")])
def test_a_word_whose_stem_is_shorter_than_three_letters_is_a_prefix_as_typed(scope, query, found, missed):
    # "one" stems to "on" and "cas" to "ca": a prefix of those stems would find every "on…" and "ca…" word.
    typed = services.memory_remember(scope=scope, content=f"{found} to keep", actor="owner:1").memory
    services.memory_remember(scope=scope, content=f"{missed} to keep", actor="owner:1")

    page = selectors.memory_recall(scope=scope, query=query)

    assert [i["id"] for i in page.items] == [typed["id"]]


def test_a_last_word_matched_as_written_counts_the_fields_it_is_in(scope):
    # "one" looks for stems beginning "one", but "One" in a title is indexed as "on": still a title match.
    in_title = services.memory_remember(
        scope=scope, title="One", content="Espresso at nine.", actor="owner:1"
    ).memory
    in_content = services.memory_remember(scope=scope, content="Drink one.", actor="owner:1").memory

    page = selectors.memory_recall(scope=scope, query="one")

    assert [i["id"] for i in page.items] == [in_title["id"], in_content["id"]]


def test_a_last_word_that_fills_the_candidates_as_written_is_not_also_a_prefix(scope):
    from memory.search.base import CANDIDATES

    for n in range(CANDIDATES - 1):
        services.memory_remember(scope=scope, content=f"Coffee note {n}", actor="owner:1")
    completed = services.memory_remember(
        scope=scope, title="Coffeehouse", content="On the corner", actor="owner:1"
    )

    widened = selectors.memory_recall(scope=scope, query="coffee", limit=100)
    services.memory_remember(scope=scope, content="Coffee note, the last one", actor="owner:1")
    written = selectors.memory_recall(scope=scope, query="coffee", limit=100)

    assert completed.memory["id"] in [i["id"] for i in widened.items]
    assert completed.memory["id"] not in [i["id"] for i in written.items]


def test_a_word_of_four_letters_or_more_matches_the_compound_it_begins(scope):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query="postgres staging")

    assert [(i["id"], i["match"], i["matched"]) for i in page.items] == [
        (ids["staging_db"], "fuzzy", ["postgres", "staging"])
    ]


def test_an_item_matching_every_word_ranks_above_one_matching_some_even_when_it_scores_less(scope):
    short = services.memory_remember(
        scope=scope, content="Zebra.", title="Zebra", tags=["zebra"], actor="owner:1"
    ).memory
    both = services.memory_remember(
        scope=scope,
        content="At the zoo we watched a zebra eat lettuce for lunch while the keeper talked about "
        "feeding schedules, water troughs and the long walk the herd makes every morning.",
        actor="owner:1",
    ).memory
    for n in range(3):
        services.memory_remember(scope=scope, content=f"Lunch plan {n}: soup", actor="owner:1")

    page = selectors.memory_recall(scope=scope, query="zebra lunch")

    assert [(i["id"], i["match"]) for i in page.items[:2]] == [(both["id"], "all"), (short["id"], "some")]
    assert page.items[1]["score"] > page.items[0]["score"]


def test_a_question_of_four_words_or_more_ranks_by_score_alone(scope):
    short = services.memory_remember(
        scope=scope, content="Zebra.", title="Zebra", tags=["zebra"], actor="owner:1"
    ).memory
    every = services.memory_remember(
        scope=scope,
        content="At the zoo today we watched a zebra eat lettuce for lunch while the keeper talked about "
        "feeding schedules, water troughs, the vet's visits, the new enclosure being built behind the "
        "aviary, the long walk the herd makes every morning and how the foals are weaned in spring.",
        actor="owner:1",
    ).memory
    for n in range(3):
        services.memory_remember(
            scope=scope, content=f"Lunch plan {n}: soup at the zoo today", actor="owner:1"
        )

    question = selectors.memory_recall(
        scope=scope, query="what did the zebra have for lunch at the zoo today?"
    )
    search = selectors.memory_recall(scope=scope, query="zebra lunch zoo")

    # Four words (zebra, lunch, zoo, today): the long item holds them all, by chance as much as not.
    assert [(i["id"], i["match"]) for i in question.items[:2]] == [
        (short["id"], "some"),
        (every["id"], "all"),
    ]
    assert question.items[0]["score"] > question.items[1]["score"]
    # Three words: a search, and the item holding all of them comes first.
    assert [(i["id"], i["match"]) for i in search.items[:2]] == [(every["id"], "all"), (short["id"], "some")]


def test_rarer_words_weigh_more(scope):
    common = [
        services.memory_remember(scope=scope, content=f"Coffee note {n}", actor="owner:1").memory["id"]
        for n in range(5)
    ]
    rare = services.memory_remember(scope=scope, content="Kyoto note", actor="owner:1").memory["id"]

    page = selectors.memory_recall(scope=scope, query="coffee kyoto")

    assert [i["id"] for i in page.items] == [rare, *reversed(common)]
    assert {i["match"] for i in page.items} == {"some"}


@pytest.mark.parametrize(
    "query", ["what do you remember about me?", "anything?", "!!!", "the and of", "  or  "]
)
def test_a_query_without_searchable_words_answers_the_most_recently_updated_items(scope, query):
    ids = load_items(scope)
    espresso = selectors.memory_get(scope=scope, memory_id=ids["espresso_title"])
    services.memory_update(
        scope=scope,
        memory_id=espresso["id"],
        expected_version=1,
        patch={"title": "Espresso"},
        actor="owner:1",
    )

    page = selectors.memory_recall(scope=scope, query=query, limit=3)

    assert [i["id"] for i in page.items] == [ids["espresso_title"], ids["dog"], ids["staging_db"]]
    assert [(i["match"], i["matched"], i["score"], i["highlight"]) for i in page.items] == [
        ("recent", [], 0.0, [])
    ] * 3
    assert page.retrieval == "recent"
    assert page.next_cursor is not None


def test_recent_answers_page_to_the_end_newest_first(scope):
    ids = load_items(scope)
    seen: list[str] = []
    cursor = None
    while True:
        page = selectors.memory_recall(scope=scope, query="anything?", limit=4, cursor=cursor)
        seen.extend(i["id"] for i in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break

    active = [ids[k] for k in ids if k != "expired_espresso"]
    assert seen == list(reversed(active))


def test_recent_answers_leave_out_what_the_query_excludes(scope):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query="-coffee -tea", limit=100)

    coffee_or_tea = {
        "espresso_title",
        "cafes",
        "roasting",
        "cup_of_coffee",
        "green_tea",
        "black_tea",
        "expired_espresso",
    }
    assert [i["id"] for i in page.items] == [ids[k] for k in reversed(list(ids)) if k not in coffee_or_tea]


@pytest.mark.parametrize("query", ["", "   ", "x" * (QUERY_MAX + 1)])
def test_a_blank_or_over_long_query_is_invalid_request(scope, query):
    load_items(scope)

    with pytest.raises(ApplicationError) as exc:
        selectors.memory_recall(scope=scope, query=query)

    assert exc.value.code == "invalid_request"
    assert list(exc.value.extra["fields"]) == ["query"]


def test_a_forged_cursor_position_is_invalid_cursor(scope):
    from opencompany.core.pagination import make_cursor

    load_items(scope)
    query = "coffee or tea"
    forged = make_cursor(salt="memory", bound_to=[scope.namespace, "fts", query, [], []], position=["x", 1])

    with pytest.raises(ApplicationError) as exc:
        selectors.memory_recall(scope=scope, query=query, cursor=forged)

    assert exc.value.code == "invalid_cursor"


def test_fts_syntax_characters_in_a_query_are_searched_as_words_not_executed(scope):
    ids = load_items(scope)

    page = selectors.memory_recall(scope=scope, query='peanuts) OR NEAR(" title:* ^tea')
    near = selectors.memory_recall(scope=scope, query='NEAR("tea" "green") title:tea')

    # peanuts, or (near and the phrase "title tea"): operators of FTS5 and tsquery are only words here.
    assert [i["id"] for i in page.items] == [ids["allergy"]]
    assert [(i["id"], i["matched"]) for i in near.items] == [
        (ids["green_tea"], ["tea", "green"]),
        (ids["black_tea"], ["tea"]),
        (ids["roasting"], ["green"]),
        (ids["atlas_team"], ["tea"]),
    ]


_SYNTAX = st.sampled_from(
    [*"\"-*()^:~{}[]|&!<>'/+.,?%_\x00 ", "or", "OR", "AND", "NOT", "NEAR", "title:", "e-mail"]
)
_QUERIES = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.one_of(_SYNTAX, st.text(alphabet="abcdeiklmnoprstuy", min_size=1, max_size=12)), max_size=30
    ).map("".join),
    st.text(min_size=QUERY_MAX - 5, max_size=QUERY_MAX + 5, alphabet='ab "-'),
)


@pytest.fixture
def loaded_scope(scope):
    load_items(scope)
    return scope


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_QUERIES)
def test_any_text_is_answered_or_refused_with_a_clear_code_never_a_database_error(loaded_scope, text):
    # Blank, over-long, or holding a character no database column stores (a NUL, a lone surrogate).
    if not text.strip() or len(text) > QUERY_MAX or bad_char_message(text) is not None:
        with pytest.raises(ApplicationError) as exc:
            selectors.memory_recall(scope=loaded_scope, query=text, limit=5)
        assert exc.value.code == "invalid_request"
    else:
        page = selectors.memory_recall(scope=loaded_scope, query=text, limit=5)
        assert len(page.items) <= 5
        assert {i["match"] for i in page.items} <= {"all", "some", "fuzzy", "recent"}
    with connection.cursor() as cursor:  # the connection is still usable: no aborted transaction
        cursor.execute("SELECT 1")
    assert MemoryItem.objects.filter(namespace=loaded_scope.namespace).count() == len(ITEMS)


def test_a_postgresql_statement_parses_each_tsquery_once_in_a_row_it_joins():
    # Inline, a generic plan would parse and stem `to_tsquery(…, $n)` again for every candidate row.
    backend = PostgresBackend()
    word = backend.cond(("word", ("coffee",)))
    again = backend.cond(("word", ("coffee",)))
    prefix = backend.cond(("prefix", ("cof",)), field="title")

    joined = backend.join()
    sql, params = backend.statement(f"SELECT i.id FROM memory_memoryitem i{joined} WHERE %s", [1])  # noqa: S608

    assert word == again == ("(i.search @@ q.t0)", [])
    assert prefix == ("(i.search @@ q.t1)", [])
    assert sql == (
        "WITH q AS MATERIALIZED (SELECT (to_tsquery('memory_porter', %s)) AS t0, "
        "(to_tsquery('simple', %s)) AS t1) SELECT i.id FROM memory_memoryitem i CROSS JOIN q WHERE %s"
    )
    assert params == ["'coffee'", "'cof':*A", 1]


def test_a_recall_reads_its_candidates_and_what_it_shows_of_them_in_one_statement(
    scope, django_assert_num_queries
):
    ids = load_items(scope)
    later = services.memory_remember(
        scope=scope,
        content="Renew the espresso machine warranty.",
        title="Warranty",
        tags=["coffee", "admin"],
        expires_at=timezone.now() + timedelta(days=30),
        actor="owner:1",
    ).memory

    with django_assert_num_queries(1):
        page = selectors.memory_recall(scope=scope, query="espresso")

    assert {i["id"] for i in page.items} == {ids["espresso_title"], ids["espresso_content"], later["id"]}
    for item in page.items:
        shown = {key: item[key] for key in item if key not in {"score", "matched", "match", "highlight"}}
        assert shown == selectors.memory_get(scope=scope, memory_id=item["id"])


def test_recall_shows_its_page_from_the_rows_it_read_without_building_models(scope, monkeypatch):
    ids = load_items(scope)

    def no_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("recall built a model for a row it had read")

    monkeypatch.setattr(MemoryItem, "from_db", classmethod(no_model))
    page = selectors.memory_recall(scope=scope, query="espresso bisquit")

    assert {i["id"] for i in page.items} == {ids["espresso_title"], ids["espresso_content"], ids["dog"]}
    recent = selectors.memory_recall(scope=scope, query="what do you remember about me?", limit=3)
    assert [i["match"] for i in recent.items] == ["recent"] * 3


def _statements(run: Any) -> tuple[Any, list[str]]:
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        result = run()
    return result, [q["sql"] for q in captured.captured_queries]


def test_a_misspelled_word_takes_a_second_statement_for_its_typo_candidates(scope):
    ids = load_items(scope)

    page, statements = _statements(lambda: selectors.memory_recall(scope=scope, query="bisquit"))

    # PostgreSQL's candidate statement also looks up the words "bisquit" may mean ("biscuit"), then
    # the items holding them are read; SQLite reads the items sharing trigrams with the word.
    assert len(statements) == 2
    assert [i["id"] for i in page.items] == [ids["dog"]]
    assert page.items[0]["title"] == next(spec["title"] for spec in ITEMS if spec["key"] == "dog")


@pytest.mark.postgres
def test_a_word_no_item_anywhere_is_near_skips_reading_items_for_typos(scope, owner):
    load_items(scope)
    second = make_workflow(owner, name="Second")
    other = memory_scope(workflow=second, memory_node_id=node_id(second, "simpleMemory"))
    services.memory_remember(scope=other, content="Zyxwvut lives elsewhere", actor="owner:1")

    # "zyxwut" is one typo from a word that only another namespace holds: its items are read, and
    # none is in this one.
    page, statements = _statements(lambda: selectors.memory_recall(scope=scope, query="zyxwut"))
    assert page.items == []
    assert len(statements) == 2

    page, statements = _statements(lambda: selectors.memory_recall(scope=scope, query="qqqqqqq"))
    assert page.items == []
    assert len(statements) == 1  # the words written and the words near them: none


@pytest.mark.postgres
def test_the_candidate_statement_looks_up_near_words_only_for_words_nothing_matched(scope):
    from memory.search import Filters, analyze, statements

    load_items(scope)
    filters = Filters(namespace=scope.namespace, now=timezone.now())

    found = statements.find(analyze("espresso bisquit"), filters)
    assert found.candidates
    assert found.near == {0: [], 1: ["biscuit"]}  # "espresso" matched: nothing is looked up for it

    found = statements.find(analyze("bisquit"), filters)
    assert (found.candidates, found.total, found.items) == ([], None, {})
    assert found.near == {0: ["biscuit"]}  # no candidate, and still the near words

    found = statements.find(analyze("tea"), filters)  # a word too short for typos: no lookup at all
    assert found.near is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_typo_lookup_carries_its_own_similarity_threshold(scope, django_assert_num_queries):
    from memory.search.postgres import TRIGRAM_THRESHOLD

    ids = load_items(scope)
    connection.close()
    with django_assert_num_queries(2):  # on a new connection too: no setting is needed first
        page = selectors.memory_recall(scope=scope, query="expresso")

    assert [i["id"] for i in page.items] == [ids["espresso_title"], ids["espresso_content"]]
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('pg_trgm.word_similarity_threshold', true)")
        assert cursor.fetchone()[0] in (None, "", "0.6")  # the session's own setting is untouched
        cursor.execute("SELECT proconfig FROM pg_proc WHERE proname = 'memory_near_words'")
        assert cursor.fetchone()[0] == [f"pg_trgm.word_similarity_threshold={TRIGRAM_THRESHOLD}"]


@pytest.mark.parametrize(
    ("query", "same_shape", "filters"),
    [
        ("coffee garden", "walks biscuit", {}),
        ("kyoto or osaka", "paris or tokyo", {"categories": ("travel", "food")}),
        ("one tea*", "use cup*", {"tags": ("coffee", "tea")}),
        ("expresso meetin", "biscuit walkin", {"categories": ("food",), "tags": ("morning",)}),
    ],
)
def test_a_postgresql_statement_compiled_once_per_shape_is_the_one_compiled_for_the_query(
    query, same_shape, filters
):
    from memory.search import Filters, analyze, statements

    first = Filters(namespace="ns-a", now=timezone.now(), **filters)
    second = Filters(namespace="ns-b", now=timezone.now() + timedelta(seconds=1), **filters)
    for text, scoped, limit in ((query, first, 7), (same_shape, second, 9)):
        recall_query = analyze(text)
        every_word = tuple(range(len(recall_query.words)))
        for build, shape in (
            (statements._find_statement, ()),
            (statements._tolerant_statement, (every_word,)),
        ):
            direct = build(PostgresBackend(), recall_query, scoped, limit, *shape)
            assert (
                statements._compiled(PostgresBackend(), build, recall_query, scoped, limit, *shape) == direct
            )
        shapes = len(statements._shapes)
    assert shapes == len(statements._shapes)  # the second query of the shape reused the first one's text


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("How long has Elise been playing tennis?", ["elise", "playing", "tennis"]),
        ("how many kids does she have", ["kids"]),
        ("What kind of pasta did Kate make?", ["pasta", "kate", "make"]),
        ("which types of tea", ["tea"]),
        ("long walks", ["long", "walks"]),
        ("a kind word", ["kind", "word"]),
    ],
)
def test_a_word_that_asks_for_a_kind_of_answer_after_a_question_word_is_not_searched(query, words):
    assert [w.text for w in analyze(query).words] == words
