"""The conversation store: the statements every turn runs, once per database backend.

A turn appends after the head it read, records each provider call in the ledger (with the pressure it
sets on the head), and the next firing loads the whole conversation. PostgreSQL
does each in one hand-written statement (`opencompany.core.db`); every other database runs the
portable implementation (the ORM and plain SQL). The implementation is chosen once, when the app
loads (`ConversationsConfig.ready()`), and services and selectors reach it through
`conversation_store()`. Both keep the same promises, and one parametrized suite holds them to it.

The store writes rows and nothing else: events, errors and the locked general path stay in the
services.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import F

from conversations.models import AgentConversation, ConversationMessage, ProviderCall
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

INSERT_BATCH = 500  # rows per INSERT of the ORM's bulk inserts


@dataclass(frozen=True, slots=True)
class AppendedHead:
    """The head row as an applied append left it."""

    owner_id: int
    length: int
    revision: int
    bytes: int
    notes_revision: int


class ConversationStore(Protocol):
    """What the services and selectors need from the database, whatever it is."""

    def append_after(
        self,
        *,
        key: ConversationKey,
        expected_length: int,
        expected_digest: str,
        wires: list[dict[str, Any]],
        texts: list[str],
        digests: list[str],
        sizes: list[int],
        usage: TokenUsage | None,
        now: datetime,
    ) -> AppendedHead | None:
        """Append the messages as rows `expected_length, …` iff the head row is exactly
        (`expected_length`, `expected_digest`): bump length, bytes, revision and the usage counters and
        set the head digest to `digests[-1]`. All or nothing on its own, inside or outside a
        transaction. None, with nothing written, when the head differs or does not exist.

        `texts` are the canonical JSON of `wires`, `digests` their chained digests and `sizes` their
        UTF-8 sizes; `wires` is not empty.
        """
        ...

    def load(self, *, key: ConversationKey) -> list[dict[str, Any]]:
        """The stored messages of `key` in seq order (`[]` when none); database errors propagate."""
        ...

    def head_lock(self, *, key: ConversationKey) -> AgentConversation | None:
        """The head row of `key` as loaded, locked until the caller's transaction ends (None when
        missing)."""
        ...

    def call_record(
        self,
        *,
        call: Mapping[str, Any],
        pressure_of: ConversationKey | None,
        pressure: Mapping[str, Any],
        now: datetime,
    ) -> ProviderCall | None:
        """Append one provider call to the ledger (`call`: its columns but the owner, which is its
        workflow's; every other column takes its field's default) and, with `pressure_of`, set that
        head's `pressure` columns if its head digest is still the call's `conversation_digest`. All or
        nothing; None, with nothing written, when the workflow is gone."""
        ...


def _load_where() -> str:
    quote = connection.ops.quote_name
    messages, heads = ConversationMessage._meta.db_table, AgentConversation._meta.db_table
    return (
        f"FROM {quote(messages)} m JOIN {quote(heads)} c "
        f"ON m.{quote('conversation_id')} = c.{quote('id')} "
        f"WHERE c.{quote('workflow_id')} = %s AND c.{quote('generation')} = %s "
        f"AND c.{quote('agent_node_id')} = %s"
    )


def _key_params(key: ConversationKey) -> list[str | int]:
    return [key.workflow_id, key.generation, key.agent_node_id]


# The head's columns a provider call's pressure sets, and the ledger column the store decides.
PRESSURE_COLUMNS = ("last_input_tokens", "pressure_headroom_tokens", "context_window", "pressure_estimated")
_CALL_DERIVED = {"owner_id": "w.owner_id"}


def _check_call(
    call: Mapping[str, Any], pressure_of: ConversationKey | None, pressure: Mapping[str, Any]
) -> None:
    if set(call) & set(_CALL_DERIVED):
        raise TypeError(f"the store decides the ledger columns {sorted(_CALL_DERIVED)}")
    if pressure_of is not None and set(pressure) != set(PRESSURE_COLUMNS):
        raise TypeError(f"a call's pressure sets exactly {list(PRESSURE_COLUMNS)}")
    if pressure_of is not None and pressure_of.workflow_id != call.get("workflow_id"):
        raise TypeError("a call sets the pressure of its own workflow's conversation only")


# --- PostgreSQL -------------------------------------------------------------------------------------

# The head update is the compare-and-set: it takes the row lock, and a writer that committed first
# changed `length`, so after the lock wait the WHERE matches nothing and nothing is inserted. The insert
# takes its conversation id from the update's RETURNING, so rows only land with the head.
# The arrays go in binary (%b): length-prefixed elements. As text, psycopg would backslash-escape every
# quote of every message's JSON and the server would parse the array literal back (docs/benchmarks.md).
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
)
SELECT owner_id, length, revision, bytes, notes_revision FROM head
"""


class PostgresConversationStore(ConversationStore):
    """One statement per operation, prepared on the connection (`opencompany.core.db`)."""

    def __init__(self) -> None:
        # The stored texts in order, parsed by one json.loads of their join. Aggregating them in the
        # statement instead (string_agg ... ORDER BY) measured slower at every size (docs/benchmarks.md).
        quote = connection.ops.quote_name
        self.load_sql = f"SELECT m.{quote('wire')}::text {_load_where()} ORDER BY m.{quote('seq')}"

    def append_after(
        self,
        *,
        key: ConversationKey,
        expected_length: int,
        expected_digest: str,
        wires: list[dict[str, Any]],
        texts: list[str],
        digests: list[str],
        sizes: list[int],
        usage: TokenUsage | None,
        now: datetime,
    ) -> AppendedHead | None:
        params: dict[str, Any] = {
            "workflow_id": key.workflow_id,
            "generation": key.generation,
            "agent": key.agent_node_id,
            "length": expected_length,
            "digest": expected_digest,
            "wires": texts,
            "digests": digests,
            "sizes": sizes,
            "count": len(texts),
            "bytes": sum(sizes),
            "head_digest": digests[-1],
            "now": now,
            "input": usage.input_tokens if usage else 0,
            "output": usage.output_tokens if usage else 0,
            "cache_read": usage.cache_read_tokens if usage else 0,
            "cache_write": usage.cache_write_tokens if usage else 0,
        }
        row = hot_fetchone(_PG_APPEND_SQL, params)
        if row is None:
            return None
        owner_id, length, revision, size, notes_revision = row
        return AppendedHead(
            owner_id=owner_id, length=length, revision=revision, bytes=size, notes_revision=notes_revision
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
        row = hot_fetchone(self._head_lock_sql, _key_params(key))
        return None if row is None else loaded(AgentConversation, row)

    @cached_property
    def _call_sql(self) -> str:
        columns, values = insert_select_lists(ProviderCall, _CALL_DERIVED, "call_")
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
    ) -> ProviderCall | None:
        _check_call(call, pressure_of, pressure)
        row = row_with_defaults(ProviderCall, call, skip=frozenset(_CALL_DERIVED), now=now)
        params = row_params(ProviderCall, row, "call_")
        params.update({f"set_{name}": pressure.get(name) for name in PRESSURE_COLUMNS})
        params.update(
            sets_pressure=pressure_of is not None,
            key_generation=pressure_of.generation if pressure_of else 0,
            key_agent=pressure_of.agent_node_id if pressure_of else "",
        )
        returned = hot_fetchone(self._call_sql, params)
        if returned is None:
            return None
        call_id, owner_id = returned
        return stored(ProviderCall, {**row, "id": call_id, "owner_id": owner_id})

    def load(self, *, key: ConversationKey) -> list[dict[str, Any]]:
        rows = hot_fetchall(self.load_sql, _key_params(key))
        return json.loads("[" + ",".join([text for (text,) in rows]) + "]") if rows else []


# --- any database -----------------------------------------------------------------------------------


class PortableConversationStore(ConversationStore):
    """The ORM and plain SQL: runs on every database Django supports, PostgreSQL included."""

    def __init__(self) -> None:
        quote = connection.ops.quote_name
        self.load_sql = f"SELECT m.{quote('wire')} {_load_where()} ORDER BY m.{quote('seq')}"

    def append_after(
        self,
        *,
        key: ConversationKey,
        expected_length: int,
        expected_digest: str,
        wires: list[dict[str, Any]],
        texts: list[str],
        digests: list[str],
        sizes: list[int],
        usage: TokenUsage | None,
        now: datetime,
    ) -> AppendedHead | None:
        changes: dict[str, Any] = {
            "length": F("length") + len(wires),
            "bytes": F("bytes") + sum(sizes),
            "revision": F("revision") + 1,
            "head_digest": digests[-1],
            "updated_at": now,
        }
        if usage is not None:
            changes["input_tokens"] = F("input_tokens") + usage.input_tokens
            changes["output_tokens"] = F("output_tokens") + usage.output_tokens
            changes["cache_read_tokens"] = F("cache_read_tokens") + usage.cache_read_tokens
            changes["cache_write_tokens"] = F("cache_write_tokens") + usage.cache_write_tokens
        heads = AgentConversation.objects.filter(**key.filter_kwargs())
        with transaction.atomic():
            # The compare-and-set: the WHERE holds the expected head, and the update locks the row
            # until the rows below are in.
            if not heads.filter(length=expected_length, head_digest=expected_digest).update(**changes):
                return None
            head_id, owner_id, length, revision, size, notes_revision = heads.values_list(
                "id", "owner_id", "length", "revision", "bytes", "notes_revision"
            ).get()
            ConversationMessage.objects.bulk_create(
                [
                    ConversationMessage(
                        conversation_id=head_id,
                        seq=expected_length + i,
                        wire=wires[i],
                        digest=digests[i],
                        size=sizes[i],
                    )
                    for i in range(len(wires))
                ],
                batch_size=INSERT_BATCH,
            )
        return AppendedHead(
            owner_id=owner_id, length=length, revision=revision, bytes=size, notes_revision=notes_revision
        )

    def load(self, *, key: ConversationKey) -> list[dict[str, Any]]:
        with connection.cursor() as cursor:
            cursor.execute(self.load_sql, _key_params(key))
            rows = cursor.fetchall()
        # Text columns come back as the stored JSON text; native JSON columns already parsed.
        loads = json.loads
        return [loads(value) if isinstance(value, str | bytes) else value for (value,) in rows]

    def head_lock(self, *, key: ConversationKey) -> AgentConversation | None:
        return AgentConversation.objects.select_for_update().filter(**key.filter_kwargs()).first()

    def call_record(
        self,
        *,
        call: Mapping[str, Any],
        pressure_of: ConversationKey | None,
        pressure: Mapping[str, Any],
        now: datetime,
    ) -> ProviderCall | None:
        _check_call(call, pressure_of, pressure)
        with transaction.atomic():
            owner_id = (
                Workflow.objects.filter(pk=call["workflow_id"]).values_list("owner_id", flat=True).first()
            )
            if owner_id is None:
                return None
            row = ProviderCall.objects.create(owner_id=owner_id, **call)
            if pressure_of is not None:
                AgentConversation.objects.filter(
                    **pressure_of.filter_kwargs(), head_digest=call["conversation_digest"]
                ).update(**pressure)
        return row


# --- the choice -------------------------------------------------------------------------------------

_BY_VENDOR: dict[str, type[ConversationStore]] = {"postgresql": PostgresConversationStore}

_chosen: ConversationStore | None = None


def store_for_database(alias: str = DEFAULT_DB_ALIAS) -> ConversationStore:
    """A new store for the database `alias`: its own implementation when it has one, else the portable one."""
    return _BY_VENDOR.get(connections[alias].vendor, PortableConversationStore)()


def conversation_store_use(store: ConversationStore) -> None:
    """Make `store` the one every service and selector uses from now on."""
    global _chosen
    _chosen = store


def conversation_store() -> ConversationStore:
    """The store in use: the default database's, chosen when the app loaded."""
    if _chosen is None:
        raise ImproperlyConfigured("The conversation store is chosen when the conversations app loads.")
    return _chosen
