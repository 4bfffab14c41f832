"""Both conversation stores (the PostgreSQL one and the portable one) store, refuse and load alike: the
same rows, bytes, digests, counters, answers, conflict codes and events, alone or inside a caller's
transaction (the portable one on every database, the PostgreSQL one in the PostgreSQL pass)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from conversations.errors import CONVERSATION_CONFLICT, CONVERSATION_LOAD_FAILED
from conversations.models import AgentConversation, ConversationMessage, ProviderCall
from conversations.selectors import conversation_cursor, conversation_load
from conversations.services import conversation_append
from conversations.services.context import CallCounts, CallScope, provider_call_record
from conversations.stores import (
    Appended,
    Batch,
    ConversationStore,
    Head,
    PortableConversationStore,
    PostgresConversationStore,
    Refused,
    Unchanged,
)
from conversations.types import ConversationKey, TokenUsage
from opencompany.core.errors import ApplicationError
from opencompany.core.json import canonical_json
from opencompany.llm import wire
from tests.conversations.conftest import tool_turn, turns

pytestmark = pytest.mark.django_db(transaction=True)

# What an append after a known head sends: PostgreSQL one statement; the portable store the head's lock,
# the insert and the head update (with its savepoint on SQLite, which logs no BEGIN for it).
APPEND_STATEMENTS: dict[type[ConversationStore], int] = {
    PostgresConversationStore: 1,
    PortableConversationStore: 3,
}


def _statements(queries: CaptureQueriesContext) -> list[str]:
    """The statements sent, without the transaction's own (SQLite logs its BEGIN IMMEDIATE and COMMIT)."""
    return [q["sql"] for q in queries.captured_queries if q["sql"].split(" ")[0] not in ("BEGIN", "COMMIT")]


def _stored_texts(agent_node_id: str) -> list[tuple[str, str]]:
    """The stored text and digest of every message of the conversation, read as the database holds them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT CAST(m.wire AS TEXT), m.digest FROM conversations_conversationmessage m "
            "JOIN conversations_agentconversation c ON c.id = m.conversation_id "
            "WHERE c.agent_node_id = %s ORDER BY m.seq",
            [agent_node_id],
        )
        return cursor.fetchall()


def _append_args(messages: list[dict[str, Any]]) -> dict[str, Any]:
    texts = [canonical_json(m) for m in messages]
    encoded = [t.encode() for t in texts]
    return {
        "batch": Batch(wires=messages, texts=texts, encoded=encoded, sizes=[len(e) for e in encoded]),
        "usage": None,
        "now": timezone.now(),
    }


@pytest.fixture(params=["alone", "in a transaction"])
def within(request: pytest.FixtureRequest) -> Callable[[], AbstractContextManager[Any]]:
    """Where a store call runs: on its own, or inside a caller's transaction."""
    return nullcontext if request.param == "alone" else transaction.atomic


def test_the_digest_append_stores_what_the_locked_append_stores(workflow, events, store):
    fast = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="fast")
    slow = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="slow")
    events.subscribe(f"owner.{workflow.owner_id}")
    first = conversation_append(key=fast, messages=turns(2), expected_length=0)
    conversation_append(key=slow, messages=turns(2), expected_length=0)
    events.drain()

    with CaptureQueriesContext(connection) as queries:
        write = conversation_append(
            key=fast,
            messages=tool_turn("c1"),
            expected_length=2,
            expected_digest=first.digest,
            usage={"input_tokens": 7, "output_tokens": 3, "cache_read_tokens": 2},
        )
    conversation_append(
        key=slow,
        messages=tool_turn("c1"),
        expected_length=2,
        usage={"input_tokens": 7, "output_tokens": 3, "cache_read_tokens": 2},
    )

    assert len(_statements(queries)) == APPEND_STATEMENTS[type(store)]
    assert conversation_load(key=fast) == conversation_load(key=slow) == [*turns(2), *tool_turn("c1")]
    assert conversation_cursor(key=fast).digest == conversation_cursor(key=slow).digest == write.digest
    assert [text for text, _ in _stored_texts("fast")] == [text for text, _ in _stored_texts("slow")]
    heads = {h.agent_node_id: h for h in AgentConversation.objects.filter(workflow_id=workflow.pk)}
    for field in (
        "length",
        "revision",
        "bytes",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "last_input_tokens",
        "head_digest",
        "notes_revision",
    ):
        assert getattr(heads["fast"], field) == getattr(heads["slow"], field), field
    assert (heads["fast"].length, heads["fast"].revision, heads["fast"].input_tokens) == (4, 2, 7)
    assert (write.applied, write.length, write.revision, write.bytes) == (True, 4, 2, heads["fast"].bytes)
    assert events.drain() == [
        {
            "type": "context.updated",
            "data": {
                "workflow_id": workflow.pk,
                "generation": 1,
                "agent_node_id": agent,
                "length": 4,
                "revision": 2,
            },
        }
        for agent in ("fast", "slow")
    ]


def test_a_stale_length_is_a_conflict_and_a_head_that_moved_is_context_changed(workflow, events, store):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="a")
    conversation_append(key=key, messages=turns(2), expected_length=0)
    events.subscribe(f"owner.{workflow.owner_id}")

    after_one = ConversationMessage.objects.get(conversation__agent_node_id="a", seq=0).digest
    with pytest.raises(ApplicationError) as stale_length:
        conversation_append(key=key, messages=turns(1), expected_length=1, expected_digest=after_one)

    assert stale_length.value.code == CONVERSATION_CONFLICT
    assert stale_length.value.extra == {"length": 2, "expected_length": 1}
    assert ConversationMessage.objects.filter(conversation__agent_node_id="a").count() == 2
    assert AgentConversation.objects.get(agent_node_id="a").revision == 1
    assert events.drain() == []

    # right length, another head (cleared and refilled, or moved): nothing old is written after it
    with pytest.raises(ApplicationError) as moved:
        conversation_append(key=key, messages=turns(1), expected_length=2, expected_digest="0" * 64)

    assert (moved.value.code, moved.value.status) == ("context_changed", 409)
    assert conversation_load(key=key) == turns(2)
    assert AgentConversation.objects.get(agent_node_id="a").revision == 1
    assert events.drain() == []


def test_the_store_refuses_an_append_after_a_head_that_moved_or_is_missing_and_writes_nothing(
    workflow, store, within
):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="cas")
    missing = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="missing")
    first = conversation_append(key=key, messages=turns(2), expected_length=0)
    after_one = ConversationMessage.objects.get(conversation__agent_node_id="cas", seq=0).digest
    more = turns(1, "x")

    with within():
        stale_digest = store.append(
            key=key, expected_length=2, expected_digest="f" * 64, **_append_args(more)
        )
        stale_length = store.append(
            key=key, expected_length=1, expected_digest=after_one, **_append_args(more)
        )
        raced_past = store.append(
            key=key, expected_length=1, expected_digest=first.digest, **_append_args(more)
        )
        absent = store.append(
            key=missing, expected_length=2, expected_digest=first.digest, **_append_args(more)
        )
        no_digest = store.append(key=key, expected_length=3, expected_digest=None, **_append_args(more))

    assert stale_digest == Refused("context_changed", {"length": 2, "expected_length": 2})
    assert stale_length == Refused("conversation_conflict", {"length": 2, "expected_length": 1})
    assert raced_past == Refused("context_changed", {"length": 2, "expected_length": 1})
    assert absent == Refused("context_changed", {"length": 0, "expected_length": 2})
    assert no_digest == Refused("conversation_conflict", {"length": 2, "expected_length": 3})
    head = AgentConversation.objects.get(agent_node_id="cas")
    assert (head.length, head.revision, head.head_digest) == (2, 1, first.digest)
    assert ConversationMessage.objects.filter(conversation=head).count() == 2
    assert AgentConversation.objects.filter(agent_node_id="missing").exists() is False


def test_the_store_answers_the_head_it_left(workflow, store, within):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="answer")
    first = conversation_append(key=key, messages=turns(2), expected_length=0)
    more = tool_turn("c2")

    with within():
        answer = store.append(key=key, expected_length=2, expected_digest=first.digest, **_append_args(more))

    stored = AgentConversation.objects.get(agent_node_id="answer")
    digest = wire.digests_of([*turns(2), *more])[-1]
    assert answer == Appended(Head(workflow.owner_id, 4, 2, stored.bytes, digest, 0))
    assert (stored.length, stored.head_digest) == (4, digest)
    assert stored.bytes == sum(len(canonical_json(m).encode()) for m in [*turns(2), *more])


def test_an_append_repeated_after_it_landed_is_answered_unchanged_and_writes_nothing(workflow, store, within):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="again")
    first = conversation_append(key=key, messages=turns(2), expected_length=0)
    more = tool_turn("c3")
    landed = store.append(key=key, expected_length=2, expected_digest=first.digest, **_append_args(more))

    with within():
        again = store.append(key=key, expected_length=2, expected_digest=first.digest, **_append_args(more))

    assert isinstance(landed, Appended)
    assert again == Unchanged(landed.head)
    assert AgentConversation.objects.get(agent_node_id="again").revision == 2
    assert ConversationMessage.objects.filter(conversation__agent_node_id="again").count() == 4


def test_a_first_write_creates_the_head_and_an_empty_one_writes_nothing(workflow, store, within):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="new")
    empty = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="empty")
    gone = ConversationKey(workflow_id="wf_gone", generation=1, agent_node_id="new")
    counted = {**_append_args([]), "usage": TokenUsage(input_tokens=5, output_tokens=1)}

    with within():
        created = store.append(key=key, expected_length=0, expected_digest=None, **_append_args(turns(2)))
        nothing = store.append(key=empty, expected_length=0, expected_digest=None, **_append_args([]))
        usage_only = store.append(key=key, expected_length=2, expected_digest=None, **counted)
        refused = store.append(key=gone, expected_length=0, expected_digest=None, **_append_args(turns(1)))

    head = AgentConversation.objects.get(agent_node_id="new")
    digest = wire.digests_of(turns(2))[-1]
    assert created == Appended(Head(workflow.owner_id, 2, 1, created.head.bytes, digest, 0))
    assert nothing == Unchanged(Head(0, 0, 0, 0, "", 0))
    assert usage_only == Appended(Head(workflow.owner_id, 2, 2, created.head.bytes, digest, 0))
    assert refused == Refused("not_found")
    assert (head.length, head.revision, head.head_digest, head.input_tokens, head.output_tokens) == (
        2,
        2,
        digest,
        5,
        1,
    )
    assert AgentConversation.objects.filter(agent_node_id="empty").exists() is False
    assert AgentConversation.objects.filter(workflow_id="wf_gone").exists() is False


@pytest.mark.postgres
def test_on_postgresql_an_append_that_waited_for_a_clear_is_refused_with_the_head_the_clear_left(
    workflow, store, within
):
    import psycopg

    from tests import live

    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="raced")
    first = conversation_append(key=key, messages=turns(2), expected_length=0)
    head_id = AgentConversation.objects.get(agent_node_id="raced").pk
    answers: list[Any] = []

    def append() -> None:
        try:
            with within():
                answers.append(
                    store.append(
                        key=key,
                        expected_length=2,
                        expected_digest=first.digest,
                        **_append_args(turns(1, "x")),
                    )
                )
        finally:
            connection.close()

    with psycopg.connect(live.test_database_url()) as other:
        # A Clear as it writes: the head locked, its messages gone, the head emptied.
        other.execute("SELECT 1 FROM conversations_agentconversation WHERE id = %s FOR UPDATE", [head_id])
        other.execute("DELETE FROM conversations_conversationmessage WHERE conversation_id = %s", [head_id])
        other.execute(
            "UPDATE conversations_agentconversation SET length = 0, bytes = 0, head_digest = '', "
            "revision = revision + 1 WHERE id = %s",
            [head_id],
        )
        writer = threading.Thread(target=append)
        writer.start()
        waited = _wait_for_a_lock_wait()
        other.commit()
        writer.join(timeout=10)

    assert waited is True
    assert answers == [Refused("context_changed", {"length": 0, "expected_length": 2})]
    assert conversation_load(key=key) == []


def _wait_for_a_lock_wait() -> bool:
    """Whether a session of the test database comes to wait for a lock within five seconds."""
    import psycopg

    from tests import live

    deadline = time.monotonic() + 5
    with psycopg.connect(live.test_database_url(), autocommit=True) as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if row and row[0]:
                return True
            time.sleep(0.02)
    return False


def test_the_head_lock_loads_the_head_as_the_orm_does_and_holds_it_to_the_end_of_the_transaction(
    workflow, key, store, on_postgres
):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    AgentConversation.objects.filter(**key.filter_kwargs()).update(
        notes=[{"id": "n1", "text": 'a "quoted" \\ note'}], runtime_binding={"runtime": "x"}
    )
    missing = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="missing")

    with transaction.atomic():
        head = store.head_lock(key=key)
        held = _locked_elsewhere(head.pk) if on_postgres else True
        absent = store.head_lock(key=missing)

    stored = AgentConversation.objects.get(**key.filter_kwargs())
    assert head is not None
    assert {f.attname: getattr(head, f.attname) for f in AgentConversation._meta.concrete_fields} == {
        f.attname: getattr(stored, f.attname) for f in AgentConversation._meta.concrete_fields
    }
    assert head._state.adding is False
    assert absent is None
    assert held is True
    if on_postgres:
        assert _locked_elsewhere(head.pk) is False


def _locked_elsewhere(head_id: int) -> bool:
    """Whether another connection finds the head row locked."""
    import psycopg

    from tests import live

    with psycopg.connect(live.test_database_url(), autocommit=True) as other:
        try:
            other.execute(
                "SELECT 1 FROM conversations_agentconversation WHERE id = %s FOR UPDATE NOWAIT", [head_id]
            )
        except psycopg.errors.LockNotAvailable:
            return True
    return False


def _call(digest: str, *, kind: str = "step", model: str = "offline-demo") -> CallCounts:
    return CallCounts(
        status="ok",
        kind=kind,
        provider="offline",
        model=model,
        input_tokens=120,
        cached_tokens=20,
        cache_write_tokens=0,
        output_tokens=7,
        usage_reported=True,
        settings={"temperature": 0.5, "note": 'a "quoted" \\ setting'},
        system_digest="s" * 64,
        notes_digest="",
        tools_digest="t" * 64,
        message_count=2,
        conversation_digest=digest,
        pressure=127,
        pressure_estimated=False,
        output_headroom=4096,
        context_window=128_000,
    )


def _pressure(key: ConversationKey) -> tuple[int, int, int, bool]:
    return tuple(  # type: ignore[return-value]
        AgentConversation.objects.filter(**key.filter_kwargs())
        .values_list("last_input_tokens", "pressure_headroom_tokens", "context_window", "pressure_estimated")
        .get()
    )


def test_a_provider_call_lands_in_the_ledger_with_its_pressure_only_on_the_head_it_was_built_from(
    workflow, key, store, settings
):
    settings.OPENCOMPANY_MODEL_PRICES = {"priced": {"input": 3, "cached_input": 0.3, "output": 15}}
    first = conversation_append(key=key, messages=turns(2), expected_length=0)
    scope = CallScope(
        workflow_id=key.workflow_id,
        generation=key.generation,
        agent_node_id=key.agent_node_id,
        run_id="run_1",
        key=key,
    )
    untouched = _pressure(key)

    row = provider_call_record(scope=scope, counts=_call(first.digest, model="priced"))

    stored = ProviderCall.objects.get(pk=row.pk)
    assert {f.attname: getattr(row, f.attname) for f in ProviderCall._meta.concrete_fields} == {
        f.attname: getattr(stored, f.attname) for f in ProviderCall._meta.concrete_fields
    }
    assert row._state.adding is False
    assert (stored.owner_id, stored.run_id, stored.cost, stored.settings["note"]) == (
        workflow.owner_id,
        "run_1",
        Decimal("0.000411"),
        'a "quoted" \\ setting',
    )
    assert _pressure(key) == (127, 4096, 128_000, False)
    assert untouched != _pressure(key)

    # A head that moved since the request, or a call that is not a step, keeps its pressure.
    moved = conversation_append(key=key, messages=turns(2), expected_length=2, expected_digest=first.digest)
    provider_call_record(scope=scope, counts=_call(first.digest))
    provider_call_record(scope=scope, counts=_call(moved.digest, kind="compaction"))

    assert ProviderCall.objects.count() == 3
    assert _pressure(key) == (127, 4096, 128_000, False)
    assert AgentConversation.objects.get(**key.filter_kwargs()).head_digest == moved.digest


def test_a_provider_call_of_a_workflow_that_is_gone_is_not_found_and_writes_nothing(workflow, key, store):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    gone = CallScope(workflow_id="wf_gone", generation=1, agent_node_id="a", run_id="run_1", key=None)

    with pytest.raises(ApplicationError) as refused:
        provider_call_record(scope=gone, counts=_call(""))
    answer = store.call_record(
        call={"workflow_id": "wf_gone"}, pressure_of=None, pressure={}, now=timezone.now()
    )
    with pytest.raises(TypeError):
        store.call_record(call={"owner_id": 1}, pressure_of=None, pressure={}, now=timezone.now())

    assert refused.value.code == "not_found"
    assert answer == Refused("not_found")
    assert ProviderCall.objects.count() == 0


def test_the_stored_text_is_the_canonical_text_the_digest_covers_on_every_write_path(workflow, store):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="exact")
    first = conversation_append(key=key, messages=turns(2), expected_length=0)  # creates the head first
    conversation_append(key=key, messages=tool_turn("c9"), expected_length=2, expected_digest=first.digest)
    stored = conversation_load(key=key)

    rows = _stored_texts("exact")

    assert stored == [*turns(2), *tool_turn("c9")]
    assert [text for text, _ in rows] == [canonical_json(message) for message in stored]
    assert [digest for _, digest in rows] == wire.digests_of(stored)
    assert ConversationMessage.objects.filter(conversation__agent_node_id="exact").first().wire == stored[0]


def test_awkward_text_is_stored_byte_for_byte_by_the_digest_append(workflow, store):
    """Nothing in a message is quoted, escaped or trimmed on the way in or out."""
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="awkward")
    first = conversation_append(key=key, messages=turns(1), expected_length=0)
    texts = [
        'say "hi", {then} \\ leave',
        "NULL",
        "\\u0000 is written out, not a NUL",
        " \t\n\u00a0\u1680\u2003\u3000 ",
        "emoji 🧠 and RTL עברית",
        '{"a":[1,2]}',
    ]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": t}], "metadata": {"k": t}} for t in texts
    ]

    with CaptureQueriesContext(connection) as queries:
        conversation_append(key=key, messages=messages, expected_length=1, expected_digest=first.digest)

    assert len(_statements(queries)) == APPEND_STATEMENTS[type(store)]  # the store's append took it
    assert conversation_load(key=key)[1:] == messages
    assert [text for text, _ in _stored_texts("awkward")[1:]] == [canonical_json(m) for m in messages]


def test_the_load_of_a_key_never_written_is_empty_and_one_query(workflow, store, django_assert_num_queries):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="never")

    with django_assert_num_queries(1):
        assert conversation_load(key=key) == []


def test_load_failure_is_loud(key, store, monkeypatch):
    monkeypatch.setattr(store, "load_sql", "SELECT broken FROM nowhere")

    with pytest.raises(ApplicationError) as exc:
        conversation_load(key=key)

    assert exc.value.code == CONVERSATION_LOAD_FAILED
    assert exc.value.status == 503


@pytest.mark.postgres
def test_the_tables_keep_only_the_indexes_a_turn_needs():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexname FROM pg_indexes WHERE tablename IN "
            "('conversations_agentconversation', 'conversations_conversationmessage') ORDER BY 1, 2"
        )
        indexes = cursor.fetchall()

    assert indexes == [
        ("conversations_agentconversation", "conversation_owner_updated"),
        ("conversations_agentconversation", "conversation_unique_key"),
        ("conversations_agentconversation", "conversations_agentconversation_pkey"),
        ("conversations_conversationmessage", "conversation_message_unique_seq"),
        ("conversations_conversationmessage", "conversations_conversationmessage_pkey"),
    ]


@pytest.mark.postgres
def test_a_message_up_to_a_page_stays_in_its_row(workflow):
    key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id="inline")
    # About 6 KB that does not compress: the default TOAST target would move it out of the row.
    noise = secrets.token_urlsafe(4_500)
    message = {"role": "user", "content": [{"type": "text", "text": noise}], "metadata": {}}

    conversation_append(key=key, messages=[message], expected_length=0)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_relation_size(reltoastrelid) FROM pg_class "
            "WHERE relname = 'conversations_conversationmessage'"
        )
        assert cursor.fetchone()[0] == 0  # nothing went to the TOAST table
    assert conversation_load(key=key) == [message]
