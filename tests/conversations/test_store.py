"""The store's services: append, save, load, clear — and the events they publish."""

from __future__ import annotations

import pytest

from conversations.models import AgentConversation, ConversationArchive, ConversationMessage
from conversations.selectors import conversation_cursor, conversation_list, conversation_load
from conversations.services import conversation_append, conversation_clear, conversation_save
from conversations.types import ConversationKey
from opencompany.core.errors import ApplicationError
from tests.conversations.conftest import assistant, turns, user

pytestmark = pytest.mark.django_db


def _rows(key):
    return list(
        ConversationMessage.objects.filter(conversation__agent_node_id=key.agent_node_id)
        .order_by("seq")
        .values_list("seq", "pk")
    )


def test_load_of_a_key_never_written_is_empty(key):
    assert conversation_load(key=key) == []
    assert AgentConversation.objects.exists() is False


def test_append_stores_messages_in_order_and_counts_them(key):
    result = conversation_append(key=key, messages=turns(3), expected_length=0)

    head = AgentConversation.objects.get()
    assert (result.applied, result.length, result.revision) == (True, 3, 1)
    assert (head.length, head.revision, head.owner_id) == (3, 1, head.owner_id)
    assert head.bytes == sum(ConversationMessage.objects.values_list("size", flat=True))
    assert conversation_load(key=key) == turns(3)
    assert [seq for seq, _ in _rows(key)] == [0, 1, 2]


def test_append_with_a_stale_length_is_refused_and_writes_nothing(
    key, events, django_capture_on_commit_callbacks
):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    events.subscribe(f"owner.{AgentConversation.objects.get().owner_id}")

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ApplicationError) as exc:
        conversation_append(key=key, messages=[user("late")], expected_length=1)

    assert exc.value.code == "conversation_conflict"
    assert exc.value.status == 409
    assert exc.value.extra == {"length": 2, "expected_length": 1}
    assert AgentConversation.objects.get().revision == 1
    assert ConversationMessage.objects.count() == 2
    assert events.drain() == []


def test_append_to_a_missing_conversation_with_nonzero_length_is_a_conflict(key):
    with pytest.raises(ApplicationError) as exc:
        conversation_append(key=key, messages=[user("x")], expected_length=4)

    assert exc.value.extra == {"length": 0, "expected_length": 4}
    assert AgentConversation.objects.exists() is False


def test_append_for_an_unknown_workflow_is_not_found():
    key = ConversationKey(workflow_id="wf_missing", generation=1, agent_node_id="a")

    with pytest.raises(ApplicationError) as exc:
        conversation_append(key=key, messages=[user("x")], expected_length=0)

    assert exc.value.code == "not_found"


def test_append_adds_usage_to_the_counters_and_leaves_the_pressure_to_the_call_record(key):
    usage = {"input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 50, "cache_write_tokens": 5}
    conversation_append(key=key, messages=turns(2), expected_length=0, usage=usage)
    conversation_append(key=key, messages=turns(2, "b"), expected_length=2, usage=usage)

    head = AgentConversation.objects.get()
    assert (head.input_tokens, head.output_tokens, head.cache_read_tokens, head.cache_write_tokens) == (
        200,
        40,
        100,
        10,
    )
    # Pressure is the last request's input (the provider-call record sets it), never a sum of turns.
    assert head.last_input_tokens == 0


def test_append_hot_path_is_a_constant_number_of_queries(key, django_assert_num_queries, on_postgres):
    conversation_append(key=key, messages=turns(10), expected_length=0)
    # PostgreSQL: the head's lock, then the append statement. Elsewhere: SAVEPOINT (the test's outer
    # transaction), SELECT … FOR UPDATE, INSERT, UPDATE, RELEASE SAVEPOINT.
    statements = 2 if on_postgres else 5

    with django_assert_num_queries(statements):
        conversation_append(key=key, messages=turns(4, "t"), expected_length=10)
    conversation_append(key=key, messages=turns(200, "u"), expected_length=14)
    with django_assert_num_queries(statements):
        conversation_append(key=key, messages=turns(3, "v"), expected_length=214)


def test_append_publishes_one_event_after_commit_without_text(
    key, events, django_capture_on_commit_callbacks
):
    events.subscribe(f"owner.{key_owner(key)}")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        conversation_append(
            key=key, messages=[user("secret words"), assistant("more secret")], expected_length=0
        )
        assert events.drain() == []
    for callback in callbacks:
        callback()

    assert events.drain() == [
        {
            "type": "context.updated",
            "data": {
                "workflow_id": key.workflow_id,
                "generation": 1,
                "agent_node_id": key.agent_node_id,
                "length": 2,
                "revision": 1,
            },
        }
    ]


def key_owner(key):
    from graphs.models import Workflow

    return Workflow.objects.get(pk=key.workflow_id).owner_id


def test_save_of_a_longer_list_appends_only_the_new_rows(key, events, django_capture_on_commit_callbacks):
    conversation_save(key=key, messages=turns(3))
    before = _rows(key)
    events.subscribe(f"owner.{key_owner(key)}")

    with django_capture_on_commit_callbacks(execute=True):
        result = conversation_save(key=key, messages=turns(5))

    after = _rows(key)
    assert after[:3] == before
    assert [seq for seq, _ in after] == [0, 1, 2, 3, 4]
    assert (result.applied, result.length, result.revision, result.rewritten_from) == (True, 5, 2, None)
    assert conversation_load(key=key) == turns(5)
    assert [e["data"]["length"] for e in events.drain()] == [5]


def test_save_rewriting_a_middle_message_changes_only_rows_from_there(key):
    conversation_save(key=key, messages=turns(6))
    before = _rows(key)
    edited = turns(6)
    edited[3] = assistant("rewritten")

    result = conversation_save(key=key, messages=edited)

    after = _rows(key)
    assert after[:3] == before[:3]
    assert {pk for _, pk in after[3:]}.isdisjoint({pk for _, pk in before})
    assert [seq for seq, _ in after] == [0, 1, 2, 3, 4, 5]
    assert (result.length, result.revision, result.rewritten_from) == (6, 2, 3)
    assert conversation_load(key=key) == edited
    assert AgentConversation.objects.get().bytes == sum(
        ConversationMessage.objects.values_list("size", flat=True)
    )


def test_save_of_a_shorter_list_drops_the_tail(key):
    conversation_save(key=key, messages=turns(6))
    before = _rows(key)

    result = conversation_save(key=key, messages=turns(2))

    assert _rows(key) == before[:2]
    assert (result.length, result.rewritten_from) == (2, 2)
    assert conversation_cursor(key=key).digest == ConversationMessage.objects.get(seq=1).digest
    assert AgentConversation.objects.get().bytes == sum(
        ConversationMessage.objects.values_list("size", flat=True)
    )


def test_identical_save_writes_nothing_bumps_nothing_and_publishes_nothing(
    key, events, django_capture_on_commit_callbacks, django_assert_num_queries
):
    conversation_save(key=key, messages=turns(4))
    events.subscribe(f"owner.{key_owner(key)}")
    before = _rows(key)

    with django_capture_on_commit_callbacks(execute=True), django_assert_num_queries(3):
        result = conversation_save(key=key, messages=turns(4))

    assert (result.applied, result.length, result.revision) == (False, 4, 1)
    assert _rows(key) == before
    assert AgentConversation.objects.get().revision == 1
    assert events.drain() == []


def test_save_of_an_empty_list_for_a_missing_key_creates_nothing(key):
    result = conversation_save(key=key, messages=[])

    assert result.applied is False
    assert AgentConversation.objects.exists() is False


def test_clear_archives_then_empties_and_keeps_revision_monotonic(
    key, events, django_capture_on_commit_callbacks
):
    from conversations.services import notes_add

    conversation_append(key=key, messages=turns(3), expected_length=0)
    notes_add(key=key, text="the bug is in Y")
    events.subscribe(f"owner.{key_owner(key)}")

    with django_capture_on_commit_callbacks(execute=True):
        result = conversation_clear(key=key)

    archive = ConversationArchive.objects.get()
    head = AgentConversation.objects.get()
    assert (result.cleared, result.length, result.revision) == (True, 0, 3)
    assert (archive.reason, archive.length, archive.messages) == ("cleared", 3, turns(3))
    assert archive.notes == [{"id": "n1", "text": "the bug is in Y"}]
    assert (head.length, head.bytes, head.head_digest, head.notes, head.revision) == (0, 0, "", [], 3)
    assert ConversationMessage.objects.exists() is False
    assert [e["data"] for e in events.drain()] == [
        {
            "workflow_id": key.workflow_id,
            "generation": 1,
            "agent_node_id": key.agent_node_id,
            "length": 0,
            "revision": 3,
        }
    ]


def test_clear_of_an_empty_conversation_is_a_no_op(key, events, django_capture_on_commit_callbacks):
    events.subscribe(f"owner.{key_owner(key)}")

    with django_capture_on_commit_callbacks(execute=True):
        result = conversation_clear(key=key)

    assert (result.cleared, result.archive_id) == (False, None)
    assert ConversationArchive.objects.exists() is False
    assert events.drain() == []


def test_list_orders_newest_generation_first_then_agent(key):
    for generation, agent in [(1, "b"), (2, "a"), (1, "a")]:
        other = ConversationKey(workflow_id=key.workflow_id, generation=generation, agent_node_id=agent)
        conversation_append(key=other, messages=[user("x")], expected_length=0)

    rows = [(c.generation, c.agent_node_id) for c in conversation_list(workflow_id=key.workflow_id)]

    assert rows == [(2, "a"), (1, "a"), (1, "b")]


def test_the_key_is_unique_in_the_database(key):
    from django.db import IntegrityError, transaction

    conversation_append(key=key, messages=[user("x")], expected_length=0)
    head = AgentConversation.objects.get()

    with pytest.raises(IntegrityError), transaction.atomic():
        AgentConversation.objects.create(owner_id=head.owner_id, **key.filter_kwargs())


def test_seq_is_unique_per_conversation_in_the_database(key):
    from django.db import IntegrityError, transaction

    conversation_append(key=key, messages=[user("x")], expected_length=0)
    head = AgentConversation.objects.get()

    with pytest.raises(IntegrityError), transaction.atomic():
        ConversationMessage.objects.create(conversation=head, seq=0, wire=user("y"), digest="d")
