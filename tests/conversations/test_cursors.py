"""Cursors, rewinds, compaction and branch snapshots."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.compaction import conversation_compact
from conversations.models import AgentConversation, BranchSnapshot
from conversations.notes import notes_add, notes_read
from conversations.selectors import conversation_cursor, conversation_load
from conversations.services import (
    BRANCH_SNAPSHOTS_PER_THREAD,
    branch_snapshot_keep,
    branch_snapshot_restore,
    conversation_append,
    conversation_rewind,
    conversation_save,
)
from conversations.types import ConversationCursor
from opencompany.core.errors import ApplicationError
from opencompany.llm.wire import make_tool_result
from tests.conversations.conftest import assistant, tool_turn, turns, user

pytestmark = pytest.mark.django_db


class FixedSummarizer:
    def __init__(self, text: str = "short summary") -> None:
        self.text = text
        self.seen: list[list[dict]] = []

    async def summarize(self, messages):
        self.seen.append(messages)
        return self.text


class FailingSummarizer:
    async def summarize(self, messages):
        raise RuntimeError("provider down")


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

    compacted = conversation_compact(key=key, summarizer=FixedSummarizer())

    assert compacted.applied is True
    with pytest.raises(ApplicationError) as exc:
        conversation_rewind(key=key, cursor=cursor)
    assert exc.value.code == "cannot_rewind"
    assert exc.value.status == 409


def test_compaction_summarizes_older_turns_into_one_user_message_and_keeps_notes(key):
    system = {"role": "system", "content": [{"type": "text", "text": "You are helpful."}], "metadata": {}}
    older = [user("a" * 500), *tool_turn("c1", result="r" * 800), assistant("b" * 500)]
    latest = [user("latest question"), assistant("latest answer")]
    conversation_save(key=key, messages=[system, *older, *latest])
    notes_add(key=key, text="identity")
    summarizer = FixedSummarizer("the summary")

    conversation_compact(key=key, summarizer=summarizer)

    stored = conversation_load(key=key)
    assert stored[0] == system
    assert stored[2:] == latest
    assert stored[1]["role"] == "user"
    assert stored[1]["content"][0]["text"].endswith("the summary")
    assert summarizer.seen == [older]
    assert notes_read(key=key).entries == [{"id": "n1", "text": "identity"}]


def test_compaction_that_does_not_shrink_is_not_applied(key):
    conversation_save(key=key, messages=[user("hi"), assistant("yo"), user("latest")])

    result = conversation_compact(key=key, summarizer=FixedSummarizer("x" * 5000))

    assert result.applied is False
    assert conversation_load(key=key) == [user("hi"), assistant("yo"), user("latest")]


def test_failed_summarizer_leaves_the_conversation_as_it_was(key):
    conversation_save(key=key, messages=[user("a" * 500), assistant("b"), user("latest")])
    before = AgentConversation.objects.values("revision", "length", "head_digest").get()

    with pytest.raises(RuntimeError):
        conversation_compact(key=key, summarizer=FailingSummarizer())

    assert AgentConversation.objects.values("revision", "length", "head_digest").get() == before


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
