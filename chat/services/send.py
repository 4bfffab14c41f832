"""Send and stop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from chat import errors
from chat.models import ChatMessage, ChatRun, ChatThread
from chat.services._common import (
    Admission,
    _admission_claim,
    _after_admission,
    _append_message,
    _check_client_id,
    _check_lane,
    _check_revision,
    _check_text,
    _err,
    _leaf_parent,
    _new_run,
    _publish_run_event,
    _publish_thread_changed,
    _require_live,
    _thread_for_update,
    run_control_group,
)
from graphs.models import Workflow
from opencompany.core.db import hot_fetchone
from opencompany.core.errors import ApplicationError, not_found
from opencompany.core.events import publish_now
from opencompany.core.ids import mint_id

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
