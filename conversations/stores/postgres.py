"""The conversation store on PostgreSQL: each operation one hand-written statement, prepared on the
connection (`opencompany.core.db`).

The per-turn append after a known head is one compare-and-set statement that either appends or reports
the head as its snapshot found it, so a refusal needs no second statement. When the head matched that
snapshot but the update, after waiting for the row's lock, no longer did, the writer that held the lock
committed meanwhile: the append then runs again with the head locked first, as does every append
without a known head (a first write, or one after a length only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from functools import cached_property
from typing import Any

from django.db import connection, transaction

from conversations.models import AgentConversation, ProviderCall
from conversations.stores.base import (
    CALL_DERIVED,
    PRESSURE_COLUMNS,
    AppendAnswer,
    Appended,
    Batch,
    ConversationStore,
    Head,
    LockedAppend,
    Refused,
    append_check,
    chain_digests,
    check_call,
    key_params,
    load_where,
    workflow_gone,
)
from conversations.types import ConversationKey, TokenUsage
from graphs.models import Workflow
from opencompany.core.db import (
    column_of,
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

# The head update is the compare-and-set: it takes the row lock, and a writer that committed first
# changed `length`, so after the lock wait the WHERE matches nothing and nothing is inserted. The insert
# takes its conversation id from the update's RETURNING, so rows only land with the head. Only when the
# update matched nothing does `found` read the head (and the digest an append raced past would still
# start with) as the statement's snapshot holds it.
# The arrays go in binary (%b): length-prefixed elements. As text, psycopg would backslash-escape every
# quote of every message's JSON and the server would parse the array literal back.
_PG_APPEND_SQL = """
WITH head AS (
    UPDATE conversations_agentconversation AS c SET
        length = c.length + %(count)s, bytes = c.bytes + %(bytes)s, revision = c.revision + 1,
        head_digest = %(head_digest)s, updated_at = %(now)s,
        input_tokens = c.input_tokens + %(input)s, output_tokens = c.output_tokens + %(output)s,
        cache_read_tokens = c.cache_read_tokens + %(cache_read)s,
        cache_write_tokens = c.cache_write_tokens + %(cache_write)s
    WHERE c.workflow_id = %(workflow_id)s AND c.generation = %(generation)s AND c.agent_node_id = %(agent)s
      AND c.length = %(length)s AND c.head_digest = %(digest)s
    RETURNING c.id, c.owner_id, c.length, c.revision, c.bytes, c.notes_revision
), added AS (
    INSERT INTO conversations_conversationmessage (conversation_id, seq, wire, digest, size, created_at)
    SELECT head.id, %(length)s + m.ord - 1, m.wire, m.digest, m.size, %(now)s
    FROM head, unnest(%(wires)b::json[], %(digests)b::varchar[], %(sizes)b::int[])
         WITH ORDINALITY AS m(wire, digest, size, ord)
), found AS (
    SELECT c.owner_id, c.length, c.revision, c.bytes, c.head_digest, c.notes_revision,
           (SELECT m.digest FROM conversations_conversationmessage m
            WHERE m.conversation_id = c.id AND m.seq = %(length)s - 1) AS digest_before
    FROM conversations_agentconversation c
    WHERE c.workflow_id = %(workflow_id)s AND c.generation = %(generation)s AND c.agent_node_id = %(agent)s
      AND NOT EXISTS (SELECT 1 FROM head)
)
SELECT head.owner_id, head.length, head.revision, head.bytes, head.notes_revision,
       found.owner_id, found.length, found.revision, found.bytes, found.head_digest, found.notes_revision,
       found.digest_before
FROM (VALUES (1)) AS one (x) LEFT JOIN head ON TRUE LEFT JOIN found ON TRUE
"""


class _Again(Enum):
    RACED = "raced"  # the head matched the statement's snapshot, not the row its update locked


class PostgresConversationStore(LockedAppend, ConversationStore):
    """One statement per operation, prepared on the connection (`opencompany.core.db`)."""

    def __init__(self) -> None:
        # The stored texts in order, parsed by one json.loads of their join. Aggregating them in the
        # statement instead (string_agg ... ORDER BY) measured slower at every size (docs/benchmarks-log.md).
        quote = connection.ops.quote_name
        self.load_sql = f"SELECT m.{quote('wire')}::text {load_where()} ORDER BY m.{quote('seq')}"

    def append(
        self,
        *,
        key: ConversationKey,
        expected_length: int,
        expected_digest: str | None,
        batch: Batch,
        usage: TokenUsage | None,
        now: datetime,
    ) -> AppendAnswer:
        if expected_digest is not None and batch.wires:
            answer = self._append_after(key, expected_length, expected_digest, batch, usage, now)
            if answer is not _Again.RACED:
                return answer
        with transaction.atomic(savepoint=False):
            return self._append_locked(
                key=key,
                expected_length=expected_length,
                expected_digest=expected_digest,
                batch=batch,
                usage=usage,
                now=now,
            )

    def _append_after(
        self,
        key: ConversationKey,
        expected_length: int,
        expected_digest: str,
        batch: Batch,
        usage: TokenUsage | None,
        now: datetime,
    ) -> AppendAnswer | _Again:
        """The compare-and-set statement: appended, or refused as its snapshot found the head."""
        digests = chain_digests(batch.encoded, expected_digest)
        row = self._append_statement(key, expected_length, expected_digest, digests, batch, usage, now)
        applied, found, digest_before = row[:5], row[5:11], row[11]
        if applied[1] is not None:
            owner_id, length, revision, size, notes_revision = applied
            return Appended(Head(owner_id, length, revision, size, digests[-1], notes_revision))
        head = None if found[1] is None else Head(*found)
        answer = append_check(
            head,
            digest_before=digest_before,
            expected_length=expected_length,
            expected_digest=expected_digest,
            batch=batch,
        )
        # The checks pass on the snapshot's head, but the update did not match: the head moved.
        return _Again.RACED if answer is None else answer

    def _append_statement(
        self,
        key: ConversationKey,
        length: int,
        digest: str,
        digests: list[str],
        batch: Batch,
        usage: TokenUsage | None,
        now: datetime,
    ) -> tuple[Any, ...]:
        params: dict[str, Any] = {
            "workflow_id": key.workflow_id,
            "generation": key.generation,
            "agent": key.agent_node_id,
            "length": length,
            "digest": digest,
            "wires": batch.texts,
            "digests": digests,
            "sizes": batch.sizes,
            "count": len(batch.texts),
            "bytes": sum(batch.sizes),
            "head_digest": digests[-1] if digests else digest,
            "now": now,
            "input": usage.input_tokens if usage else 0,
            "output": usage.output_tokens if usage else 0,
            "cache_read": usage.cache_read_tokens if usage else 0,
            "cache_write": usage.cache_write_tokens if usage else 0,
        }
        row = hot_fetchone(_PG_APPEND_SQL, params)
        assert row is not None  # noqa: S101 - the last SELECT always answers one row
        return row

    def _write_locked(
        self,
        key: ConversationKey,
        row: AgentConversation,
        digests: list[str],
        batch: Batch,
        usage: TokenUsage | None,
        now: datetime,
    ) -> Head:
        returned = self._append_statement(key, row.length, row.head_digest, digests, batch, usage, now)
        owner_id, length, revision, size, notes_revision = returned[:5]
        if length is None:
            raise RuntimeError("the append did not match the head row it holds locked")
        return Head(
            owner_id, length, revision, size, digests[-1] if digests else row.head_digest, notes_revision
        )

    @cached_property
    def _head_lock_sql(self) -> str:
        quote = connection.ops.quote_name
        return (
            f"SELECT {select_list(AgentConversation, 'c')} FROM {quote(AgentConversation._meta.db_table)} c "  # noqa: S608 - our table
            f"WHERE c.{quote('workflow_id')} = %s AND c.{quote('generation')} = %s "
            f"AND c.{quote('agent_node_id')} = %s FOR UPDATE OF c"
        )

    def head_lock(self, *, key: ConversationKey) -> AgentConversation | None:
        row = hot_fetchone(self._head_lock_sql, key_params(key))
        return None if row is None else loaded(AgentConversation, row)

    @cached_property
    def _call_sql(self) -> str:
        columns, values = insert_select_lists(ProviderCall, CALL_DERIVED, "call_")
        heads = AgentConversation._meta.db_table
        fields = insert_fields(AgentConversation)
        sets = ", ".join(
            f"{column_of(fields[name])} = %(set_{name})s::{parameter_type(fields[name])}"
            for name in PRESSURE_COLUMNS
        )
        # A data-modifying WITH runs once whether or not the outer query reads it; the pressure
        # update is the compare-and-swap on the head digest, and lands only with the ledger row.
        return f"""
WITH w AS (
    SELECT owner_id FROM {Workflow._meta.db_table} WHERE id = %(call_workflow_id)s
), call AS (
    INSERT INTO {ProviderCall._meta.db_table} ({columns}) SELECT {values} FROM w RETURNING id, owner_id
), pressure AS (
    UPDATE {heads} AS c SET {sets}
    WHERE %(sets_pressure)s::boolean AND c.workflow_id = %(call_workflow_id)s
      AND c.generation = %(key_generation)s::integer AND c.agent_node_id = %(key_agent)s
      AND c.head_digest = %(call_conversation_digest)s AND EXISTS (SELECT 1 FROM call)
)
SELECT id, owner_id FROM call
"""  # noqa: S608 - identifiers of our models; every value is a parameter

    def call_record(
        self,
        *,
        call: Mapping[str, Any],
        pressure_of: ConversationKey | None,
        pressure: Mapping[str, Any],
        now: datetime,
    ) -> ProviderCall | Refused:
        check_call(call, pressure_of, pressure)
        row = row_with_defaults(ProviderCall, call, skip=frozenset(CALL_DERIVED), now=now)
        params = row_params(ProviderCall, row, "call_")
        params.update({f"set_{name}": pressure.get(name) for name in PRESSURE_COLUMNS})
        params.update(
            sets_pressure=pressure_of is not None,
            key_generation=pressure_of.generation if pressure_of else 0,
            key_agent=pressure_of.agent_node_id if pressure_of else "",
        )
        returned = hot_fetchone(self._call_sql, params)
        if returned is None:
            return workflow_gone()
        call_id, owner_id = returned
        return stored(ProviderCall, {**row, "id": call_id, "owner_id": owner_id})

    def load(self, *, key: ConversationKey) -> list[dict[str, Any]]:
        rows = hot_fetchall(self.load_sql, key_params(key))
        return json.loads("[" + ",".join([text for (text,) in rows]) + "]") if rows else []
