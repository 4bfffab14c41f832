"""The run lifecycle, used by the executor and the watchdog: a turn's notes, claim, the turn's beginning,
drafts, finish, the watchdog's sweep, staff's "end run" and the reset hook."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from chat import errors
from chat.models import LIVE_STATES, ChatMessage, ChatProcess, ChatRun, ChatThread
from chat.services._common import (
    MAX_NOTES_PER_TURN,
    _append_message,
    _err,
    _publish_run_event,
    _publish_stop,
)
from chat.stores import chat_store
from conversations import services as conversations
from conversations.models import AgentConversation
from conversations.selectors import (
    conversation_cursor,
    conversation_for_update,
    conversation_load,
    head_cursor,
    head_notes,
    notes_read,
)
from conversations.services import render_notes_block
from conversations.types import ConversationKey
from graphs.hooks import ResetContext
from opencompany.core.events import chat_group, publish_on_commit
from opencompany.llm.fidelity import epoch_for, plan_handoff
from opencompany.llm.policies import close_unanswered_tool_calls
from opencompany.llm.wire import Message, make_user

logger = logging.getLogger("chat.services")

# --- notes of a run's turn (claimed when the turn begins, told by `run_finish`) ------------------------


def _claim_notes(thread_id: int, run_id: str) -> list[str]:
    """Claim up to `MAX_NOTES_PER_TURN` untold notes for the run (oldest first). Call inside the
    caller's transaction."""
    return chat_store().notes_claim(
        thread_id=thread_id, run_id=run_id, limit=MAX_NOTES_PER_TURN, now=timezone.now()
    )


@transaction.atomic
def notes_claim(*, thread_id: int, run_id: str) -> list[str]:
    """Claim up to 8 untold notes for a run's turn (oldest first); a retried claim gets the same ones."""
    return _claim_notes(thread_id, run_id)


def notes_deliver(*, run_id: str) -> int:
    """Mark a run's claimed notes told (call when the run answered). A note changed after the claim
    stays untold."""
    return chat_store().notes_deliver(run_id=run_id, now=timezone.now())


# --- run lifecycle (used by the executor and the watchdog) -------------------------------------------
#
# Lock order, as in every chat write: the thread row, then the run row, then the agents' conversation
# heads (in agent order), then notes.


def run_claim(*, run_id: str, claimant: str) -> ChatRun | None:
    """Compare-and-swap `queued → running`; None when someone else has it or it ended."""
    now = timezone.now()
    claimed = ChatRun.objects.filter(run_id=run_id, state=ChatRun.State.QUEUED).update(
        state=ChatRun.State.RUNNING,
        claimant=claimant,
        started_at=now,
        heartbeat_at=now,
        last_seq=F("last_seq") + 1,
    )
    if not claimed:
        return None
    return ChatRun.objects.get(run_id=run_id)


@dataclass(frozen=True)
class RunBegun:
    """A run's turn as it began: the stored conversation the agent continues (tool calls a dead run left
    unanswered are closed) followed by the owner's turn, the agent's notes block, and the conversation's
    head digest after the owner's turn ("" when the agent keeps no conversation), and the epoch the run's
    turns belong to."""

    messages: list[Message]
    notes_block: str
    digest: str
    epoch: int = 1


@transaction.atomic
def run_begin(
    *, run_id: str, claimant: str, key: ConversationKey | None, runtime: str | None = None
) -> RunBegun:
    """Begin a claimed run's turn, all in one transaction: claim the chat's untold notes for the run,
    repair the agent's stored conversation (close the tool calls a dead run left unanswered), record the
    conversation's cursor on the run (the prefix before this turn; the first record per agent wins),
    and append the owner's turn, the claimed notes as bracketed lines ahead of the owner's text.

    `key`: the answering agent's conversation, or None when the agent keeps none (then only the notes
    are claimed). `runtime`: the provider the run talks to; when the stored turns hold another
    runtime's opaque state, the conversation starts a new epoch with its portable hand-off (the original
    archived) before the cursor is recorded. The conversation's head row stays locked from its load to
    the append. Refused with `run_ended` (and nothing written) when the run is no longer live or no
    longer this claimant's.
    """
    locked = chat_store().run_lock(run_id=run_id, claimant=claimant)
    if locked is None:
        raise _err(errors.RUN_ENDED, "The run has ended or belongs to another claimant.", {"run_id": run_id})
    run = locked[1]
    head = conversation_for_update(key=key) if key is not None else None
    notes = _claim_notes(run.thread_id, run.run_id)
    question = ChatMessage.objects.get(thread_id=run.thread_id, uid=run.user_message_uid)
    user = make_user("\n".join(notes) + "\n\n" + question.text if notes else question.text)
    if key is None:
        return RunBegun(messages=[user], notes_block="", digest="")
    return _begin_turn(run, key, user, head=head, runtime=runtime)


@transaction.atomic
def run_delegate_begin(
    *, run_id: str, claimant: str, key: ConversationKey, text: str, runtime: str | None = None
) -> RunBegun:
    """Begin a teammate's turn inside a live run, the lead having delegated `text` to it: as
    `run_begin` for the teammate's own conversation (repair, the cursor recorded on the run so a branch
    move rewinds the teammate too, the task appended as its user turn), without chat notes. Refused
    with `run_ended` when the run is no longer live or no longer this claimant's."""
    locked = chat_store().run_lock(run_id=run_id, claimant=claimant)
    if locked is None:
        raise _err(errors.RUN_ENDED, "The run has ended or belongs to another claimant.", {"run_id": run_id})
    run = locked[1]
    head = conversation_for_update(key=key)
    return _begin_turn(run, key, make_user(text), head=head, runtime=runtime)


def _begin_turn(
    run: ChatRun, key: ConversationKey, user: Message, *, head: AgentConversation | None, runtime: str | None
) -> RunBegun:
    """Repair the agent's stored conversation, record its cursor on the run (first record per agent
    wins) and append `user`; a `runtime` other than the stored turns' starts a new epoch (see
    `run_begin`). Call inside the transaction that locked the thread, the run and the
    conversation's head row (`head`, None when there is none)."""
    loaded = conversation_load(key=key) if head is not None else []
    stored = close_unanswered_tool_calls(loaded)
    handoff = plan_handoff(stored, runtime) if runtime is not None else None
    rewritten = True
    if handoff is not None:
        conversations.conversation_start_epoch(key=key, messages=handoff.messages)
        stored = handoff.messages
    elif stored != loaded:
        conversations.conversation_save(key=key, messages=stored)
    else:
        rewritten = False
    # Unless rewritten above, the locked head row is as it was read: its cursor and notes are current.
    cursor = conversation_cursor(key=key) if rewritten else head_cursor(key=key, head=head)
    cursors = dict(run.context_cursors or {})
    if key.agent_node_id not in cursors:  # the run row is locked: the merge cannot lose a record
        cursors[key.agent_node_id] = cursor.as_dict()
        ChatRun.objects.filter(pk=run.pk).update(context_cursors=cursors)
    notes_block = render_notes_block(notes_read(key=key) if rewritten else head_notes(head=head))
    written = conversations.conversation_append(
        key=key, messages=[user], expected_length=cursor.length, expected_digest=cursor.digest
    )
    epoch = epoch_for(stored, runtime) if runtime is not None else 1
    return RunBegun(messages=[*stored, user], notes_block=notes_block, digest=written.digest, epoch=epoch)


def run_save_draft(*, run_id: str, claimant: str, text: str, steps: list[dict[str, Any]], seq: int) -> bool:
    """Durable stream snapshot + heartbeat; False when the run is no longer this claimant's.

    A running answer saves its draft every quarter second, so this goes through the chat store (a
    prepared statement on PostgreSQL)."""
    return chat_store().draft_save(
        run_id=run_id, claimant=claimant, text=text, steps=steps, seq=seq, now=timezone.now()
    )


def run_state(*, run_id: str) -> str | None:
    """The run's state (None for an unknown run): Stop's fallback polls it while a run is live, so it
    goes through the chat store."""
    return chat_store().run_state(run_id=run_id)


@transaction.atomic
def run_finish(
    *,
    run_id: str,
    claimant: str | None,
    outcome: str,
    text: str,
    seq: int,
    steps: list[dict[str, Any]] | None = None,
    error_code: str = "",
    error_message: str = "",
    usage: dict[str, Any] | None = None,
) -> ChatRun | None:
    """End a live run in one terminal state and post its reply (if it has text, or it failed).

    `outcome` is `finished`, `stopped` or `error`; a run in `stopping` always ends `stopped`. Only the
    claimant may finish a claimed run (the watchdog passes `claimant=None`). Notes the run carried are
    marked told only if it answered. Returns None when the run had already ended.
    """
    locked = chat_store().run_lock(run_id=run_id, claimant=claimant)
    if locked is None:
        return None
    thread, run = locked
    if run.state == ChatRun.State.STOPPING and outcome != ChatRun.State.ERROR:
        outcome = ChatRun.State.STOPPED
    if (
        run.state == ChatRun.State.STOPPING
        and outcome == ChatRun.State.ERROR
        and error_code == errors.INTERRUPTED
    ):
        outcome = ChatRun.State.STOPPED
    reply: ChatMessage | None = None
    status: str = {
        ChatRun.State.FINISHED: ChatMessage.Status.COMPLETE,
        ChatRun.State.STOPPED: ChatMessage.Status.STOPPED,
        ChatRun.State.ERROR: ChatMessage.Status.ERROR,
    }[ChatRun.State(outcome)]
    if text.strip() or outcome == ChatRun.State.ERROR:
        leaf_before = thread.active_leaf_uid
        question_on_leaf = leaf_before == run.user_message_uid
        reply = _append_message(
            thread,
            role=ChatMessage.Role.ASSISTANT,
            text=text,
            generation=run.generation,
            parent_uid=run.user_message_uid,
            run_id=run.run_id,
            uid=run.reply_message_uid,
            status=status,
            error_code=error_code if outcome == ChatRun.State.ERROR else "",
            error_message=error_message if outcome == ChatRun.State.ERROR else "",
        )
        if not question_on_leaf:
            # The owner moved elsewhere meanwhile: keep the answer in the tree, not on the shown path.
            ChatThread.objects.filter(pk=thread.pk).update(active_leaf_uid=leaf_before)
            thread.active_leaf_uid = leaf_before
    ended = {
        "state": outcome,
        "finished_at": timezone.now(),
        "draft_text": text,
        "draft_steps": steps if steps is not None else run.draft_steps,
        "last_seq": max(seq, run.last_seq) + 1,
        "error_code": error_code[:60] if outcome == ChatRun.State.ERROR else "",
        "error_message": error_message[:500] if outcome == ChatRun.State.ERROR else "",
        "usage": usage or {},
    }
    ChatRun.objects.filter(pk=run.pk).update(**ended)
    for field, value in ended.items():  # the row is locked: the copy is exact without a read-back
        setattr(run, field, value)
    answered = outcome == ChatRun.State.FINISHED or (outcome == ChatRun.State.STOPPED and reply is not None)
    if answered:
        notes_deliver(run_id=run.run_id)
    event = {"finished": "run.finished", "stopped": "run.stopped", "error": "run.error"}[outcome]
    data: dict[str, Any] = {"reply_message_id": reply.uid if reply else None, "text": text}
    if outcome == ChatRun.State.ERROR:
        data.update(code=run.error_code, message=run.error_message)
    _publish_run_event(run, event, data)
    publish_on_commit(
        chat_group(run.workflow_id),
        "thread.updated",
        {"workflow_id": run.workflow_id, "revision": thread.revision, "role": "assistant"},
    )
    return run


def runs_needing_watchdog(*, now: Any = None) -> list[ChatRun]:
    now = now or timezone.now()
    unclaimed = Q(state=ChatRun.State.QUEUED, created_at__lt=now - timedelta(seconds=120))
    stuck_stopping = Q(state=ChatRun.State.STOPPING, stop_requested_at__lt=now - timedelta(seconds=45))
    too_long = Q(
        state__in=[ChatRun.State.RUNNING, ChatRun.State.STOPPING],
        started_at__lt=now - timedelta(seconds=int(settings.OPENCOMPANY_RUN_TIMEOUT_S)),
    )
    dead = Q(
        state__in=[ChatRun.State.RUNNING, ChatRun.State.STOPPING],
        heartbeat_at__lt=now - timedelta(seconds=int(settings.OPENCOMPANY_RUN_HEARTBEAT_TIMEOUT_S)),
    )
    return list(ChatRun.objects.filter(unclaimed | stuck_stopping | too_long | dead).order_by("created_at"))


def watchdog_pass(*, now: Any = None) -> dict[str, int]:
    """One sweep: unclaimed past 120 s → `error/not_delivered`; `stopping` past 45 s → `stopped`;
    running past the timeout → `error/timed_out`; a claimant that stopped heartbeating →
    `error/interrupted` (its draft kept as a stopped reply). Each frees the lane. One bad row never
    stops the sweep."""
    now = now or timezone.now()
    counts = {"not_delivered": 0, "stopped": 0, "timed_out": 0, "interrupted": 0}
    for run in runs_needing_watchdog(now=now):
        try:
            if run.state == ChatRun.State.QUEUED:
                run_finish(
                    run_id=run.run_id,
                    claimant=None,
                    outcome="error",
                    text="",
                    seq=run.last_seq,
                    error_code=errors.NOT_DELIVERED,
                    error_message="The agent did not pick up this message.",
                )
                counts["not_delivered"] += 1
            elif run.started_at and (now - run.started_at).total_seconds() > int(
                settings.OPENCOMPANY_RUN_TIMEOUT_S
            ):
                run_finish(
                    run_id=run.run_id,
                    claimant=None,
                    outcome="error",
                    text=run.draft_text,
                    seq=run.last_seq,
                    error_code=errors.TIMED_OUT,
                    error_message="The run took too long and was ended.",
                )
                counts["timed_out"] += 1
            elif run.state == ChatRun.State.STOPPING:
                run_finish(
                    run_id=run.run_id, claimant=None, outcome="stopped", text=run.draft_text, seq=run.last_seq
                )
                counts["stopped"] += 1
            else:
                _interrupt(run)
                counts["interrupted"] += 1
        except Exception:
            logger.exception("watchdog could not end run=%s", run.run_id)
    return counts


PROCESS_BEATS_KEPT = timedelta(days=1)


def watchdog_sweep(*, now: Any = None) -> dict[str, int] | None:
    """One `watchdog_pass`, unless another process is sweeping now (then None): the store's sweep lock
    (on PostgreSQL a session advisory lock) keeps it to one sweep at a time. Also forgets process
    heartbeats older than a day."""
    with chat_store().sweep_lock() as held:
        return _sweep(now) if held else None


def _sweep(now: Any) -> dict[str, int]:
    counts = watchdog_pass(now=now)
    ChatProcess.objects.filter(beat_at__lt=(now or timezone.now()) - PROCESS_BEATS_KEPT).delete()
    return counts


def process_beat(*, name: str, role: str, started_at: Any) -> None:
    """Record that the process `name` (host:pid) is alive and sweeping."""
    ChatProcess.objects.update_or_create(
        name=name, defaults={"role": role, "started_at": started_at, "beat_at": timezone.now()}
    )


def process_gone(*, name: str) -> None:
    """Forget a process that is shutting down."""
    ChatProcess.objects.filter(name=name).delete()


@transaction.atomic
def _interrupt(run: ChatRun) -> None:
    """The worker died: keep its draft as a stopped reply, record the error, free the lane."""
    thread = ChatThread.objects.select_for_update().filter(pk=run.thread_id).first()
    locked = ChatRun.objects.select_for_update().filter(run_id=run.run_id, state__in=LIVE_STATES).first()
    if thread is None or locked is None:
        return
    if locked.draft_text.strip():
        _append_message(
            thread,
            role=ChatMessage.Role.ASSISTANT,
            text=locked.draft_text,
            generation=locked.generation,
            parent_uid=locked.user_message_uid,
            run_id=locked.run_id,
            uid=locked.reply_message_uid,
            status=ChatMessage.Status.STOPPED,
            error_code=errors.INTERRUPTED,
            error_message="The agent stopped unexpectedly; this answer may be incomplete.",
        )
    ChatRun.objects.filter(pk=locked.pk).update(
        state=ChatRun.State.ERROR,
        finished_at=timezone.now(),
        error_code=errors.INTERRUPTED,
        error_message="The agent stopped unexpectedly.",
        last_seq=F("last_seq") + 1,
    )
    locked.refresh_from_db()
    _publish_run_event(
        locked,
        "run.error",
        {"code": errors.INTERRUPTED, "message": locked.error_message, "text": locked.draft_text},
    )
    publish_on_commit(
        chat_group(locked.workflow_id), "thread.updated", {"workflow_id": locked.workflow_id, "role": None}
    )


def chat_end_run(*, run_id: str) -> ChatRun | None:
    """Staff's "end run": a live run ends `stopped` now (its draft kept as a stopped reply), freeing
    the lane; an executor still working on it hears the stop and finds the row ended. None when the
    run had already ended."""
    with transaction.atomic():
        run = ChatRun.objects.filter(run_id=str(run_id), state__in=LIVE_STATES).first()
        if run is None:
            return None
        ended = run_finish(
            run_id=run.run_id,
            claimant=None,
            outcome=ChatRun.State.STOPPED,
            text=run.draft_text,
            seq=run.last_seq,
        )
        if ended is not None:
            transaction.on_commit(partial(_publish_stop, ended.run_id), robust=True)
        return ended


def chat_reset_hook(ctx: ResetContext) -> dict[str, Any]:
    """Reset hook: a closed generation's live runs end `error/reset` (their drafts kept), freeing the lane
    for the next generation. Runs inside Reset's transaction."""
    ended = 0
    for run_id in ChatRun.objects.filter(
        workflow_id=ctx.workflow_id, generation=ctx.generation, state__in=LIVE_STATES
    ).values_list("run_id", flat=True):
        run = ChatRun.objects.get(run_id=run_id)
        if run_finish(
            run_id=run_id,
            claimant=None,
            outcome=ChatRun.State.ERROR,
            text=run.draft_text,
            seq=run.last_seq,
            error_code=errors.RESET,
            error_message="The workflow was reset.",
        ):
            transaction.on_commit(partial(_publish_stop, run_id), robust=True)
            ended += 1
    return {"runs_ended": ended}
