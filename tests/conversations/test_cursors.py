"""Cursors, rewinds, compaction and branch snapshots."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.models import AgentConversation, BranchSnapshot, CompactionAttempt
from conversations.selectors import conversation_cursor, conversation_load
from conversations.services import (
    BRANCH_SNAPSHOTS_PER_THREAD,
    branch_snapshot_keep,
    branch_snapshot_restore,
    conversation_append,
    conversation_rewind,
    conversation_save,
    notes_add,
    notes_read,
)
from conversations.services.context import conversation_compact
from conversations.types import ConversationCursor
from opencompany.core.errors import ApplicationError
from opencompany.llm.wire import make_tool_result
from tests.conversations.conftest import assistant, tool_turn, turns, user

pytestmark = pytest.mark.django_db


def compact_before_latest(key, *, boundary: int, findings: str = "short summary"):
    """Activate a compaction of the stored conversation that keeps it from `boundary` on."""
    cursor = conversation_cursor(key=key)
    return conversation_compact(
        key=key,
        run_id="run-1",
        expected_length=cursor.length,
        expected_digest=cursor.digest,
        boundary=boundary,
        findings=findings,
        sizes={"messages_before": cursor.length, "messages_after": cursor.length - boundary},
    )


def test_rewind_to_a_recorded_cursor_restores_the_exact_prefix_and_notes(key):
    conversation_append(key=key, messages=turns(4), expected_length=0)
    notes_add(key=key, text="first finding")
    cursor = conversation_cursor(key=key)
    conversation_append(key=key, messages=turns(3, "later"), expected_length=4)
    notes_add(key=key, text="later finding")

    result = conversation_rewind(key=key, cursor=cursor.as_dict())

    assert conversation_load(key=key) == turns(4)
    assert notes_read(key=key).entries == [{"id": "n1", "text": "first finding"}]
    assert conversation_cursor(key=key).as_dict() == cursor.as_dict()
    assert (result.applied, result.length) == (True, 4)
    head = AgentConversation.objects.get()
    assert head.bytes == sum(head.messages.values_list("size", flat=True))


def test_rewind_to_length_zero_always_works(key):
    conversation_append(key=key, messages=turns(3), expected_length=0)

    conversation_rewind(key=key, cursor={"generation": 1, "length": 0, "digest": ""})

    assert conversation_load(key=key) == []
    assert AgentConversation.objects.get().head_digest == ""


def test_rewind_to_the_current_position_is_a_no_op(key):
    conversation_append(key=key, messages=turns(3), expected_length=0)
    cursor = conversation_cursor(key=key)

    result = conversation_rewind(key=key, cursor=cursor)

    assert (result.applied, result.revision) == (False, 1)


def test_after_a_compaction_the_same_cursor_cannot_rewind(key):
    conversation_append(key=key, messages=[user("a" * 400), assistant("b" * 400)], expected_length=0)
    cursor = conversation_cursor(key=key)
    conversation_append(key=key, messages=[user("latest question"), assistant("answer")], expected_length=2)
    notes_add(key=key, text="kept through compaction")

    compacted = compact_before_latest(key, boundary=2)

    assert compacted.length == 2
    with pytest.raises(ApplicationError) as exc:
        conversation_rewind(key=key, cursor=cursor)
    assert exc.value.code == "cannot_rewind"
    assert exc.value.status == 409


def test_compaction_keeps_the_tail_and_writes_the_findings_into_the_notes_beside_the_others(key):
    older = [user("a" * 500), *tool_turn("c1", result="r" * 800), assistant("b" * 500)]
    latest = [user("latest question"), assistant("latest answer")]
    conversation_save(key=key, messages=[*older, *latest])
    notes_add(key=key, text="identity")

    compacted = compact_before_latest(key, boundary=len(older), findings="the findings")

    assert conversation_load(key=key) == latest
    assert notes_read(key=key).entries == [
        {"id": "n1", "text": "identity"},
        {"id": "findings", "text": "the findings"},
    ]
    assert "identity" in compacted.notes_block
    assert "the findings" in compacted.notes_block
    attempt = CompactionAttempt.objects.get()
    assert (attempt.outcome, attempt.messages_before, attempt.messages_after) == ("applied", 6, 2)


def test_a_compaction_over_a_head_that_moved_is_refused_with_context_changed_and_recorded(key):
    conversation_save(key=key, messages=[user("a" * 500), assistant("b"), user("latest")])
    before = AgentConversation.objects.values("revision", "length", "head_digest", "notes").get()

    with pytest.raises(ApplicationError) as exc:
        conversation_compact(
            key=key,
            run_id="run-1",
            expected_length=3,
            expected_digest="0" * 64,
            boundary=2,
            findings="f",
            sizes={},
        )

    assert (exc.value.code, exc.value.status) == ("context_changed", 409)
    assert AgentConversation.objects.values("revision", "length", "head_digest", "notes").get() == before
    assert CompactionAttempt.objects.values_list("outcome", "reason").get() == ("failed", "context_changed")


def test_a_compaction_boundary_outside_the_conversation_is_invalid(key):
    conversation_save(key=key, messages=[user("a" * 500), assistant("b"), user("latest")])
    cursor = conversation_cursor(key=key)

    with pytest.raises(ApplicationError) as exc:
        conversation_compact(
            key=key,
            run_id="run-1",
            expected_length=3,
            expected_digest=cursor.digest,
            boundary=3,
            findings="f",
            sizes={},
        )

    assert exc.value.code == "invalid_request"
    assert conversation_load(key=key) == [user("a" * 500), assistant("b"), user("latest")]
    assert CompactionAttempt.objects.exists() is False


def test_rewind_past_the_stored_length_or_to_a_foreign_prefix_is_refused(key):
    conversation_append(key=key, messages=turns(2), expected_length=0)
    too_long = ConversationCursor(generation=1, length=5, digest="x")
    other_prefix = ConversationCursor(generation=1, length=1, digest="0" * 64)
    other_generation = ConversationCursor(generation=2, length=0, digest="")

    for cursor in (too_long, other_prefix, other_generation):
        with pytest.raises(ApplicationError) as exc:
            conversation_rewind(key=key, cursor=cursor)
        assert exc.value.code == "cannot_rewind"
    assert AgentConversation.objects.get().revision == 1


def test_snapshot_keep_and_restore_brings_back_messages_and_notes(key):
    conversation_append(key=key, messages=turns(3), expected_length=0)
    notes_add(key=key, text="branch A finding")
    kept = branch_snapshot_keep(key=key, thread_key="thread-1", leaf_uid="leafA")
    conversation_rewind(key=key, cursor={"generation": 1, "length": 0, "digest": "", "notes": []})
    conversation_append(key=key, messages=turns(2, "B"), expected_length=0)

    result = branch_snapshot_restore(key=key, thread_key="thread-1", leaf_uid="leafA")

    assert kept is True
    assert result.applied is True
    assert conversation_load(key=key) == turns(3)
    assert notes_read(key=key).entries == [{"id": "n1", "text": "branch A finding"}]


def test_restore_of_a_branch_never_kept_is_unavailable(key):
    with pytest.raises(ApplicationError) as exc:
        branch_snapshot_restore(key=key, thread_key="thread-1", leaf_uid="nope")

    assert exc.value.code == "branch_unavailable"


def test_the_51st_snapshot_evicts_the_oldest(key):
    conversation_append(key=key, messages=turns(1), expected_length=0)
    for i in range(BRANCH_SNAPSHOTS_PER_THREAD + 1):
        branch_snapshot_keep(key=key, thread_key="thread-1", leaf_uid=f"leaf{i:02d}")

    leaves = set(BranchSnapshot.objects.filter(thread_key="thread-1").values_list("leaf_uid", flat=True))

    assert len(leaves) == 50
    assert leaves == {f"leaf{i:02d}" for i in range(1, 51)}
    with pytest.raises(ApplicationError) as exc:
        branch_snapshot_restore(key=key, thread_key="thread-1", leaf_uid="leaf00")
    assert exc.value.code == "branch_unavailable"


def test_eviction_counts_per_thread(key):
    conversation_append(key=key, messages=turns(1), expected_length=0)
    branch_snapshot_keep(key=key, thread_key="other-thread", leaf_uid="x")
    for i in range(BRANCH_SNAPSHOTS_PER_THREAD + 1):
        branch_snapshot_keep(key=key, thread_key="thread-1", leaf_uid=f"leaf{i:02d}")

    assert BranchSnapshot.objects.filter(thread_key="other-thread").count() == 1


def test_a_snapshot_over_one_mebibyte_is_not_kept_and_drops_the_older_one(key):
    conversation_append(key=key, messages=[user("small")], expected_length=0)
    assert branch_snapshot_keep(key=key, thread_key="t", leaf_uid="leaf") is True
    big = [make_tool_result(f"c{i}", "fetch", "x" * 100_000) for i in range(11)]
    conversation_append(key=key, messages=[assistant("fetching"), *big], expected_length=1)

    kept = branch_snapshot_keep(key=key, thread_key="t", leaf_uid="leaf")

    assert kept is False
    assert BranchSnapshot.objects.exists() is False


def test_a_snapshot_just_under_one_mebibyte_is_kept(key):
    conversation_append(key=key, messages=[user("x" * 1_000_000)], expected_length=0)

    assert branch_snapshot_keep(key=key, thread_key="t", leaf_uid="leaf") is True
    assert BranchSnapshot.objects.get().bytes <= 1_048_576


def test_keeping_a_snapshot_refreshes_its_age(key):
    conversation_append(key=key, messages=turns(1), expected_length=0)
    branch_snapshot_keep(key=key, thread_key="t", leaf_uid="a")
    BranchSnapshot.objects.update(created_at=timezone.now() - timedelta(days=1))

    branch_snapshot_keep(key=key, thread_key="t", leaf_uid="a")

    assert BranchSnapshot.objects.get().created_at > timezone.now() - timedelta(minutes=1)
