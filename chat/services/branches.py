"""Feedback and the notes it leaves, and branch moves (edit, retry, switch)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat import errors
from chat.models import TERMINAL_STATES, ChatFeedback, ChatMessage, ChatNote, ChatRun, ChatThread
from chat.selectors import Tree, runs_of, tree_of
from chat.services._common import (
    FEEDBACK_EXCERPT_CHARS,
    Admission,
    _after_admission,
    _append_message,
    _check_client_id,
    _check_lane,
    _check_revision,
    _check_text,
    _err,
    _move_leaf,
    _new_run,
    _replay_of,
    _require_live,
    _thread_for_update,
)
from conversations import services as conversations
from conversations.types import ConversationKey
from graphs.models import Workflow
from opencompany.core.errors import invalid, not_found
from opencompany.core.events import chat_group, publish_on_commit
from opencompany.core.ids import mint_id

# --- feedback and notes -----------------------------------------------------------------------------


def _note_upsert(thread: ChatThread, *, key: str, kind: str, text: str) -> None:
    """Write (or replace) a note; a replaced note is told again."""
    now = timezone.now()
    updated = ChatNote.objects.filter(thread=thread, key=key).update(
        kind=kind, text=text, updated_at=now, delivered_at=None
    )
    if not updated:
        ChatNote.objects.create(thread=thread, key=key, kind=kind, text=text, updated_at=now)


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    limit = FEEDBACK_EXCERPT_CHARS
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _bracketed(tag: str, payload: dict[str, Any]) -> str:
    return f"[{tag}]{json.dumps(payload, ensure_ascii=False, separators=(', ', ': '))}[/{tag}]"


@transaction.atomic
def chat_feedback(*, workflow: Workflow, message_uid: str, value: str | None) -> dict[str, Any]:
    """Rate an answer `up`/`down` (or take the rating back with None). A rating becomes a note the
    agent reads at the start of its next turn; taking it back drops the note if still untold."""
    if value not in ("up", "down", None):
        raise invalid("value must be 'up', 'down' or null.", {"value": ["Invalid choice."]})
    thread = _thread_for_update(workflow)
    message = ChatMessage.objects.filter(
        thread=thread, uid=str(message_uid), role=ChatMessage.Role.ASSISTANT
    ).first()
    if message is None:
        raise not_found("message")
    key = f"feedback:{message.uid}"
    if value is None:
        ChatFeedback.objects.filter(thread=thread, message_uid=message.uid).delete()
        ChatNote.objects.filter(thread=thread, key=key, delivered_at__isnull=True).delete()
    else:
        ChatFeedback.objects.update_or_create(
            thread=thread, message_uid=message.uid, defaults={"value": value}
        )
        rating = "good" if value == "up" else "bad"
        _note_upsert(
            thread,
            key=key,
            kind="feedback",
            text=_bracketed("feedback", {"rating": rating, "answer": _excerpt(message.text)}),
        )
    publish_on_commit(chat_group(workflow.pk), "thread.updated", {"workflow_id": workflow.pk, "role": None})
    return {"message_id": message.uid, "feedback": value}


# --- branch moves -----------------------------------------------------------------------------------


@dataclass
class _Plan:
    left_leaf: str
    left_runs: list[str]
    rewinds: dict[str, dict[str, Any]]  # agent → cursor
    restores: list[str]  # agents
    restore_leaf: str


def _plan(
    tree: Tree,
    runs: dict[str, ChatRun],
    *,
    leaving: list[ChatMessage],
    left_leaf: str,
    generation: int,
    first_run: str | None = None,
    arriving: list[ChatMessage] | None = None,
    restore_leaf: str = "",
) -> _Plan:
    left_runs: list[str] = []
    if first_run:
        left_runs.append(first_run)
    for m in leaving:
        if m.run_id and m.run_id not in left_runs:
            left_runs.append(m.run_id)
    rewinds: dict[str, dict[str, Any]] = {}
    for run_id in left_runs:
        run = runs.get(run_id)
        if run is None:
            continue
        for agent, cursor in sorted((run.context_cursors or {}).items()):
            if agent in rewinds:
                continue
            if int(cursor.get("generation", -1)) != generation:
                raise _err(errors.OLDER_GENERATION, "That part of the chat belongs to an earlier generation.")
            rewinds[agent] = cursor
    restores: set[str] = set()
    for m in arriving or []:
        run = runs.get(m.run_id)
        if run is not None:
            restores.update((run.context_cursors or {}).keys())
    return _Plan(
        left_leaf=left_leaf,
        left_runs=left_runs,
        rewinds=rewinds,
        restores=sorted(restores),
        restore_leaf=restore_leaf,
    )


def _apply_plan(thread: ChatThread, plan: _Plan, generation: int) -> list[str]:
    """Snapshot, rewind and restore the agents' conversations. Call under the thread lock; raises
    `cannot_rewind` / `branch_unavailable` and the caller's transaction rolls everything back."""
    changed: list[str] = []
    key_of = {
        a: ConversationKey(workflow_id=thread.home_workflow_id, generation=generation, agent_node_id=a)
        for a in set(plan.rewinds) | set(plan.restores)
    }
    for agent in sorted(key_of):  # fixed order: conversation locks are taken agent by agent
        key = key_of[agent]
        if plan.left_leaf and agent in plan.rewinds:
            conversations.branch_snapshot_keep(
                key=key, thread_key=thread.snapshot_key, leaf_uid=plan.left_leaf
            )
        if agent in plan.restores:
            conversations.branch_snapshot_restore(
                key=key, thread_key=thread.snapshot_key, leaf_uid=plan.restore_leaf
            )
        else:
            conversations.conversation_rewind(key=key, cursor=plan.rewinds[agent])
        changed.append(agent)
    if plan.left_runs:
        _note_upsert(
            thread,
            key=f"branch:{plan.left_runs[0]}",
            kind="update",
            text=_bracketed(
                "update",
                {
                    "note": "The owner went back to an earlier point of this chat; what was said after it no longer counts."
                },
            ),
        )
    return changed


def _branch_preconditions(
    workflow: Workflow, expected_revision: int | None
) -> tuple[ChatThread, int, Tree, list[ChatMessage]]:
    generation = _require_live(workflow)
    thread = _thread_for_update(workflow)
    _check_revision(thread, expected_revision)
    _check_lane(thread)
    tree = tree_of(thread=thread, generation=generation)
    path = tree.path_to(thread.active_leaf_uid) if tree.by_uid else []
    return thread, generation, tree, path


def _message_generation_check(workflow: Workflow, uid: str, generation: int) -> None:
    other = (
        ChatMessage.objects.filter(thread__workflow=workflow, uid=uid).exclude(generation=generation).exists()
    )
    if other:
        raise _err(errors.OLDER_GENERATION, "That message belongs to an earlier generation of this workflow.")


@transaction.atomic
def chat_edit(
    *,
    workflow: Workflow,
    message_uid: str,
    text: str,
    expected_revision: int | None = None,
    client_message_id: str | None = None,
) -> Admission:
    """Add an edited version of an owner message beside the original and answer it. The agent's
    conversation is kept under the left branch and rewound to where the original was asked. A
    `client_message_id` already used for another message, text or operation is
    `idempotency_key_reused`."""
    text = _check_text(text)
    client_id = _check_client_id(client_message_id)
    if client_id:
        existing = ChatMessage.objects.filter(thread__workflow=workflow, client_message_id=client_id).first()
        if existing is not None:
            return _replay_of(existing, text=text, kind=ChatRun.Kind.EDIT, edit_of=message_uid)
    thread, generation, tree, path = _branch_preconditions(workflow, expected_revision)
    uids = [m.uid for m in path]
    if message_uid not in uids:
        _message_generation_check(workflow, message_uid, generation)
        raise not_found("message on the shown path")
    target = path[uids.index(message_uid)]
    if target.role != ChatMessage.Role.USER or target.kind != ChatMessage.Kind.TEXT or not target.run_id:
        raise _err(errors.NOT_EDITABLE, "Only your own messages can be edited.")
    leaving = path[uids.index(message_uid) :]
    runs = runs_of(thread=thread, run_ids=[m.run_id for m in leaving])
    plan = _plan(tree, runs, leaving=leaving, left_leaf=path[-1].uid, generation=generation)
    _apply_plan(thread, plan, generation)
    uid = mint_id("m")
    run = _new_run(
        thread,
        generation=generation,
        kind=ChatRun.Kind.EDIT,
        user_message_uid=uid,
        parent_run_id=target.run_id,
    )
    message = _append_message(
        thread,
        role=ChatMessage.Role.USER,
        text=text,
        generation=generation,
        parent_uid=target.parent_uid,
        run_id=run.run_id,
        client_message_id=client_id,
        meta={"edit_of": target.uid},
        uid=uid,
    )
    _after_admission(workflow_id=thread.home_workflow_id, revision=thread.revision, run=run, role="user")
    return Admission(message=message, run=run, created=True, revision=thread.revision)


@transaction.atomic
def chat_retry(*, workflow: Workflow, message_uid: str, expected_revision: int | None = None) -> Admission:
    """Answer the question again beside the old answer. `message_uid` is the last message on the path:
    an answer (its question is asked again) or an unanswered question."""
    thread, generation, tree, path = _branch_preconditions(workflow, expected_revision)
    uids = [m.uid for m in path]
    if message_uid not in uids:
        _message_generation_check(workflow, message_uid, generation)
        raise not_found("message on the shown path")
    if uids[-1] != message_uid:
        raise _err(errors.NOT_EDITABLE, "Only the last answer can be tried again.")
    last = path[-1]
    retried = ChatRun.objects.filter(thread=thread, run_id=last.run_id).first() if last.run_id else None
    if retried is None:
        raise _err(errors.NOT_EDITABLE, "Nothing answered that message.")
    if retried.state not in TERMINAL_STATES:
        raise _err(errors.RUN_IN_PROGRESS, "The agent is still answering.", {"run_id": retried.run_id})
    question_uid = last.uid if last.role == ChatMessage.Role.USER else retried.user_message_uid
    if question_uid not in uids:
        raise _err(errors.NOT_EDITABLE, "The question of that answer is not on the shown path.")
    question = path[uids.index(question_uid)]
    leaving = path[uids.index(question_uid) + 1 :]
    runs = runs_of(thread=thread, run_ids=[retried.run_id, *[m.run_id for m in leaving]])
    plan = _plan(
        tree,
        runs,
        leaving=leaving,
        left_leaf=path[-1].uid if leaving else "",
        generation=generation,
        first_run=retried.run_id,
    )
    _apply_plan(thread, plan, generation)
    run = _new_run(
        thread,
        generation=generation,
        kind=ChatRun.Kind.RETRY,
        user_message_uid=question.uid,
        parent_run_id=retried.run_id,
    )
    _move_leaf(thread, question.uid)
    _after_admission(workflow_id=thread.home_workflow_id, revision=thread.revision, run=run, role=None)
    return Admission(message=question, run=run, created=True, revision=thread.revision)


@transaction.atomic
def chat_switch(
    *, workflow: Workflow, message_uid: str, expected_revision: int | None = None
) -> dict[str, Any]:
    """Show another version: the path moves to the newest leaf under `message_uid`; the agent's
    conversation is kept under the left branch and restored from the arriving branch's snapshot."""
    thread, generation, tree, path = _branch_preconditions(workflow, expected_revision)
    target = tree.by_uid.get(str(message_uid))
    if target is None:
        _message_generation_check(workflow, str(message_uid), generation)
        raise not_found("message")
    uids = [m.uid for m in path]
    if target.uid in uids:
        return {"leaf_id": thread.active_leaf_uid, "revision": thread.revision, "changed": False}
    beside = next((m for m in path if m.parent_uid == target.parent_uid and m.role == target.role), None)
    if beside is None:
        raise not_found("version beside the shown path")
    new_leaf = tree.newest_leaf_under(target.uid)
    leaving = path[uids.index(beside.uid) :]
    arriving = tree.subtree_path(target.uid, new_leaf)
    runs = runs_of(thread=thread, run_ids=[m.run_id for m in leaving + arriving])
    plan = _plan(
        tree,
        runs,
        leaving=leaving,
        left_leaf=path[-1].uid,
        generation=generation,
        arriving=arriving,
        restore_leaf=new_leaf,
    )
    # The arriving branch's answer chain is restored whole; rewinding is only for agents it never touched.
    _apply_plan(thread, plan, generation)
    _move_leaf(thread, new_leaf)
    publish_on_commit(
        chat_group(workflow.pk),
        "thread.updated",
        {"workflow_id": workflow.pk, "revision": thread.revision, "role": None},
    )
    return {"leaf_id": new_leaf, "revision": thread.revision, "changed": True}
