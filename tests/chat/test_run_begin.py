"""A run's turn begins in one transaction: notes claimed, the stored conversation repaired, the cursor
recorded and the owner's turn appended, or none of it."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from chat import services
from chat.executor import prepare_run
from chat.models import ChatNote, ChatRun
from conversations.models import ConversationMessage
from conversations.selectors import conversation_cursor, conversation_load, notes_read
from conversations.services import conversation_append, notes_add, render_notes_block
from conversations.types import ConversationKey
from opencompany.core.errors import ApplicationError
from opencompany.core.events import owner_group
from opencompany.llm.policies import INTERRUPTED_RESULT_TEXT
from opencompany.llm.wire import make_assistant, make_tool_call, make_user, text_of
from tests.conftest import demo_graph, make_workflow, node_id

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = '[update]{"note": "The owner went back to an earlier point of this chat."}[/update]'


def key_of(workflow: Any) -> ConversationKey:
    return ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=node_id(workflow, "aiAgent"))


@pytest.fixture
def waiting_turn(workflow: Any) -> tuple[str, str]:
    """A conversation whose last assistant turn called a tool that never answered (a dead run's), an
    untold note, and a claimed run whose turn has not begun. Returns (run_id, claimant)."""
    conversation_append(
        key=key_of(workflow),
        messages=[
            make_user("Where is the lighthouse?"),
            make_assistant(
                [make_tool_call("call_1", "memory", {"operation": "recall", "query": "lighthouse"})]
            ),
        ],
        expected_length=0,
    )
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="Are you there?")
    ChatNote.objects.create(
        thread_id=admission.run.thread_id, key="branch:x", kind="update", text=NOTE, updated_at=timezone.now()
    )
    claimant = services.new_claimant()
    if services.run_claim(run_id=admission.run.run_id, claimant=claimant) is None:
        raise RuntimeError("the fresh run could not be claimed")
    return admission.run.run_id, claimant


def test_a_failure_after_the_notes_claim_leaves_the_notes_unclaimed_and_nothing_written(
    workflow: Any, waiting_turn: tuple[str, str], events: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, claimant = waiting_turn
    key = key_of(workflow)
    before = conversation_load(key=key)
    events.subscribe(owner_group(workflow.owner_id))

    def append_fails(**kwargs: Any) -> Any:
        raise RuntimeError("the database went away")

    monkeypatch.setattr("conversations.services.conversation_append", append_fails)

    with pytest.raises(RuntimeError):
        services.run_begin(run_id=run_id, claimant=claimant, key=key)

    note = ChatNote.objects.get()
    assert (note.claimed_run_id, note.claimed_at, note.delivered_at) == ("", None, None)
    assert conversation_load(key=key) == before  # not repaired either
    assert len(before) == 2
    assert ChatRun.objects.get(run_id=run_id).context_cursors == {}
    assert events.drain() == []


def test_a_turn_begins_with_the_repair_the_cursor_before_it_and_the_owners_turn_with_the_notes(
    workflow: Any, waiting_turn: tuple[str, str]
) -> None:
    run_id, claimant = waiting_turn
    key = key_of(workflow)

    begun = services.run_begin(run_id=run_id, claimant=claimant, key=key)

    stored = conversation_load(key=key)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "user"]
    assert stored[2]["content"][0]["tool_call_id"] == "call_1"
    assert stored[2]["content"][0]["status"] == "interrupted"
    assert text_of(stored[2]) == INTERRUPTED_RESULT_TEXT
    assert text_of(stored[3]) == NOTE + "\n\nAre you there?"
    assert begun.messages == stored
    assert begun.digest == conversation_cursor(key=key).digest
    cursor = ChatRun.objects.get(run_id=run_id).context_cursors[key.agent_node_id]
    before_turn = ConversationMessage.objects.get(conversation__agent_node_id=key.agent_node_id, seq=2)
    assert (cursor["generation"], cursor["length"], cursor["digest"]) == (1, 3, before_turn.digest)
    note = ChatNote.objects.get()
    assert note.claimed_run_id == run_id
    assert note.delivered_at is None


def test_a_turn_that_begins_again_keeps_the_first_cursor(
    workflow: Any, waiting_turn: tuple[str, str]
) -> None:
    run_id, claimant = waiting_turn
    key = key_of(workflow)
    services.run_begin(run_id=run_id, claimant=claimant, key=key)
    first = ChatRun.objects.get(run_id=run_id).context_cursors

    services.run_begin(run_id=run_id, claimant=claimant, key=key)

    assert ChatRun.objects.get(run_id=run_id).context_cursors == first
    assert first[key.agent_node_id]["length"] == 3


@pytest.mark.parametrize("why", ["another_claimant", "ended"])
def test_a_run_no_longer_this_claimants_does_not_begin_and_writes_nothing(
    workflow: Any, waiting_turn: tuple[str, str], why: str
) -> None:
    run_id, claimant = waiting_turn
    key = key_of(workflow)
    if why == "ended":
        services.chat_end_run(run_id=run_id)
    before = conversation_load(key=key)
    cursors = ChatRun.objects.get(run_id=run_id).context_cursors

    with pytest.raises(ApplicationError) as refused:
        services.run_begin(run_id=run_id, claimant=claimant if why == "ended" else "someone-else", key=key)

    assert refused.value.code == "run_ended"
    assert refused.value.extra == {"run_id": run_id}
    assert conversation_load(key=key) == before
    assert ChatRun.objects.get(run_id=run_id).context_cursors == cursors
    assert ChatNote.objects.get().claimed_run_id == ""


def test_an_agent_without_a_stored_conversation_gets_the_notes_and_the_text_only(
    workflow: Any, waiting_turn: tuple[str, str]
) -> None:
    run_id, claimant = waiting_turn
    key = key_of(workflow)
    before = conversation_load(key=key)

    begun = services.run_begin(run_id=run_id, claimant=claimant, key=None)

    assert begun.messages == [make_user(NOTE + "\n\nAre you there?")]
    assert (begun.notes_block, begun.digest) == ("", "")
    assert conversation_load(key=key) == before
    assert ChatRun.objects.get(run_id=run_id).context_cursors == {}
    assert ChatNote.objects.get().claimed_run_id == run_id


def test_the_request_offers_the_wired_tools_and_the_notes_of_a_stored_conversation(
    workflow: Any, waiting_turn: tuple[str, str]
) -> None:
    run_id, claimant = waiting_turn

    prepared = prepare_run(ChatRun.objects.get(run_id=run_id), claimant=claimant)

    assert prepared.tool_names == ["memory", "notes"]
    assert prepared.memory_node_id == node_id(workflow, "simpleMemory")
    assert prepared.key == key_of(workflow)
    assert prepared.messages == conversation_load(key=key_of(workflow))


def test_an_agent_with_neither_memory_nor_context_is_offered_no_tools(owner: Any) -> None:
    bare = make_workflow(owner, demo_graph(with_memory=False, with_context=False), name="Bare")
    admission = services.chat_send(owner_id=owner.pk, workflow_id=bare.pk, text="Hello")
    claimant = services.new_claimant()
    run = services.run_claim(run_id=admission.run.run_id, claimant=claimant)
    assert run is not None

    prepared = prepare_run(run, claimant=claimant)

    assert (prepared.tool_names, prepared.memory_node_id, prepared.key) == ([], None, None)
    assert prepared.messages == [make_user("Hello")]


def test_a_turn_on_a_sound_conversation_begins_from_the_locked_head_without_reading_it_again(
    workflow: Any, django_assert_num_queries: Any
) -> None:
    key = key_of(workflow)
    conversation_append(
        key=key,
        messages=[
            make_user("Where is the lighthouse?"),
            make_assistant([{"type": "text", "text": "North."}]),
        ],
        expected_length=0,
    )
    notes_add(key=key, text="The owner asks about lighthouses.")
    cursor_before = conversation_cursor(key=key)
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="And south?")
    claimant = services.new_claimant()
    assert services.run_claim(run_id=admission.run.run_id, claimant=claimant) is not None

    # BEGIN, thread lock (the run's thread id as a subquery), run lock, head lock, notes claim, the
    # question, load, cursor record, append, COMMIT: cursor and notes come from the locked head row.
    # SQLite's store appends in five statements (savepoint, head update, read-back, insert, release).
    with django_assert_num_queries(10 if connection.vendor == "postgresql" else 14):
        begun = services.run_begin(run_id=admission.run.run_id, claimant=claimant, key=key)

    run = ChatRun.objects.get(run_id=admission.run.run_id)
    assert run.context_cursors == {key.agent_node_id: cursor_before.as_dict()}
    assert begun.notes_block == render_notes_block(notes_read(key=key))
    assert begun.notes_block != ""
    assert [text_of(m) for m in begun.messages] == ["Where is the lighthouse?", "North.", "And south?"]
    assert begun.digest == conversation_cursor(key=key).digest
