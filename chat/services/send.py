"""Send and stop."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from chat import errors
from chat.models import ChatMessage, ChatRun
from chat.selectors import owned_workflow
from chat.services._common import (
    Admission,
    _admission_claim,
    _after_admission,
    _append_message,
    _check_client_id,
    _check_expected_revision,
    _check_lane,
    _check_revision,
    _check_text,
    _err,
    _leaf_parent,
    _new_run,
    _publish_run_event,
    _publish_thread_changed,
    _replay_of,
    _require_live,
    _thread_for_update,
    run_control_group,
)
from chat.store import chat_store
from graphs.models import Workflow
from opencompany.core.errors import ApplicationError, not_found
from opencompany.core.events import publish_now
from opencompany.core.ids import mint_id

# --- send, stop ---------------------------------------------------------------------------------


def chat_send(
    *,
    owner_id: int,
    workflow_id: str,
    text: Any,
    client_message_id: str | None = None,
    expected_revision: int | None = None,
) -> Admission:
    """Admit the owner's message to their workflow's chat, and its run, in one transaction.

    An unknown workflow, or another owner's, is `not_found`, before any fault of the message itself. A
    second send while a run is live is refused (`run_in_progress`, `extra.run_id`). A re-send with the
    same `client_message_id` and text returns the first message and run (`created=False`) and starts
    nothing; that id with another text, or first used by an edit, is `idempotency_key_reused`.

    The common case (a live deployment, a free lane, no matching `client_message_id`, the expected
    revision) goes through the chat store's admission, one statement on PostgreSQL with the ownership
    check inside it; a chat's first message opens the chat first, then is admitted the same way.
    Anything else writes nothing there and is admitted under the thread lock, which answers with the
    precise code.
    """
    try:
        text = _check_text(text)
        client_id = _check_client_id(client_message_id)
        expected_revision = _check_expected_revision(expected_revision)
    except ApplicationError:
        owned_workflow(owner_id=owner_id, workflow_id=workflow_id)
        raise
    run_id = mint_id("run")
    uid = mint_id("m")
    store = chat_store()
    request: dict[str, Any] = {
        "workflow_id": workflow_id,
        "owner_id": owner_id,
        "expected_revision": expected_revision,
        "run": {
            "run_id": run_id,
            "kind": ChatRun.Kind.MESSAGE,
            "user_message_uid": uid,
            "reply_message_uid": f"a_{run_id}",
            **_admission_claim(),
        },
        "message": {
            "uid": uid,
            "role": ChatMessage.Role.USER,
            "text": text,
            "run_id": run_id,
            "client_message_id": client_id,
        },
    }
    admitted = store.send_admit(**request)
    if admitted is None and store.thread_open(workflow_id=workflow_id, owner_id=owner_id):
        admitted = store.send_admit(**request)  # the chat's first message
    if admitted is not None:
        _after_admission(workflow_id=workflow_id, revision=admitted.revision, run=admitted.run, role="user")
        return Admission(message=admitted.message, run=admitted.run, created=True, revision=admitted.revision)
    workflow = owned_workflow(owner_id=owner_id, workflow_id=workflow_id)
    return _send_locked(workflow, text, client_id, expected_revision)


@transaction.atomic
def _send_locked(workflow: Workflow, text: str, client_id: str, expected_revision: int | None) -> Admission:
    """`chat_send` under the thread lock, statement by statement (every case, every database)."""
    generation = _require_live(workflow)
    thread = _thread_for_update(workflow)
    if client_id:
        existing = ChatMessage.objects.filter(thread=thread, client_message_id=client_id).first()
        if existing is not None:
            return _replay_of(existing, text=text, kind=ChatRun.Kind.MESSAGE)
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
    _after_admission(workflow_id=thread.home_workflow_id, revision=thread.revision, run=run, role="user")
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
