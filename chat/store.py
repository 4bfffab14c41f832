"""The chat's hot statements behind one interface: the send's admission and the opening of the chat a
first message needs, a run's locks (taken by every write of its lifecycle), its notes' claim and
delivery, its state (the Stop fallback's poll) and its draft save; and the watchdog's cluster-wide
sweep lock.

`PostgresChatStore` sends each as prepared statements (`opencompany.core.db.hot_fetchone`);
`PortableChatStore` writes the same rows through the ORM, on any database. `ChatConfig.ready()` installs
the implementation for the default database once, the way Django picks a database backend; services
reach it through `chat_store()`. One test suite runs over both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Protocol

from django.db import IntegrityError, connection, models, transaction
from django.db.models import Exists, F, OuterRef, Subquery
from django.utils import timezone

from chat.models import LIVE_STATES, ChatMessage, ChatNote, ChatRun, ChatThread
from graphs.models import Deployment, Workflow
from opencompany.core.db import (
    hot_fetchall,
    hot_fetchone,
    insert_fields,
    insert_select_lists,
    loaded,
    parameter_type,
    row_params,
    row_with_defaults,
    select_list,
    stored,
)


@dataclass(frozen=True)
class Admitted:
    """What an admission wrote: the owner's message, its run, and the thread's revision after it."""

    message: ChatMessage
    run: ChatRun
    revision: int


class ChatStore(Protocol):
    def send_admit(
        self,
        *,
        workflow_id: str,
        owner_id: int,
        expected_revision: int | None,
        run: Mapping[str, Any],
        message: Mapping[str, Any],
    ) -> Admitted | None:
        """Admit the owner's message and its run in the common case, all or nothing.

        The common case: the owner's thread exists, the workflow has a live deployment, no run is live
        on the thread, no message carries the message's `client_message_id`, and the thread is at
        `expected_revision` (when given). The message then hangs under the active leaf if that leaf
        belongs to the live generation (else at the root) and becomes the leaf (revision + 1).

        `run` and `message` hold the columns the caller decides; the store sets the thread, the
        generation and the parent, and every other column takes its field's default. Returns None,
        having written nothing, in every other case and whenever the store cannot take the fast path
        (the caller then admits under the thread lock and answers with the precise code).
        """
        ...

    def thread_open(self, *, workflow_id: str, owner_id: int) -> bool:
        """Open the owner's current chat of a workflow with a live deployment when it has none, so the
        chat's first message is admitted like any other. True when this call opened it; False, having
        written nothing, when the chat exists, the workflow is not the owner's or not live, or the store
        cannot take the fast path (the locked path then opens it)."""
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


# --- shared ---------------------------------------------------------------------------------------------

_ROOT_PARENT = ChatMessage._meta.get_field("parent_uid").get_default()

# The columns an admission decides itself (with the SQL expressions the PostgreSQL statement gives them).
_RUN_DERIVED = {"thread_id": "ok.id", "workflow_id": "ok.workflow_id", "generation": "ok.generation"}
_MESSAGE_DERIVED = {"thread_id": "ok.id", "generation": "ok.generation", "parent_uid": "parent.uid"}
_THREAD_DERIVED = {"workflow_id": "w.id", "home_workflow_id": "w.id"}


def _check_columns(
    model: type[models.Model], supplied: Mapping[str, Any], *, decided: frozenset[str]
) -> None:
    taken = sorted(set(supplied) & decided)
    if taken:
        raise TypeError(f"the store decides {model.__name__} columns {taken}")


# --- PostgreSQL -----------------------------------------------------------------------------------------


def _quoted_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


class PostgresChatStore:
    """Each operation is one prepared statement with server-side binding."""

    @cached_property
    def _send_sql(self) -> str:
        run_columns, run_values = insert_select_lists(ChatRun, _RUN_DERIVED, "run_")
        message_columns, message_values = insert_select_lists(ChatMessage, _MESSAGE_DERIVED, "msg_")
        client_id_type = parameter_type(insert_fields(ChatMessage)["client_message_id"])
        client_id = f"%(msg_client_message_id)s::{client_id_type}"
        # The thread row is locked first; the lane and the client id are also guarded by their unique
        # indexes, so a writer that committed while this statement waited makes it fail whole.
        return f"""
WITH th AS (
    SELECT t.id, t.workflow_id, t.active_leaf_uid, t.revision FROM {ChatThread._meta.db_table} t
    WHERE t.workflow_id = %(workflow_id)s
      AND EXISTS (
          SELECT 1 FROM {Workflow._meta.db_table} w
          WHERE w.id = t.workflow_id AND w.owner_id = %(owner_id)s::bigint)
    FOR UPDATE OF t
), dep AS (
    SELECT generation FROM {Deployment._meta.db_table}
    WHERE workflow_id = %(workflow_id)s AND state = '{Deployment.State.LIVE}' ORDER BY id LIMIT 1
), ok AS (
    SELECT th.id, th.workflow_id, th.active_leaf_uid, dep.generation FROM th, dep
    WHERE (%(expected_revision)s::bigint IS NULL OR th.revision = %(expected_revision)s::bigint)
      AND NOT EXISTS (
          SELECT 1 FROM {ChatRun._meta.db_table} r
          WHERE r.thread_id = th.id AND r.state IN ({_quoted_list(LIVE_STATES)}))
      AND (NOT %(check_client_id)s::boolean OR NOT EXISTS (
          SELECT 1 FROM {ChatMessage._meta.db_table} m
          WHERE m.thread_id = th.id AND m.client_message_id = {client_id}))
), parent AS (
    SELECT COALESCE((
        SELECT m.uid FROM {ChatMessage._meta.db_table} m, ok
        WHERE m.thread_id = ok.id AND m.uid = ok.active_leaf_uid AND m.generation = ok.generation
    ), %(root_parent)s::varchar) AS uid
), run AS (
    INSERT INTO {ChatRun._meta.db_table} ({run_columns})
    SELECT {run_values} FROM ok
    RETURNING generation
), msg AS (
    INSERT INTO {ChatMessage._meta.db_table} ({message_columns})
    SELECT {message_values} FROM ok, parent
    RETURNING id, uid, parent_uid
)
UPDATE {ChatThread._meta.db_table} AS t
SET active_leaf_uid = msg.uid, revision = t.revision + 1, updated_at = %(now)s::timestamptz
FROM ok, msg, run WHERE t.id = ok.id
RETURNING t.id, t.revision, msg.id, msg.parent_uid, run.generation
"""  # noqa: S608 - identifiers and constants of our models; every value is a parameter

    @cached_property
    def _thread_open_sql(self) -> str:
        columns, values = insert_select_lists(ChatThread, _THREAD_DERIVED, "th_")
        # A concurrent opener's row makes this one do nothing (the workflow column is unique).
        return f"""
INSERT INTO {ChatThread._meta.db_table} ({columns})
SELECT {values} FROM {Workflow._meta.db_table} w
WHERE w.id = %(workflow_id)s AND w.owner_id = %(owner_id)s::bigint
  AND EXISTS (
      SELECT 1 FROM {Deployment._meta.db_table} d
      WHERE d.workflow_id = w.id AND d.state = '{Deployment.State.LIVE}')
ON CONFLICT (workflow_id) DO NOTHING
RETURNING id
"""  # noqa: S608 - identifiers and constants of our models; every value is a parameter

    @cached_property
    def _draft_sql(self) -> str:
        return (
            f"UPDATE {ChatRun._meta.db_table} SET draft_text = %(text)s, draft_steps = %(steps)s, "  # noqa: S608 - our table
            "last_seq = %(seq)s, heartbeat_at = %(now)s "
            "WHERE run_id = %(run_id)s AND claimant = %(claimant)s "
            f"AND state IN ({_quoted_list(LIVE_STATES)}) RETURNING 1"
        )

    @cached_property
    def _thread_lock_sql(self) -> str:
        return (
            f"SELECT {select_list(ChatThread, 't')} FROM {ChatThread._meta.db_table} t "  # noqa: S608 - our tables
            f"WHERE t.id = (SELECT r.thread_id FROM {ChatRun._meta.db_table} r WHERE r.run_id = %(run_id)s) "
            "FOR UPDATE OF t"
        )

    @cached_property
    def _run_lock_sql(self) -> str:
        return (
            f"SELECT {select_list(ChatRun, 'r')} FROM {ChatRun._meta.db_table} r "  # noqa: S608 - our table
            f"WHERE r.run_id = %(run_id)s AND r.state IN ({_quoted_list(LIVE_STATES)}) "
            "AND (%(claimant)s::varchar IS NULL OR r.claimant = %(claimant)s::varchar) FOR UPDATE OF r"
        )

    @cached_property
    def _state_sql(self) -> str:
        return f"SELECT state FROM {ChatRun._meta.db_table} WHERE run_id = %(run_id)s"  # noqa: S608 - our table

    @cached_property
    def _notes_claim_sql(self) -> str:
        notes = ChatNote._meta.db_table
        # The picked rows are locked (FOR UPDATE) before the update marks them.
        return f"""
WITH picked AS (
    SELECT id, text, updated_at FROM {notes}
    WHERE thread_id = %(thread_id)s AND delivered_at IS NULL
    ORDER BY updated_at, id LIMIT %(limit)s FOR UPDATE
), claimed AS (
    UPDATE {notes} AS n SET claimed_run_id = %(run_id)s, claimed_at = %(now)s FROM picked WHERE n.id = picked.id
)
SELECT text FROM picked ORDER BY updated_at, id
"""  # noqa: S608 - our table; every value is a parameter

    @cached_property
    def _notes_deliver_sql(self) -> str:
        return (
            f"WITH told AS (UPDATE {ChatNote._meta.db_table} SET delivered_at = %(now)s "  # noqa: S608 - our table
            "WHERE claimed_run_id = %(run_id)s AND delivered_at IS NULL AND claimed_at IS NOT NULL "
            "AND updated_at <= claimed_at RETURNING 1) SELECT count(*) FROM told"
        )

    def notes_claim(self, *, thread_id: int, run_id: str, limit: int, now: datetime) -> list[str]:
        params = {"thread_id": thread_id, "run_id": run_id, "limit": limit, "now": now}
        return [text for (text,) in hot_fetchall(self._notes_claim_sql, params)]

    def notes_deliver(self, *, run_id: str, now: datetime) -> int:
        row = hot_fetchone(self._notes_deliver_sql, {"run_id": run_id, "now": now})
        return int(row[0]) if row else 0

    def run_lock(self, *, run_id: str, claimant: str | None) -> tuple[ChatThread, ChatRun] | None:
        thread = hot_fetchone(self._thread_lock_sql, {"run_id": run_id})
        if thread is None:
            return None
        run = hot_fetchone(self._run_lock_sql, {"run_id": run_id, "claimant": claimant})
        if run is None:
            return None
        return loaded(ChatThread, thread), loaded(ChatRun, run)

    def run_state(self, *, run_id: str) -> str | None:
        row = hot_fetchone(self._state_sql, {"run_id": run_id})
        return None if row is None else str(row[0])

    def send_admit(
        self,
        *,
        workflow_id: str,
        owner_id: int,
        expected_revision: int | None,
        run: Mapping[str, Any],
        message: Mapping[str, Any],
    ) -> Admitted | None:
        # Inside a caller's transaction a failing statement would abort that transaction, which the
        # locked path then could not use: there the locked path answers alone.
        if connection.in_atomic_block:
            return None
        _check_columns(ChatRun, run, decided=frozenset(_RUN_DERIVED))
        _check_columns(ChatMessage, message, decided=frozenset(_MESSAGE_DERIVED))
        now = timezone.now()
        run_row = row_with_defaults(ChatRun, run, skip=frozenset(_RUN_DERIVED), now=now)
        message_row = row_with_defaults(ChatMessage, message, skip=frozenset(_MESSAGE_DERIVED), now=now)
        params: dict[str, Any] = {
            "workflow_id": workflow_id,
            "owner_id": owner_id,
            "expected_revision": expected_revision,
            "check_client_id": bool(message_row["client_message_id"]),
            "root_parent": _ROOT_PARENT,
            "now": now,
        }
        params.update(row_params(ChatRun, run_row, "run_"))
        params.update(row_params(ChatMessage, message_row, "msg_"))
        try:
            returned = hot_fetchone(self._send_sql, params)
        except IntegrityError:
            return None
        if returned is None:
            return None
        thread_id, revision, message_id, parent_uid, generation = returned
        stored_run = stored(
            ChatRun, {**run_row, "thread_id": thread_id, "workflow_id": workflow_id, "generation": generation}
        )
        stored_message = stored(
            ChatMessage,
            {
                **message_row,
                "id": message_id,
                "thread_id": thread_id,
                "generation": generation,
                "parent_uid": parent_uid,
            },
        )
        return Admitted(message=stored_message, run=stored_run, revision=revision)

    def thread_open(self, *, workflow_id: str, owner_id: int) -> bool:
        if connection.in_atomic_block:  # as for the admission: the locked path opens it there
            return False
        row = row_with_defaults(ChatThread, {}, skip=frozenset(_THREAD_DERIVED), now=timezone.now())
        params = {"workflow_id": workflow_id, "owner_id": owner_id, **row_params(ChatThread, row, "th_")}
        return hot_fetchone(self._thread_open_sql, params) is not None

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
        params = {
            "text": text,
            "steps": insert_fields(ChatRun)["draft_steps"].get_db_prep_save(steps, connection),
            "seq": seq,
            "now": now,
            "run_id": run_id,
            "claimant": claimant,
        }
        return hot_fetchone(self._draft_sql, params) is not None

    @contextmanager
    def sweep_lock(self) -> Iterator[bool]:
        # A session advisory lock: released when the sweep ends or its connection drops.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [WATCHDOG_LOCK_KEY])
            held = bool(cursor.fetchone()[0])
        if not held:
            yield False
            return
        try:
            yield True
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [WATCHDOG_LOCK_KEY])


# --- portable -------------------------------------------------------------------------------------------


class PortableChatStore:
    """The same writes through the ORM, in one transaction (a savepoint inside a caller's)."""

    def send_admit(
        self,
        *,
        workflow_id: str,
        owner_id: int,
        expected_revision: int | None,
        run: Mapping[str, Any],
        message: Mapping[str, Any],
    ) -> Admitted | None:
        _check_columns(ChatRun, run, decided=frozenset(_RUN_DERIVED))
        _check_columns(ChatMessage, message, decided=frozenset(_MESSAGE_DERIVED))
        try:
            with transaction.atomic():
                return self._admit(workflow_id, owner_id, expected_revision, run, message)
        except IntegrityError:  # a writer that committed first took the lane or the client id
            return None

    def _admit(
        self,
        workflow_id: str,
        owner_id: int,
        expected_revision: int | None,
        run: Mapping[str, Any],
        message: Mapping[str, Any],
    ) -> Admitted | None:
        thread = (
            ChatThread.objects.select_for_update(of=("self",))
            .filter(workflow_id=workflow_id, workflow__owner_id=owner_id)
            .first()
        )
        if thread is None:
            return None
        generation = (
            Deployment.objects.filter(workflow_id=workflow_id, state=Deployment.State.LIVE)
            .order_by("id")
            .values_list("generation", flat=True)
            .first()
        )
        if generation is None:
            return None
        if expected_revision is not None and thread.revision != expected_revision:
            return None
        if ChatRun.objects.filter(thread=thread, state__in=LIVE_STATES).exists():
            return None
        client_id = message.get("client_message_id")
        if client_id and ChatMessage.objects.filter(thread=thread, client_message_id=client_id).exists():
            return None
        leaf = thread.active_leaf_uid
        on_leaf = ChatMessage.objects.filter(thread=thread, uid=leaf, generation=generation).exists()
        parent = leaf if leaf and on_leaf else _ROOT_PARENT
        created_run = ChatRun.objects.create(
            thread=thread, workflow_id=thread.home_workflow_id, generation=generation, **run
        )
        created_message = ChatMessage.objects.create(
            thread=thread, generation=generation, parent_uid=parent, **message
        )
        ChatThread.objects.filter(pk=thread.pk).update(
            active_leaf_uid=created_message.uid, revision=F("revision") + 1, updated_at=timezone.now()
        )
        # The thread row is locked: its revision is the one read plus this admission.
        return Admitted(message=created_message, run=created_run, revision=thread.revision + 1)

    def thread_open(self, *, workflow_id: str, owner_id: int) -> bool:
        live = Deployment.objects.filter(workflow_id=OuterRef("pk"), state=Deployment.State.LIVE)
        if not Workflow.objects.filter(pk=workflow_id, owner_id=owner_id).filter(Exists(live)).exists():
            return False
        with transaction.atomic():  # get_or_create settles a concurrent opener by the unique column
            _thread, created = ChatThread.objects.get_or_create(
                workflow_id=workflow_id, defaults={"home_workflow_id": workflow_id}
            )
        return created

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


# --- the installed store --------------------------------------------------------------------------------

_installed: ChatStore | None = None


def chat_store_for_default_database() -> ChatStore:
    """The implementation for the default database's backend."""
    return PostgresChatStore() if connection.vendor == "postgresql" else PortableChatStore()


def chat_store_install(store: ChatStore) -> None:
    """Make `store` the one `chat_store()` answers (`ChatConfig.ready()` installs the default's)."""
    global _installed
    _installed = store


def chat_store() -> ChatStore:
    """The installed store."""
    if _installed is None:
        raise RuntimeError("No chat store is installed; the chat app's ready() installs it.")
    return _installed
