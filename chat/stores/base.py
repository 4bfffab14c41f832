"""What the chat asks of its database, whatever it is: the operations, their typed answers, and what
both implementations share.

The send's admission is one operation with one answer: `Admitted` (the message and its run are
written), `Replay` (the `client_message_id` is already the thread's: nothing written) or `Refused`
(nothing written, with the code and the facts the service words its refusal from). The store decides
nothing a service must decide again; the service keeps the rules, the events and the refusal messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import models

from chat.models import ChatMessage, ChatRun, ChatThread
from opencompany.core.errors import Refused


@dataclass(frozen=True)
class Admitted:
    """What an admission wrote: the owner's message, its run, and the thread's revision after it."""

    message: ChatMessage
    run: ChatRun
    revision: int


@dataclass(frozen=True)
class Replay:
    """The thread already holds a message with the request's `client_message_id`: that message, its
    run and the thread's revision; nothing was written. Whether it is the same request again is the
    service's rule."""

    message: ChatMessage
    run: ChatRun
    revision: int


type AdmitAnswer = Admitted | Replay | Refused


class ChatStore(Protocol):
    def send_admit(
        self,
        *,
        workflow_id: str,
        owner_id: int,
        expected_revision: int | None,
        run: Mapping[str, Any],
        message: Mapping[str, Any],
    ) -> AdmitAnswer:
        """Admit the owner's message and its run to the owner's current chat of the workflow, all or
        nothing, inside or outside a caller's transaction; the chat is opened first when the workflow
        has none.

        The checks, in this order, each answering alone: the workflow is the owner's (else
        `Refused("not_found")`) and has a live deployment (`not_running`); a message of the thread
        carries the message's `client_message_id` (`Replay`); the thread is at `expected_revision` when
        given (`revision_conflict`, `extra.current_revision`); no run of the thread is live
        (`run_in_progress`, `extra.run_id`). Otherwise the message hangs under the active leaf if that
        leaf belongs to the live generation (else at the root), becomes the leaf (revision + 1), and
        the answer is `Admitted`.

        `run` and `message` hold the columns the caller decides; the store sets the thread, the
        generation and the parent, and every other column takes its field's default.
        """
        ...

    def run_lock(self, *, run_id: str, claimant: str | None) -> tuple[ChatThread, ChatRun] | None:
        """Lock the run's thread, then the run row (the lock order of every chat write), for the rest of
        the caller's transaction, and return both as loaded. None when the run is gone or no longer live,
        or (with `claimant`) is not that claimant's; the thread, if any, stays locked."""
        ...

    def run_state(self, *, run_id: str) -> str | None:
        """The run's state; None for an unknown run."""
        ...

    def notes_claim(self, *, thread_id: int, run_id: str, limit: int, now: datetime) -> list[str]:
        """Claim up to `limit` untold notes of the thread for the run (oldest first), locked until the
        caller's transaction ends, and return their texts in that order."""
        ...

    def notes_deliver(self, *, run_id: str, now: datetime) -> int:
        """Mark the run's claimed notes told, but a note changed after its claim; how many were."""
        ...

    def draft_save(
        self,
        *,
        run_id: str,
        claimant: str,
        text: str,
        steps: list[dict[str, Any]],
        seq: int,
        now: datetime,
    ) -> bool:
        """Store a live run's draft, seq and heartbeat if `claimant` holds it; False when it does not."""
        ...

    def sweep_lock(self) -> AbstractContextManager[bool]:
        """Hold the watchdog's sweep lock while the block runs: True when this process holds it, False
        when another process is sweeping now (the block should then do nothing)."""
        ...


# One sweep at a time cluster-wide: the key of the PostgreSQL advisory lock a sweep holds.
WATCHDOG_LOCK_KEY = 0x6F63_7764

ROOT_PARENT = ChatMessage._meta.get_field("parent_uid").get_default()

# The columns an admission decides itself (with the SQL expressions the PostgreSQL statement gives them).
RUN_DERIVED = {"thread_id": "ok.id", "workflow_id": "ok.workflow_id", "generation": "ok.generation"}
MESSAGE_DERIVED = {"thread_id": "ok.id", "generation": "ok.generation", "parent_uid": "parent.uid"}


def check_columns(
    model: type[models.Model], supplied: Mapping[str, Any], *, decided: Mapping[str, str]
) -> None:
    """Refuse (TypeError) a column the store decides itself."""
    taken = sorted(set(supplied) & set(decided))
    if taken:
        raise TypeError(f"the store decides {model.__name__} columns {taken}")
