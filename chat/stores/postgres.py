"""The chat's operations on PostgreSQL, each a prepared statement with server-side binding
(`opencompany.core.db.hot_fetchone`).

The send's admission is one statement that checks, writes and answers why it wrote nothing. Outside a
transaction it runs alone: the thread row is locked inside it, so a writer that held that lock and
committed meanwhile is newer than the statement's snapshot; the statement sees that (the locked thread
is not the one its snapshot holds) and writes nothing, and the admission runs again in a transaction
that locks the chat first. Inside a caller's transaction it always locks first, so a failing statement
never aborts the caller's work and the answer is final.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from enum import Enum
from functools import cached_property
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from chat import errors
from chat.models import LIVE_STATES, ChatMessage, ChatNote, ChatRun, ChatThread
from chat.stores.base import (
    MESSAGE_DERIVED,
    ROOT_PARENT,
    RUN_DERIVED,
    WATCHDOG_LOCK_KEY,
    AdmitAnswer,
    Admitted,
    Refused,
    Replay,
    check_columns,
)
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
from opencompany.core.errors import NOT_FOUND

_THREAD_DERIVED = {"workflow_id": "w.id", "home_workflow_id": "w.id"}


def _quoted_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


class _Again(Enum):
    """Why one run of the admission statement has no answer yet (it wrote nothing)."""

    NO_CHAT = "no_chat"  # the workflow is the owner's and live, and has no current chat
    RACED = "raced"  # a writer that held the chat's lock changed the chat after the statement's snapshot


class PostgresChatStore:
    """Each operation is one prepared statement with server-side binding."""

    @cached_property
    def _send_sql(self) -> str:
        run_columns, run_values = insert_select_lists(ChatRun, RUN_DERIVED, "run_")
        message_columns, message_values = insert_select_lists(ChatMessage, MESSAGE_DERIVED, "msg_")
        client_id_type = parameter_type(insert_fields(ChatMessage)["client_message_id"])
        client_id = f"%(msg_client_message_id)s::{client_id_type}"
        threads, runs, messages = (
            ChatThread._meta.db_table,
            ChatRun._meta.db_table,
            ChatMessage._meta.db_table,
        )
        # `th` locks the thread and reads its newest version; `seen` reads the version the statement's
        # snapshot holds. They differ when a writer that held the lock committed meanwhile: then the
        # other reads are older than the lock and nothing is written. The lane's locking read drops a
        # run such a writer ended without moving the thread; a run or client id it added is refused by
        # their unique indexes. The last SELECT answers whether or not it wrote.
        return f"""
WITH w AS (
    SELECT w.id FROM {Workflow._meta.db_table} w
    WHERE w.id = %(workflow_id)s AND w.owner_id = %(owner_id)s::bigint
), th AS (
    SELECT t.id, t.workflow_id, t.active_leaf_uid, t.revision FROM {threads} t
    WHERE t.workflow_id = %(workflow_id)s AND EXISTS (SELECT 1 FROM w)
    FOR UPDATE OF t
), seen AS (
    SELECT s.revision FROM {threads} s, th WHERE s.id = th.id
), dep AS (
    SELECT generation FROM {Deployment._meta.db_table}
    WHERE workflow_id = %(workflow_id)s AND state = '{Deployment.State.LIVE}' ORDER BY id LIMIT 1
), lane AS (
    SELECT r.run_id FROM {runs} r, th
    WHERE r.thread_id = th.id AND r.state IN ({_quoted_list(LIVE_STATES)})
    FOR SHARE OF r
), dup AS (
    SELECT m.id FROM {messages} m, th
    WHERE %(check_client_id)s::boolean AND m.thread_id = th.id AND m.client_message_id = {client_id}
    LIMIT 1
), ok AS (
    SELECT th.id, th.workflow_id, th.active_leaf_uid, dep.generation FROM th, seen, dep
    WHERE th.revision = seen.revision
      AND (%(expected_revision)s::bigint IS NULL OR th.revision = %(expected_revision)s::bigint)
      AND NOT EXISTS (SELECT 1 FROM lane) AND NOT EXISTS (SELECT 1 FROM dup)
), parent AS (
    SELECT COALESCE((
        SELECT m.uid FROM {messages} m, ok
        WHERE m.thread_id = ok.id AND m.uid = ok.active_leaf_uid AND m.generation = ok.generation
    ), %(root_parent)s::varchar) AS uid
), run AS (
    INSERT INTO {runs} ({run_columns})
    SELECT {run_values} FROM ok
    RETURNING generation
), msg AS (
    INSERT INTO {messages} ({message_columns})
    SELECT {message_values} FROM ok, parent
    RETURNING id, uid, parent_uid
), moved AS (
    UPDATE {threads} AS t
    SET active_leaf_uid = msg.uid, revision = t.revision + 1, updated_at = %(now)s::timestamptz
    FROM ok, msg, run WHERE t.id = ok.id
    RETURNING t.revision, msg.id AS message_id, msg.parent_uid, run.generation
)
SELECT EXISTS (SELECT 1 FROM w), (SELECT generation FROM dep), th.id, th.revision,
       th.revision = seen.revision, (SELECT id FROM dup), (SELECT run_id FROM lane),
       moved.revision, moved.message_id, moved.parent_uid, moved.generation
FROM (VALUES (1)) AS one (x) LEFT JOIN th ON TRUE LEFT JOIN seen ON TRUE LEFT JOIN moved ON TRUE
"""  # noqa: S608 - identifiers and constants of our models; every value is a parameter

    @cached_property
    def _chat_lock_sql(self) -> str:
        columns, values = insert_select_lists(ChatThread, _THREAD_DERIVED, "th_")
        # Opens the chat when missing; on the unique workflow column an existing chat (a concurrent
        # opener's included) is locked by the no-op update instead. Nothing for another owner's
        # workflow or one that is not live.
        return f"""
INSERT INTO {ChatThread._meta.db_table} ({columns})
SELECT {values} FROM {Workflow._meta.db_table} w
WHERE w.id = %(workflow_id)s AND w.owner_id = %(owner_id)s::bigint
  AND EXISTS (
      SELECT 1 FROM {Deployment._meta.db_table} d
      WHERE d.workflow_id = w.id AND d.state = '{Deployment.State.LIVE}')
ON CONFLICT (workflow_id) DO UPDATE SET workflow_id = EXCLUDED.workflow_id
RETURNING id
"""  # noqa: S608 - identifiers and constants of our models; every value is a parameter

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
        now = timezone.now()
        run_row = row_with_defaults(ChatRun, run, skip=frozenset(RUN_DERIVED), now=now)
        message_row = row_with_defaults(ChatMessage, message, skip=frozenset(MESSAGE_DERIVED), now=now)
        params: dict[str, Any] = {
            "workflow_id": workflow_id,
            "owner_id": owner_id,
            "expected_revision": expected_revision,
            "check_client_id": bool(message_row["client_message_id"]),
            "root_parent": ROOT_PARENT,
            "now": now,
        }
        params.update(row_params(ChatRun, run_row, "run_"))
        params.update(row_params(ChatMessage, message_row, "msg_"))
        thread_row = row_with_defaults(ChatThread, {}, skip=frozenset(_THREAD_DERIVED), now=now)
        params.update(row_params(ChatThread, thread_row, "th_"))
        rows = (run_row, message_row)
        if connection.in_atomic_block:
            return self._admit_locked(params, rows)
        answer = self._admit_once(params, rows)
        if answer is _Again.NO_CHAT:  # a chat's first message: open the chat, then admit as ever
            hot_fetchone(self._chat_lock_sql, params)
            answer = self._admit_once(params, rows)
        if isinstance(answer, _Again):
            with transaction.atomic():
                return self._admit_locked(params, rows)
        return answer

    def _admit_locked(
        self, params: dict[str, Any], rows: tuple[dict[str, Any], dict[str, Any]]
    ) -> AdmitAnswer:
        """The admission in the caller's transaction with the chat locked (opened when missing) first:
        the statement's snapshot then follows every writer that held the lock, so its answer is final."""
        while True:
            hot_fetchone(self._chat_lock_sql, params)
            answer = self._admit(params, rows)
            if answer is _Again.RACED:
                raise RuntimeError("the admission saw its own locked chat change")
            # No chat: the workflow became the owner's live one between the two statements; open it now.
            if answer is not _Again.NO_CHAT:
                return answer

    def _admit_once(
        self, params: dict[str, Any], rows: tuple[dict[str, Any], dict[str, Any]]
    ) -> AdmitAnswer | _Again:
        """The statement alone (autocommit): a unique index that fires means a writer committed under
        it, as when the thread changed."""
        try:
            return self._admit(params, rows)
        except IntegrityError:
            return _Again.RACED

    def _admit(
        self, params: dict[str, Any], rows: tuple[dict[str, Any], dict[str, Any]]
    ) -> AdmitAnswer | _Again:
        returned = hot_fetchone(self._send_sql, params)
        assert returned is not None  # noqa: S101 - the last SELECT always answers one row
        (owned, generation, thread_id, revision, fresh, duplicate, live_run, *written) = returned
        new_revision, message_id, parent_uid, run_generation = written
        if not owned:
            return Refused(NOT_FOUND)
        if generation is None:
            return Refused(errors.NOT_RUNNING)
        if thread_id is None:
            return _Again.NO_CHAT
        if not fresh:
            return _Again.RACED
        if duplicate is not None:
            replayed = ChatMessage.objects.get(pk=duplicate)
            return Replay(
                message=replayed, run=ChatRun.objects.get(run_id=replayed.run_id), revision=revision
            )
        expected = params["expected_revision"]
        if expected is not None and revision != expected:
            return Refused(errors.REVISION_CONFLICT, {"current_revision": revision})
        if live_run is not None:
            return Refused(errors.RUN_IN_PROGRESS, {"run_id": live_run})
        if new_revision is None:
            raise RuntimeError("the admission statement passed its checks and wrote nothing")
        run_row, message_row = rows
        workflow_id = params["workflow_id"]
        stored_run = stored(
            ChatRun,
            {**run_row, "thread_id": thread_id, "workflow_id": workflow_id, "generation": run_generation},
        )
        stored_message = stored(
            ChatMessage,
            {
                **message_row,
                "id": message_id,
                "thread_id": thread_id,
                "generation": run_generation,
                "parent_uid": parent_uid,
            },
        )
        return Admitted(message=stored_message, run=stored_run, revision=new_revision)

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
