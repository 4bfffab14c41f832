"""The chat's operations through the ORM, on any database (SQLite, and PostgreSQL in the store suite)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Subquery
from django.utils import timezone

from chat import errors
from chat.models import LIVE_STATES, ChatMessage, ChatNote, ChatRun, ChatThread
from chat.stores.base import (
    MESSAGE_DERIVED,
    ROOT_PARENT,
    RUN_DERIVED,
    AdmitAnswer,
    Admitted,
    Refused,
    Replay,
    check_columns,
)
from graphs.models import Deployment, Workflow
from opencompany.core.errors import NOT_FOUND


class PortableChatStore:
    """Each operation in one transaction (a savepoint inside a caller's), under the thread's row lock."""

    def send_admit(
        self,
        *,
        workflow_id: str,
        owner_id: int,
        expected_revision: int | None,
        run: Mapping[str, Any],
        message: Mapping[str, Any],
    ) -> AdmitAnswer:
        check_columns(ChatRun, run, decided=RUN_DERIVED)
        check_columns(ChatMessage, message, decided=MESSAGE_DERIVED)
        with transaction.atomic():
            return self._admit(workflow_id, owner_id, expected_revision, run, message)

    def _admit(
        self,
        workflow_id: str,
        owner_id: int,
        expected_revision: int | None,
        run: Mapping[str, Any],
        message: Mapping[str, Any],
    ) -> AdmitAnswer:
        # Every read below runs after the thread's lock, so each sees the writers that held it.
        thread = self._chat_lock(workflow_id, owner_id)
        if thread is None and not Workflow.objects.filter(pk=workflow_id, owner_id=owner_id).exists():
            return Refused(NOT_FOUND)
        generation = (
            Deployment.objects.filter(workflow_id=workflow_id, state=Deployment.State.LIVE)
            .order_by("id")
            .values_list("generation", flat=True)
            .first()
        )
        if generation is None:
            return Refused(errors.NOT_RUNNING)
        if thread is None:
            # The unique workflow column settles a concurrent opener; the transaction keeps it locked.
            ChatThread.objects.get_or_create(
                workflow_id=workflow_id, defaults={"home_workflow_id": workflow_id}
            )
            thread = ChatThread.objects.select_for_update().get(workflow_id=workflow_id)
        client_id = message.get("client_message_id")
        if client_id:
            existing = ChatMessage.objects.filter(thread=thread, client_message_id=client_id).first()
            if existing is not None:
                return Replay(
                    message=existing,
                    run=ChatRun.objects.get(run_id=existing.run_id),
                    revision=thread.revision,
                )
        if expected_revision is not None and thread.revision != expected_revision:
            return Refused(errors.REVISION_CONFLICT, {"current_revision": thread.revision})
        live = (
            ChatRun.objects.filter(thread=thread, state__in=LIVE_STATES)
            .values_list("run_id", flat=True)
            .first()
        )
        if live is not None:
            return Refused(errors.RUN_IN_PROGRESS, {"run_id": live})
        leaf = thread.active_leaf_uid
        on_leaf = (
            bool(leaf) and ChatMessage.objects.filter(thread=thread, uid=leaf, generation=generation).exists()
        )
        created_run = ChatRun.objects.create(
            thread=thread, workflow_id=thread.home_workflow_id, generation=generation, **run
        )
        created_message = ChatMessage.objects.create(
            thread=thread, generation=generation, parent_uid=leaf if on_leaf else ROOT_PARENT, **message
        )
        ChatThread.objects.filter(pk=thread.pk).update(
            active_leaf_uid=created_message.uid, revision=F("revision") + 1, updated_at=timezone.now()
        )
        # The thread row is locked: its revision is the one read plus this admission.
        return Admitted(message=created_message, run=created_run, revision=thread.revision + 1)

    @staticmethod
    def _chat_lock(workflow_id: str, owner_id: int) -> ChatThread | None:
        """The owner's current chat of the workflow, locked for the rest of the transaction (None when
        there is none, or the workflow is not the owner's)."""
        return (
            ChatThread.objects.select_for_update(of=("self",))
            .filter(workflow_id=workflow_id, workflow__owner_id=owner_id)
            .first()
        )

    def run_lock(self, *, run_id: str, claimant: str | None) -> tuple[ChatThread, ChatRun] | None:
        # The run's thread never changes: its id is a subquery, and only the thread is locked by it.
        thread_id = ChatRun.objects.filter(run_id=run_id).values("thread_id")[:1]
        thread = ChatThread.objects.select_for_update().filter(pk=Subquery(thread_id)).first()
        if thread is None:
            return None
        live = ChatRun.objects.select_for_update().filter(run_id=run_id, state__in=LIVE_STATES)
        run = (live if claimant is None else live.filter(claimant=claimant)).first()
        return None if run is None else (thread, run)

    def run_state(self, *, run_id: str) -> str | None:
        return ChatRun.objects.filter(run_id=run_id).values_list("state", flat=True).first()

    def notes_claim(self, *, thread_id: int, run_id: str, limit: int, now: datetime) -> list[str]:
        notes = list(
            ChatNote.objects.select_for_update()
            .filter(thread_id=thread_id, delivered_at__isnull=True)
            .order_by("updated_at", "id")[:limit]
        )
        ChatNote.objects.filter(pk__in=[n.pk for n in notes]).update(claimed_run_id=run_id, claimed_at=now)
        return [n.text for n in notes]

    def notes_deliver(self, *, run_id: str, now: datetime) -> int:
        return ChatNote.objects.filter(
            claimed_run_id=run_id,
            delivered_at__isnull=True,
            claimed_at__isnull=False,
            updated_at__lte=F("claimed_at"),
        ).update(delivered_at=now)

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
        return bool(
            ChatRun.objects.filter(run_id=run_id, claimant=claimant, state__in=LIVE_STATES).update(
                draft_text=text, draft_steps=steps, last_seq=seq, heartbeat_at=now
            )
        )

    @contextmanager
    def sweep_lock(self) -> Iterator[bool]:
        # SQLite serves one process: a second sweeper would only find the runs already ended.
        yield True
