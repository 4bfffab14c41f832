"""Branches: edit, retry and switch move the agent's Context with the shown path."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from chat import services
from chat.executor import execute_run
from chat.models import ChatMessage, ChatNote, ChatRun, ChatThread
from chat.selectors import chat_history
from conversations import services as conversations
from conversations.models import BranchSnapshot
from conversations.selectors import conversation_cursor, conversation_load
from conversations.services import notes_add
from conversations.types import ConversationKey
from graphs import services as graph_services
from opencompany.core.errors import ApplicationError
from opencompany.llm.wire import make_user
from tests.conftest import node_id

pytestmark = pytest.mark.django_db(transaction=True)


def key_of(workflow: Any, generation: int = 1) -> ConversationKey:
    return ConversationKey(
        workflow_id=workflow.pk, generation=generation, agent_node_id=node_id(workflow, "aiAgent")
    )


def run(admission: services.Admission) -> str:
    return async_to_sync(execute_run)(admission.run.run_id)


def answered(workflow: Any, text: str) -> services.Admission:
    admission = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
    assert run(admission) == "finished"
    return admission


def reply_uid(admission: services.Admission) -> str:
    return admission.run.reply_message_uid


def revision() -> int:
    return ChatThread.objects.get().revision


def chat_rows() -> dict[str, Any]:
    return {
        "thread": ChatThread.objects.values("active_leaf_uid", "revision").get(),
        "messages": list(ChatMessage.objects.order_by("id").values_list("uid", "parent_uid", "text")),
        "runs": list(ChatRun.objects.order_by("run_id").values_list("run_id", "state")),
        "notes": list(ChatNote.objects.order_by("id").values_list("key", "text")),
        "snapshots": list(
            BranchSnapshot.objects.order_by("id").values_list("leaf_uid", "agent_node_id", "created_at")
        ),
    }


def refused(code: str, call: Any, **kwargs: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        call(**kwargs)
    assert caught.value.code == code
    return caught.value


# --- edit → answer → switch back ------------------------------------------------------------------------


def test_edit_rewinds_the_agent_to_where_the_original_was_asked(workflow):
    first = answered(workflow, "first question")
    second = answered(workflow, "second question")
    asked_at = ChatRun.objects.get(run_id=second.run.run_id).context_cursors[node_id(workflow, "aiAgent")]

    services.chat_edit(workflow=workflow, message_uid=second.message.uid, text="second, reworded")

    cursor = conversation_cursor(key=key_of(workflow))
    assert asked_at["length"] == 2
    assert cursor.length == 2
    assert cursor.digest == asked_at["digest"]
    assert [m["role"] for m in conversation_load(key=key_of(workflow))] == ["user", "assistant"]
    assert first.message.uid in [m["id"] for m in chat_history(workflow=workflow)["path"]]


def test_edit_answer_switch_back_restores_the_original_conversation_and_notes_exactly(workflow):
    key = key_of(workflow)
    original = answered(workflow, "What is the plan?")
    notes_add(key=key, text="finding from the original branch")
    original_cursor = conversation_cursor(key=key)
    original_messages = conversation_load(key=key)

    edit = services.chat_edit(workflow=workflow, message_uid=original.message.uid, text="What is plan B?")
    assert run(edit) == "finished"
    notes_add(key=key, text="finding from the edited branch")
    edited_cursor = conversation_cursor(key=key)
    assert edited_cursor.digest != original_cursor.digest

    moved = services.chat_switch(
        workflow=workflow, message_uid=original.message.uid, expected_revision=revision()
    )

    restored = conversation_cursor(key=key)
    assert moved["leaf_id"] == reply_uid(original)
    assert restored.length == original_cursor.length
    assert restored.digest == original_cursor.digest
    assert restored.notes == original_cursor.notes
    assert [n["text"] for n in restored.notes or []] == ["finding from the original branch"]
    assert conversation_load(key=key) == original_messages
    assert [m["id"] for m in chat_history(workflow=workflow)["path"]] == [
        original.message.uid,
        reply_uid(original),
    ]


def test_switching_forth_again_restores_the_edited_branch_exactly(workflow):
    key = key_of(workflow)
    original = answered(workflow, "What is the plan?")
    edit = services.chat_edit(workflow=workflow, message_uid=original.message.uid, text="What is plan B?")
    run(edit)
    notes_add(key=key, text="edited finding")
    edited_cursor = conversation_cursor(key=key)
    services.chat_switch(workflow=workflow, message_uid=original.message.uid)

    services.chat_switch(workflow=workflow, message_uid=edit.message.uid)

    again = conversation_cursor(key=key)
    assert (again.length, again.digest, again.notes) == (
        edited_cursor.length,
        edited_cursor.digest,
        edited_cursor.notes,
    )
    assert ChatThread.objects.get().active_leaf_uid == reply_uid(edit)


def test_switch_to_a_message_already_on_the_path_changes_nothing(workflow):
    original = answered(workflow, "Hi")
    before = chat_rows()

    result = services.chat_switch(workflow=workflow, message_uid=original.message.uid)

    assert result == {
        "leaf_id": reply_uid(original),
        "revision": before["thread"]["revision"],
        "changed": False,
    }
    assert chat_rows() == before


# --- retry --------------------------------------------------------------------------------------------


def test_retry_keeps_both_answers_as_versions(workflow):
    original = answered(workflow, "Tell me something")

    retry = services.chat_retry(
        workflow=workflow, message_uid=reply_uid(original), expected_revision=revision()
    )
    assert run(retry) == "finished"

    history = chat_history(workflow=workflow)
    last = history["path"][-1]
    assert [m["id"] for m in history["path"]] == [original.message.uid, reply_uid(retry)]
    assert last["versions"] == {"index": 2, "count": 2, "ids": [reply_uid(original), reply_uid(retry)]}
    assert ChatRun.objects.get(run_id=retry.run.run_id).kind == "retry"
    assert [m["role"] for m in conversation_load(key=key_of(workflow))] == ["user", "assistant"]


def test_switching_back_to_the_first_answer_restores_its_conversation(workflow):
    key = key_of(workflow)
    original = answered(workflow, "Tell me something")
    first_answer = conversation_cursor(key=key)
    retry = services.chat_retry(workflow=workflow, message_uid=reply_uid(original))
    run(retry)

    services.chat_switch(workflow=workflow, message_uid=reply_uid(original))

    assert conversation_cursor(key=key).digest == first_answer.digest
    assert chat_history(workflow=workflow)["path"][-1]["versions"]["index"] == 1


def test_retry_of_an_answer_that_is_not_the_last_is_not_editable(workflow):
    first = answered(workflow, "one")
    answered(workflow, "two")
    before = chat_rows()

    refused("not_editable", services.chat_retry, workflow=workflow, message_uid=reply_uid(first))

    assert chat_rows() == before


# --- refusals: cannot_rewind, branch_unavailable, revision_conflict, older_generation, not_editable --------


def test_a_compaction_between_makes_the_rewind_cannot_rewind_and_changes_nothing(workflow):
    key = key_of(workflow)
    answered(workflow, "first question")
    second = answered(workflow, "second question")
    stored = conversation_load(key=key)
    conversations.conversation_save(
        key=key, messages=[make_user("[summary] the owner asked two things"), stored[-1]]
    )
    compacted = conversation_cursor(key=key)
    before = chat_rows()

    error = refused(
        "cannot_rewind", services.chat_edit, workflow=workflow, message_uid=second.message.uid, text="again"
    )

    assert error.status == 409
    assert chat_rows() == before
    after = conversation_cursor(key=key)
    assert (after.length, after.digest) == (compacted.length, compacted.digest)


def test_a_compaction_between_makes_a_retry_cannot_rewind_too(workflow):
    key = key_of(workflow)
    answered(workflow, "first question")
    second = answered(workflow, "second question")
    stored = conversation_load(key=key)
    conversations.conversation_save(key=key, messages=[make_user("summary"), stored[-1]])
    before = chat_rows()

    refused("cannot_rewind", services.chat_retry, workflow=workflow, message_uid=reply_uid(second))

    assert chat_rows() == before
    assert conversation_cursor(key=key).length == 2


def test_a_51st_snapshot_evicts_the_oldest_and_switching_to_it_is_branch_unavailable(workflow):
    key = key_of(workflow)
    original = answered(workflow, "original")
    edit = services.chat_edit(workflow=workflow, message_uid=original.message.uid, text="edited")
    run(edit)
    thread = ChatThread.objects.get()
    oldest = BranchSnapshot.objects.get()
    assert oldest.leaf_uid == reply_uid(original)

    for i in range(50):
        conversations.branch_snapshot_keep(key=key, thread_key=thread.snapshot_key, leaf_uid=f"leaf{i}")

    assert BranchSnapshot.objects.filter(thread_key=thread.snapshot_key).count() == 50
    assert BranchSnapshot.objects.filter(pk=oldest.pk).exists() is False
    before = chat_rows()
    edited = conversation_cursor(key=key)

    error = refused(
        "branch_unavailable", services.chat_switch, workflow=workflow, message_uid=original.message.uid
    )

    assert error.status == 409
    assert chat_rows() == before
    assert conversation_cursor(key=key).digest == edited.digest


@pytest.mark.parametrize("operation", ["send", "edit", "retry", "switch"])
def test_a_stale_expected_revision_is_revision_conflict_and_changes_nothing(workflow, operation):
    original = answered(workflow, "original")
    edit = services.chat_edit(workflow=workflow, message_uid=original.message.uid, text="edited")
    run(edit)
    stale = revision() - 1
    before = chat_rows()
    on_workflow = {"workflow": workflow}
    calls = {
        "send": (
            services.chat_send,
            {"owner_id": workflow.owner_id, "workflow_id": workflow.pk, "text": "new"},
        ),
        "edit": (services.chat_edit, {**on_workflow, "message_uid": edit.message.uid, "text": "again"}),
        "retry": (services.chat_retry, {**on_workflow, "message_uid": reply_uid(edit)}),
        "switch": (services.chat_switch, {**on_workflow, "message_uid": original.message.uid}),
    }
    call, kwargs = calls[operation]

    error = refused("revision_conflict", call, expected_revision=stale, **kwargs)

    assert error.status == 409
    assert error.extra == {"current_revision": before["thread"]["revision"]}
    assert chat_rows() == before


@pytest.mark.parametrize("operation", ["edit", "retry", "switch"])
def test_a_message_of_generation_1_after_reset_and_deploy_is_older_generation(workflow, owner, operation):
    original = answered(workflow, "original")
    edit = services.chat_edit(workflow=workflow, message_uid=original.message.uid, text="edited")
    run(edit)
    graph_services.workflow_reset(workflow=workflow, actor=owner)
    graph_services.workflow_deploy(workflow=workflow, actor=owner)
    before = chat_rows()
    calls = {
        "edit": (services.chat_edit, {"message_uid": edit.message.uid, "text": "again"}),
        "retry": (services.chat_retry, {"message_uid": reply_uid(edit)}),
        "switch": (services.chat_switch, {"message_uid": original.message.uid}),
    }
    call, kwargs = calls[operation]

    error = refused("older_generation", call, workflow=workflow, **kwargs)

    assert error.status == 409
    assert chat_rows() == before


def test_the_new_generation_starts_an_empty_path(workflow, owner):
    answered(workflow, "original")
    graph_services.workflow_reset(workflow=workflow, actor=owner)
    graph_services.workflow_deploy(workflow=workflow, actor=owner)

    fresh = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello gen 2")

    assert fresh.message.generation == 2
    assert fresh.message.parent_uid == ""
    assert [m["id"] for m in chat_history(workflow=workflow)["path"]] == [fresh.message.uid]


def test_editing_an_assistant_message_is_not_editable(workflow):
    original = answered(workflow, "original")
    before = chat_rows()

    error = refused(
        "not_editable", services.chat_edit, workflow=workflow, message_uid=reply_uid(original), text="x"
    )

    assert error.status == 409  # a well-formed request the message's role refuses: a conflict
    assert chat_rows() == before


def test_edit_while_a_run_is_live_is_run_in_progress(workflow):
    original = answered(workflow, "original")
    live = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="still going")
    before = chat_rows()

    error = refused(
        "run_in_progress", services.chat_edit, workflow=workflow, message_uid=original.message.uid, text="x"
    )

    assert error.extra == {"run_id": live.run.run_id}
    assert chat_rows() == before


def test_edit_of_a_message_not_on_the_path_is_not_found(workflow):
    answered(workflow, "original")
    before = chat_rows()

    refused("not_found", services.chat_edit, workflow=workflow, message_uid="m_nope", text="x")

    assert chat_rows() == before


def test_an_edit_resent_with_the_same_client_message_id_returns_the_first_edit(workflow):
    original = answered(workflow, "original")
    first = services.chat_edit(
        workflow=workflow, message_uid=original.message.uid, text="edited", client_message_id="e-1"
    )

    again = services.chat_edit(
        workflow=workflow, message_uid=original.message.uid, text="edited", client_message_id="e-1"
    )

    assert again.created is False
    assert again.message.uid == first.message.uid
    assert again.run.run_id == first.run.run_id
    assert ChatMessage.objects.filter(meta__edit_of=original.message.uid).count() == 1
