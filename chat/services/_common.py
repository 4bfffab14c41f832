"""Shared helpers of the chat services: checks, message and leaf writes, run admission, dispatch, and the
run and thread events. Plain functions: the entry points (in the sibling modules) own the transaction."""

from __future__ import annotations

import logging
import os
import re
import socket
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from chat import errors
from chat.models import LIVE_STATES, ChatMessage, ChatRun, ChatThread
from chat.selectors import live_generation
from chat.stores import Refused, Replay
from graphs.models import Workflow
from opencompany.core import gate, lifecycle
from opencompany.core.errors import NOT_FOUND, ApplicationError, invalid, not_found
from opencompany.core.events import chat_group, publish_now, publish_on_commit
from opencompany.core.ids import mint_id

MAX_MESSAGE_CHARS = 50_000
MAX_NOTES_PER_TURN = 8
FEEDBACK_EXCERPT_CHARS = 300
CLIENT_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,100}$"
_CLIENT_ID = re.compile(CLIENT_ID_PATTERN)

logger = logging.getLogger("chat.services")


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
    """The workflow's current thread, created on first use, locked for the rest of the transaction."""
    thread = ChatThread.objects.select_for_update().filter(workflow=workflow).first()
    if thread is None:
        # the unique workflow column settles a race
        ChatThread.objects.get_or_create(workflow=workflow, defaults={"home_workflow": workflow})
        thread = ChatThread.objects.select_for_update().get(workflow=workflow)
    return thread


# What each refusal a chat write shares says to the owner (the codes and their facts come with it).
_REFUSAL_MESSAGES = {
    errors.NOT_RUNNING: "This workflow is not deployed; deploy it to chat with its agent.",
    errors.REVISION_CONFLICT: "The chat changed since you loaded it; reload and try again.",
    errors.RUN_IN_PROGRESS: "The agent is still answering; wait or stop it first.",
}


def _refused(refusal: Refused) -> ApplicationError:
    """The error a refusal raises, worded here whichever check (a store's or a service's) made it."""
    if refusal.code == NOT_FOUND:
        return not_found("workflow")
    return _err(refusal.code, _REFUSAL_MESSAGES[refusal.code], refusal.extra or None)


def _require_live(workflow: Workflow) -> int:
    generation = live_generation(workflow=workflow)
    if generation == 0:
        raise _refused(Refused(errors.NOT_RUNNING))
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
    return gate.text(text, field="text")


def _check_expected_revision(expected_revision: Any) -> int | None:
    """None, or an integer the thread's revision column can hold (a larger one is `invalid_request`,
    never a database error)."""
    return gate.optional_integer(
        expected_revision, field="expected_revision", column=ChatThread._meta.get_field("revision")
    )


def _check_client_id(client_message_id: str | None) -> str:
    if client_message_id in (None, ""):
        return ""
    if not isinstance(client_message_id, str) or not _CLIENT_ID.fullmatch(client_message_id):
        raise invalid(
            "client_message_id must be 1 to 100 characters of letters, digits, '_', '.', ':' or '-'.",
            {"client_message_id": ["Invalid format."]},
        )
    return client_message_id


def _replay_of(existing: ChatMessage, *, text: str, kind: str, edit_of: str | None = None) -> Admission:
    """`_replayed` for a message found under the thread's lock."""
    replay = Replay(
        message=existing, run=ChatRun.objects.get(run_id=existing.run_id), revision=existing.thread.revision
    )
    return _replayed(replay, text=text, kind=kind, edit_of=edit_of)


def _replayed(replay: Replay, *, text: str, kind: str, edit_of: str | None = None) -> Admission:
    """The first admission of a `client_message_id`, when this request is the same one again: same text,
    same operation (a send or an edit), the same message edited. Anything else under that id is
    refused (`idempotency_key_reused`), never dropped in silence."""
    existing, run = replay.message, replay.run
    same = (
        existing.text == text
        and run.kind == kind
        and (edit_of is None or (existing.meta or {}).get("edit_of") == edit_of)
    )
    if not same:
        raise _err(
            errors.IDEMPOTENCY_KEY_REUSED,
            "This client_message_id was already used for a different message.",
            {"message_id": existing.uid},
        )
    return Admission(message=existing, run=run, created=False, revision=replay.revision)


def _check_revision(thread: ChatThread, expected_revision: int | None) -> None:
    if _check_expected_revision(expected_revision) is None:
        return
    if thread.revision != expected_revision:
        raise _refused(Refused(errors.REVISION_CONFLICT, {"current_revision": thread.revision}))


def _check_lane(thread: ChatThread) -> None:
    live = (
        ChatRun.objects.filter(thread=thread, state__in=LIVE_STATES).values_list("run_id", flat=True).first()
    )
    if live:
        raise _refused(Refused(errors.RUN_IN_PROGRESS, {"run_id": live}))


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


def new_claimant() -> str:
    """A run claimant: host, process, and a per-claim token (the watchdog keys heartbeats on it)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _claims_at_admission() -> bool:
    """In-process runs execute in the admitting process, so the admission is the claim: the run row is
    written `running` (seq 1) and `run.started` leaves with the admitting commit, with no second
    transaction and no wait behind the process's run work. Other executors claim with `run_claim`."""
    return str(settings.OPENCOMPANY_RUN_EXECUTOR) == "inprocess"


def _admission_claim() -> dict[str, Any]:
    """The claim columns a new run is written with (empty: it waits `queued` for a worker). A process
    shutting down admits no run it would execute itself (`server_restarting`)."""
    if not _claims_at_admission():
        return {}
    if lifecycle.draining():
        raise _err(
            errors.SERVER_RESTARTING,
            "The server is restarting; send again once the chat has reconnected.",
            {"retry_after_s": 1},
        )
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
                workflow_id=thread.home_workflow_id,
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
        raise _refused(Refused(errors.RUN_IN_PROGRESS, {"run_id": live})) from exc


def run_started_event(run: ChatRun) -> dict[str, Any]:
    """The `run.started` payload (seq 1, set by the claim)."""
    return {
        "kind": run.kind,
        "user_message_id": run.user_message_uid,
        "reply_message_id": run.reply_message_uid,
    }


def _after_admission(*, workflow_id: str, revision: int, run: ChatRun, role: str | None) -> None:
    """The admission's events and the run's start, after the admitting commit."""
    publish_on_commit(
        chat_group(workflow_id),
        "thread.updated",
        {"workflow_id": workflow_id, "revision": revision, "role": role},
    )
    if run.state == ChatRun.State.RUNNING:  # claimed at admission (in-process executor)
        _publish_run_event(run, "run.started", run_started_event(run))
        transaction.on_commit(partial(_dispatch, run.run_id, run), robust=True)
    else:
        transaction.on_commit(partial(_dispatch, run.run_id, None), robust=True)


# --- the run dispatcher (the executor registers it when the app loads) -------------------------------


class RunDispatcher(Protocol):
    def __call__(self, run_id: str, *, claimed: ChatRun | None = None) -> None:
        """Start the run wherever runs execute; never raise into the caller. `claimed`: the run row as
        the admission claimed it (in-process executor)."""
        ...


_dispatcher: RunDispatcher | None = None


def run_dispatcher_register(*, dispatch: RunDispatcher) -> None:
    """Make `dispatch` what starts every admitted run (`ChatConfig.ready()` registers the executor's)."""
    global _dispatcher
    _dispatcher = dispatch


def _dispatch(run_id: str, claimed: ChatRun | None) -> None:
    if _dispatcher is None:
        # The run stays queued; the watchdog ends it as not delivered.
        logger.error("no run dispatcher is registered run=%s", run_id)
        return
    _dispatcher(run_id, claimed=claimed)


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
