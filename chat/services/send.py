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
    _check_client_id,
    _check_expected_revision,
    _check_text,
    _err,
    _publish_run_event,
    _publish_thread_changed,
    _refused,
    _replayed,
    run_control_group,
)
from chat.stores import Refused, Replay, chat_store
from graphs.models import Workflow
from opencompany.core import gate
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

    The chat store admits it whole (on PostgreSQL one statement in the common case, the ownership
    check inside it; a chat's first message opens the chat first) and answers what it did; this
    service words the refusals and publishes the admission.
    """
    try:
        text = _check_text(text)
        client_id = _check_client_id(client_message_id)
        expected_revision = _check_expected_revision(expected_revision)
    except ApplicationError:
        owned_workflow(owner_id=owner_id, workflow_id=workflow_id)
        raise
    gate.identifier(workflow_id, field="workflow_id")
    run_id = mint_id("run")
    uid = mint_id("m")
    answer = chat_store().send_admit(
        workflow_id=workflow_id,
        owner_id=owner_id,
        expected_revision=expected_revision,
        run={
            "run_id": run_id,
            "kind": ChatRun.Kind.MESSAGE,
            "user_message_uid": uid,
            "reply_message_uid": f"a_{run_id}",
            **_admission_claim(),
        },
        message={
            "uid": uid,
            "role": ChatMessage.Role.USER,
            "text": text,
            "run_id": run_id,
            "client_message_id": client_id,
        },
    )
    match answer:
        case Refused():
            raise _refused(answer)
        case Replay():
            return _replayed(answer, text=text, kind=ChatRun.Kind.MESSAGE)
    _after_admission(workflow_id=workflow_id, revision=answer.revision, run=answer.run, role="user")
    return Admission(message=answer.message, run=answer.run, created=True, revision=answer.revision)


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
