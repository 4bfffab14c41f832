"""Owner chat writes: send, stop, edit, retry, switch, feedback, clear, and the run lifecycle.

Every entry point owns its transaction. The thread row is the chat's lock: admissions and branch moves
take it first (`select_for_update`), then the conversation head rows in agent order, so two writers to
one chat serialize instead of forking the tree. Events go out after commit.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from chat import errors
from chat.models import LIVE_STATES, TERMINAL_STATES, ChatFeedback, ChatMessage, ChatNote, ChatRun, ChatThread
from chat.selectors import Tree, live_generation, runs_of, tree_of
from conversations import services as conversations
from conversations.models import BranchSnapshot
from conversations.types import ConversationKey
from graphs.hooks import ResetContext
from graphs.models import Workflow
from opencompany.core.db import hot_fetchone
from opencompany.core.errors import ApplicationError, invalid, not_found
from opencompany.core.events import chat_group, publish_now, publish_on_commit
from opencompany.core.ids import mint_id

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 50_000
MAX_NOTES_PER_TURN = 8
FEEDBACK_EXCERPT_CHARS = 300
_CLIENT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")


def _err(code: str, message: str, extra: dict[str, Any] | None = None) -> ApplicationError:
    return ApplicationError(code, message, extra, status=errors.STATUS.get(code, 400))


@dataclass
class Admission:
    """What send/edit/retry admitted (or found again, for an idempotent re-send)."""

    message: ChatMessage
    run: ChatRun
    created: bool
    revision: int


# --- helpers (plain; entry points own the transaction) ----------------------------------------------


def _thread_for_update(workflow: Workflow) -> ChatThread:
    """The workflow's thread, created on first use, locked for the rest of the transaction."""
    thread = ChatThread.objects.select_for_update().filter(workflow=workflow).first()
    if thread is None:
        ChatThread.objects.get_or_create(workflow=workflow)  # the unique workflow column settles a race
        thread = ChatThread.objects.select_for_update().get(workflow=workflow)
    return thread


def _require_live(workflow: Workflow) -> int:
    generation = live_generation(workflow=workflow)
    if generation == 0:
        raise _err(errors.NOT_RUNNING, "This workflow is not deployed; deploy it to chat with its agent.")
    return generation


def _check_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise invalid("The message must be non-blank text.", {"text": ["This field may not be blank."]})
    if len(text) > MAX_MESSAGE_CHARS:
        raise _err(
            errors.MESSAGE_TOO_LONG,
            f"A message may hold at most {MAX_MESSAGE_CHARS} characters.",
            {"limit": MAX_MESSAGE_CHARS, "length": len(text)},
        )
    return text


def _check_client_id(client_message_id: str | None) -> str:
    if client_message_id in (None, ""):
        return ""
    if not isinstance(client_message_id, str) or not _CLIENT_ID.match(client_message_id):
        raise invalid(
            "client_message_id must be 1 to 100 characters of letters, digits, '_', '.', ':' or '-'.",
            {"client_message_id": ["Invalid format."]},
        )
    return client_message_id


def _check_revision(thread: ChatThread, expected_revision: int | None) -> None:
    if expected_revision is None:
        return
    if isinstance(expected_revision, bool) or not isinstance(expected_revision, int):
        raise invalid("expected_revision must be an integer.", {"expected_revision": ["Must be an integer."]})
    if thread.revision != expected_revision:
        raise _err(
            errors.REVISION_CONFLICT,
            "The chat changed since you loaded it; reload and try again.",
            {"current_revision": thread.revision},
        )


def _check_lane(thread: ChatThread) -> None:
    live = (
        ChatRun.objects.filter(thread=thread, state__in=LIVE_STATES).values_list("run_id", flat=True).first()
    )
    if live:
        raise _err(
            errors.RUN_IN_PROGRESS, "The agent is still answering; wait or stop it first.", {"run_id": live}
        )


def _append_message(
    thread: ChatThread,
    *,
    role: str,
    text: str,
    generation: int,
    parent_uid: str,
    run_id: str = "",
    client_message_id: str = "",
    status: str = ChatMessage.Status.COMPLETE,
    uid: str | None = None,
    meta: dict[str, Any] | None = None,
    error_code: str = "",
    error_message: str = "",
) -> ChatMessage:
    """Insert a message and make it the thread's leaf (revision + 1). Call under the thread lock."""
    message = ChatMessage.objects.create(
        thread=thread,
        uid=uid or mint_id("m" if role == ChatMessage.Role.USER else "a"),
        parent_uid=parent_uid,
        role=role,
        text=text,
        generation=generation,
        run_id=run_id,
        client_message_id=client_message_id,
        status=status,
        meta=meta or {},
        error_code=error_code,
        error_message=error_message[:500],
    )
    _move_leaf(thread, message.uid)
    return message


def _move_leaf(thread: ChatThread, leaf_uid: str) -> None:
    """Make `leaf_uid` the shown path's end (revision + 1). Call under the thread lock: the row cannot
    change meanwhile, so the in-memory copy is updated without reading it back."""
    ChatThread.objects.filter(pk=thread.pk).update(
        active_leaf_uid=leaf_uid, revision=F("revision") + 1, updated_at=timezone.now()
    )
    thread.active_leaf_uid = leaf_uid
    thread.revision += 1


def _leaf_parent(thread: ChatThread, generation: int) -> str:
    """Where a new owner message hangs: the active leaf when it belongs to this generation."""
    leaf = thread.active_leaf_uid
    if leaf and ChatMessage.objects.filter(thread=thread, uid=leaf, generation=generation).exists():
        return leaf
    return ""


def new_claimant() -> str:
    """A run claimant: host, process, and a per-claim token (the watchdog keys heartbeats on it)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _claims_at_admission() -> bool:
    """In-process runs execute in the admitting process, so the admission is the claim: the run row is
    written `running` (seq 1) and `run.started` leaves with the admitting commit, with no second
    transaction and no wait behind the process's run work. Other executors claim with `run_claim`."""
    return str(settings.OPENCOMPANY_RUN_EXECUTOR) == "inprocess"


def _admission_claim() -> dict[str, Any]:
    """The claim columns a new run is written with (empty: it waits `queued` for a worker)."""
    if not _claims_at_admission():
        return {}
    now = timezone.now()
    return {
        "state": ChatRun.State.RUNNING,
        "claimant": new_claimant(),
        "started_at": now,
        "heartbeat_at": now,
        "last_seq": 1,
    }


def _new_run(
    thread: ChatThread, *, generation: int, kind: str, user_message_uid: str, parent_run_id: str = ""
) -> ChatRun:
    run_id = mint_id("run")
    claim = _admission_claim()
    try:
        with transaction.atomic():
            return ChatRun.objects.create(
                run_id=run_id,
                thread=thread,
                workflow_id=thread.workflow_id,
                generation=generation,
                kind=kind,
                user_message_uid=user_message_uid,
                reply_message_uid=f"a_{run_id}",
                parent_run_id=parent_run_id,
                **claim,
            )
    except IntegrityError as exc:  # the lane index fired: another run got in first
        live = (
            ChatRun.objects.filter(thread=thread, state__in=LIVE_STATES)
            .values_list("run_id", flat=True)
            .first()
        )
        raise _err(
            errors.RUN_IN_PROGRESS, "The agent is still answering; wait or stop it first.", {"run_id": live}
        ) from exc


def run_started_event(run: ChatRun) -> dict[str, Any]:
    """The `run.started` payload (seq 1, set by the claim)."""
    return {
        "kind": run.kind,
        "user_message_id": run.user_message_uid,
        "reply_message_id": run.reply_message_uid,
    }


def _after_admission(thread: ChatThread, run: ChatRun | None, role: str | None) -> None:
    publish_on_commit(
        chat_group(thread.workflow_id),
        "thread.updated",
        {"workflow_id": thread.workflow_id, "revision": thread.revision, "role": role},
    )
    if run is None:
        return
    if run.state == ChatRun.State.RUNNING:  # claimed at admission (in-process executor)
        _publish_run_event(run, "run.started", run_started_event(run))
        claimed = run
        transaction.on_commit(lambda: _dispatch(claimed.run_id, claimed), robust=True)
    else:
        run_id = run.run_id
        transaction.on_commit(lambda: _dispatch(run_id), robust=True)


def _dispatch(run_id: str, claimed: ChatRun | None = None) -> None:
    from chat.executor import dispatch_run

    dispatch_run(run_id, claimed=claimed)


# --- send, stop ---------------------------------------------------------------------------------


def chat_send(
    *,
    workflow: Workflow,
    text: str,
    client_message_id: str | None = None,
    expected_revision: int | None = None,
) -> Admission:
    """Admit the owner's message and its run in one transaction.

    A second send while a run is live is refused (`run_in_progress`, `extra.run_id`). A re-send with
    the same `client_message_id` returns the first message and run (`created=False`) and starts nothing.

    On PostgreSQL, outside a caller's transaction, the common case (a thread that exists, a live
    deployment, a free lane, no matching `client_message_id`, the expected revision) is one statement;
    anything else writes nothing there and takes the locked path, which answers with the precise code.
    """
    return _send(workflow.pk, None, lambda: workflow, text, client_message_id, expected_revision)


def chat_send_as_owner(
    *,
    owner_id: int,
    workflow_id: str,
    load_workflow: Callable[[], Workflow],
    text: str,
    client_message_id: str | None = None,
    expected_revision: int | None = None,
) -> Admission:
    """`chat_send` for a caller that holds the owner and the workflow id, not the row (the websocket,
    which checks ownership on every frame): on the fast path the ownership check is part of the one
    statement; otherwise `load_workflow()` fetches the row (and refuses a foreign or deleted one) first."""
    return _send(workflow_id, owner_id, load_workflow, text, client_message_id, expected_revision)


def _send(
    workflow_id: str,
    owner_id: int | None,
    load_workflow: Callable[[], Workflow],
    text: Any,
    client_message_id: str | None,
    expected_revision: int | None,
) -> Admission:
    try:
        text = _check_text(text)
        client_id = _check_client_id(client_message_id)
    except ApplicationError:
        load_workflow()  # an unknown workflow answers as such before the frame's own faults
        raise
    if (
        connection.vendor == "postgresql"
        and not connection.in_atomic_block
        and (expected_revision is None or (type(expected_revision) is int and expected_revision >= 0))
    ):
        admitted = _send_one_statement(workflow_id, owner_id, text, client_id, expected_revision)
        if admitted is not None:
            return admitted
    return _send_locked(load_workflow(), text, client_id, expected_revision)


_ADMIT_SQL = """
WITH th AS (
    SELECT t.id, t.active_leaf_uid, t.revision FROM chat_chatthread t
    WHERE t.workflow_id = %(workflow_id)s
      AND (%(owner_id)s::bigint IS NULL OR EXISTS (
          SELECT 1 FROM graphs_workflow w WHERE w.id = t.workflow_id AND w.owner_id = %(owner_id)s::bigint))
    FOR UPDATE OF t
), dep AS (
    SELECT generation FROM graphs_deployment
    WHERE workflow_id = %(workflow_id)s AND state = 'live' ORDER BY id LIMIT 1
), ok AS (
    SELECT th.id, th.active_leaf_uid, dep.generation FROM th, dep
    WHERE (%(expected_revision)s::bigint IS NULL OR th.revision = %(expected_revision)s::bigint)
      AND NOT EXISTS (
          SELECT 1 FROM chat_chatrun r
          WHERE r.thread_id = th.id AND r.state IN ('queued', 'running', 'stopping'))
      AND (%(client_id)s = '' OR NOT EXISTS (
          SELECT 1 FROM chat_chatmessage m WHERE m.thread_id = th.id AND m.client_message_id = %(client_id)s))
), parent AS (
    SELECT COALESCE((
        SELECT m.uid FROM chat_chatmessage m, ok
        WHERE m.thread_id = ok.id AND m.uid = ok.active_leaf_uid AND m.generation = ok.generation
    ), '') AS uid
), run AS (
    INSERT INTO chat_chatrun (
        run_id, thread_id, workflow_id, generation, kind, state, user_message_uid, reply_message_uid,
        parent_run_id, claimant, heartbeat_at, error_code, error_message, context_cursors, draft_text,
        draft_steps, last_seq, usage, created_at, started_at)
    SELECT %(run_id)s, ok.id, %(workflow_id)s, ok.generation, 'message', %(state)s, %(uid)s, %(reply_uid)s,
        '', %(claimant)s, %(heartbeat_at)s::timestamptz, '', '', '{}', '', '[]', %(last_seq)s, '{}', %(now)s,
        %(started_at)s::timestamptz
    FROM ok
    RETURNING generation
), msg AS (
    INSERT INTO chat_chatmessage (
        thread_id, uid, parent_uid, role, kind, status, text, generation, run_id, client_message_id,
        error_code, error_message, meta, created_at)
    SELECT ok.id, %(uid)s, parent.uid, 'user', 'text', 'complete', %(text)s, ok.generation, %(run_id)s,
        %(client_id)s, '', '', '{}', %(now)s
    FROM ok, parent
    RETURNING id, parent_uid
)
UPDATE chat_chatthread AS t SET active_leaf_uid = %(uid)s, revision = t.revision + 1, updated_at = %(now)s
FROM ok, msg, run WHERE t.id = ok.id
RETURNING t.id, t.revision, msg.id, msg.parent_uid, run.generation
"""


def _send_one_statement(
    workflow_id: str, owner_id: int | None, text: str, client_id: str, expected_revision: int | None
) -> Admission | None:
    """The PostgreSQL fast path of `chat_send` (autocommit: all or nothing). None when it wrote nothing.

    The thread row is locked first; the lane and the client id are also guarded by their unique indexes,
    so a writer that committed while this statement waited makes it fail whole, and the locked path
    then answers."""
    now = timezone.now()
    run_id, uid = mint_id("run"), mint_id("m")
    claim = {
        "state": ChatRun.State.QUEUED,
        "claimant": "",
        "heartbeat_at": None,
        "started_at": None,
        "last_seq": 0,
    }
    claim.update(_admission_claim())
    params = {
        "workflow_id": workflow_id,
        "owner_id": owner_id,
        "expected_revision": expected_revision,
        "client_id": client_id,
        "run_id": run_id,
        "uid": uid,
        "reply_uid": f"a_{run_id}",
        "text": text,
        "now": now,
        **claim,
    }
    try:
        row = hot_fetchone(_ADMIT_SQL, params)
    except IntegrityError:
        return None
    if row is None:
        return None
    thread_id, revision, message_id, parent_uid, generation = row
    thread = ChatThread(id=thread_id, workflow_id=workflow_id, active_leaf_uid=uid, revision=revision)
    run = ChatRun(
        run_id=run_id,
        thread_id=thread_id,
        workflow_id=workflow_id,
        generation=generation,
        kind=ChatRun.Kind.MESSAGE,
        user_message_uid=uid,
        reply_message_uid=f"a_{run_id}",
        created_at=now,
        **claim,
    )
    message = ChatMessage(
        id=message_id,
        thread_id=thread_id,
        uid=uid,
        parent_uid=parent_uid,
        role=ChatMessage.Role.USER,
        text=text,
        generation=generation,
        run_id=run_id,
        client_message_id=client_id,
        created_at=now,
    )
    for obj in (thread, run, message):
        obj._state.adding, obj._state.db = False, connection.alias
    _after_admission(thread, run, "user")
    return Admission(message=message, run=run, created=True, revision=revision)


@transaction.atomic
def _send_locked(workflow: Workflow, text: str, client_id: str, expected_revision: int | None) -> Admission:
    """`chat_send` under the thread lock, statement by statement (every case, every database)."""
    generation = _require_live(workflow)
    thread = _thread_for_update(workflow)
    if client_id:
        existing = ChatMessage.objects.filter(thread=thread, client_message_id=client_id).first()
        if existing is not None:
            run = ChatRun.objects.get(run_id=existing.run_id)
            return Admission(message=existing, run=run, created=False, revision=thread.revision)
    _check_revision(thread, expected_revision)
    _check_lane(thread)
    parent = _leaf_parent(thread, generation)
    uid = mint_id("m")
    run = _new_run(thread, generation=generation, kind=ChatRun.Kind.MESSAGE, user_message_uid=uid)
    message = _append_message(
        thread,
        role=ChatMessage.Role.USER,
        text=text,
        generation=generation,
        parent_uid=parent,
        run_id=run.run_id,
        client_message_id=client_id,
        uid=uid,
    )
    _after_admission(thread, run, "user")
    return Admission(message=message, run=run, created=True, revision=thread.revision)


@transaction.atomic
def chat_stop(*, workflow: Workflow, run_id: str) -> ChatRun:
    """Stop a run. Unclaimed (`queued`) → `stopped` at once, freeing the lane; `running` → `stopping`
    (the run ends itself at its next event; a run on another process hears it through the channel
    layer and re-checks the row). Stopping twice answers the same state; a finished run is
    `not_stoppable`."""
    run = ChatRun.objects.select_for_update().filter(run_id=str(run_id), workflow_id=workflow.pk).first()
    if run is None:
        raise not_found("run")
    now = timezone.now()
    if run.state == ChatRun.State.QUEUED:
        ChatRun.objects.filter(pk=run.pk, state=ChatRun.State.QUEUED).update(
            state=ChatRun.State.STOPPED, stop_requested_at=now, finished_at=now, last_seq=F("last_seq") + 1
        )
        run.refresh_from_db()
        _publish_run_event(run, "run.stopped", {"reply_message_id": None})
        _publish_thread_changed(run)
    elif run.state == ChatRun.State.RUNNING:
        ChatRun.objects.filter(pk=run.pk, state=ChatRun.State.RUNNING).update(
            state=ChatRun.State.STOPPING, stop_requested_at=now
        )
        run.refresh_from_db()
        rid = run.run_id
        transaction.on_commit(
            lambda: publish_now(run_control_group(rid), "run.stop", {"run_id": rid}), robust=True
        )
    elif run.state == ChatRun.State.STOPPING or (
        run.state == ChatRun.State.STOPPED and run.stop_requested_at
    ):
        pass  # a second Stop answers the same state and publishes nothing
    else:
        raise _err(errors.NOT_STOPPABLE, "That run has already ended.", {"state": run.state})
    return run


def _publish_stop(run_id: str) -> None:
    publish_now(run_control_group(run_id), "run.stop", {"run_id": run_id})


def run_control_group(run_id: str) -> str:
    """The group a run's executor listens on for Stop, wherever it runs."""
    return f"run.{run_id}"


def _publish_run_event(run: ChatRun, type: str, data: dict[str, Any]) -> None:
    """A run event with the row's `last_seq` (the caller bumped it in the same transaction)."""
    payload = {"run_id": run.run_id, "seq": run.last_seq, "workflow_id": run.workflow_id, **data}
    publish_on_commit(chat_group(run.workflow_id), type, payload)


def _publish_thread_changed(run: ChatRun) -> None:
    """The thread's live runs changed (a queued run ended without answering: its notes stay untold)."""
    publish_on_commit(
        chat_group(run.workflow_id), "thread.updated", {"workflow_id": run.workflow_id, "role": None}
    )


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


def notes_claim(*, thread_id: int, run_id: str) -> list[str]:
    """Claim up to 8 untold notes for a run's turn (oldest first); a retried claim gets the same ones."""
    with transaction.atomic():
        now = timezone.now()
        notes = list(
            ChatNote.objects.select_for_update()
            .filter(thread_id=thread_id, delivered_at__isnull=True)
            .order_by("updated_at", "id")[:MAX_NOTES_PER_TURN]
        )
        ChatNote.objects.filter(pk__in=[n.pk for n in notes]).update(claimed_run_id=run_id, claimed_at=now)
        return [n.text for n in notes]


def notes_deliver(*, run_id: str) -> int:
    """Mark a run's claimed notes told (call when the run answered). A note changed after the claim
    stays untold."""
    return ChatNote.objects.filter(
        claimed_run_id=run_id,
        delivered_at__isnull=True,
        claimed_at__isnull=False,
        updated_at__lte=F("claimed_at"),
    ).update(delivered_at=timezone.now())


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
        a: ConversationKey(workflow_id=thread.workflow_id, generation=generation, agent_node_id=a)
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
    conversation is kept under the left branch and rewound to where the original was asked."""
    text = _check_text(text)
    client_id = _check_client_id(client_message_id)
    if client_id:
        existing = ChatMessage.objects.filter(thread__workflow=workflow, client_message_id=client_id).first()
        if existing is not None:
            return Admission(
                message=existing,
                run=ChatRun.objects.get(run_id=existing.run_id),
                created=False,
                revision=existing.thread.revision,
            )
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
    _after_admission(thread, run, "user")
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
    _after_admission(thread, run, None)
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


# --- clear --------------------------------------------------------------------------------------------


@transaction.atomic
def chat_clear(*, workflow: Workflow) -> dict[str, Any]:
    """New chat: end live runs, archive and empty the agents' conversations of this generation (notes
    included), delete messages, runs, notes, snapshots, ratings and the thread. Memory is untouched."""
    thread = ChatThread.objects.select_for_update().filter(workflow=workflow).first()
    generation = live_generation(workflow=workflow)
    archived = 0
    if generation:
        from conversations.models import AgentConversation

        agents = sorted(
            AgentConversation.objects.filter(workflow_id=workflow.pk, generation=generation).values_list(
                "agent_node_id", flat=True
            )
        )
        for agent in agents:
            result = conversations.conversation_clear(
                key=ConversationKey(workflow_id=workflow.pk, generation=generation, agent_node_id=agent)
            )
            archived += int(result.cleared)
    ended: list[str] = []
    if thread is not None:
        live = list(ChatRun.objects.filter(thread=thread, state__in=LIVE_STATES))
        for run in live:
            ended.append(run.run_id)
            publish_on_commit(
                chat_group(workflow.pk),
                "run.error",
                {
                    "run_id": run.run_id,
                    "seq": run.last_seq + 1,
                    "workflow_id": workflow.pk,
                    "code": errors.CLEARED,
                    "message": "The chat was cleared.",
                },
            )
            transaction.on_commit(partial(_publish_stop, run.run_id), robust=True)
        BranchSnapshot.objects.filter(thread_key=thread.snapshot_key).delete()
        thread.delete()
    publish_on_commit(
        chat_group(workflow.pk), "thread.updated", {"workflow_id": workflow.pk, "revision": 0, "role": None}
    )
    return {"cleared": thread is not None, "runs_ended": ended, "conversations_archived": archived}


# --- run lifecycle (used by the executor and the watchdog) -------------------------------------------


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


def run_record_cursors(*, run_id: str, cursors: dict[str, dict[str, Any]]) -> None:
    """Record each prepared agent's conversation cursor; the first record per agent wins."""
    with transaction.atomic():
        run = ChatRun.objects.select_for_update().get(run_id=run_id)
        merged = dict(run.context_cursors or {})
        for agent, cursor in cursors.items():
            merged.setdefault(agent, cursor)
        ChatRun.objects.filter(pk=run_id).update(context_cursors=merged)


def run_save_draft(*, run_id: str, claimant: str, text: str, steps: list[dict[str, Any]], seq: int) -> bool:
    """Durable stream snapshot + heartbeat; False when the run is no longer this claimant's."""
    return bool(
        ChatRun.objects.filter(run_id=run_id, claimant=claimant, state__in=LIVE_STATES).update(
            draft_text=text, draft_steps=steps, last_seq=seq, heartbeat_at=timezone.now()
        )
    )


def run_state(*, run_id: str) -> str | None:
    return ChatRun.objects.filter(run_id=run_id).values_list("state", flat=True).first()


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
    qs = ChatRun.objects.select_for_update().filter(run_id=run_id, state__in=LIVE_STATES)
    if claimant is not None:
        qs = qs.filter(claimant=claimant)
    run = qs.first()
    if run is None:
        return None
    if run.state == ChatRun.State.STOPPING and outcome != ChatRun.State.ERROR:
        outcome = ChatRun.State.STOPPED
    if (
        run.state == ChatRun.State.STOPPING
        and outcome == ChatRun.State.ERROR
        and error_code == errors.INTERRUPTED
    ):
        outcome = ChatRun.State.STOPPED
    thread = ChatThread.objects.select_for_update().get(pk=run.thread_id)
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


@transaction.atomic
def _interrupt(run: ChatRun) -> None:
    """The worker died: keep its draft as a stopped reply, record the error, free the lane."""
    locked = ChatRun.objects.select_for_update().filter(run_id=run.run_id, state__in=LIVE_STATES).first()
    if locked is None:
        return
    thread = ChatThread.objects.select_for_update().get(pk=locked.thread_id)
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
