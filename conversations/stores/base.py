"""What the conversation services ask of the database, whatever it is: the operations, their typed
answers, and what every implementation shares.

An append is one operation with one answer: `Appended` (the rows and the head are written),
`Unchanged` (nothing written: this very append had already landed, or it carried nothing to write) or
`Refused` (nothing written, with the code and the facts the service words its refusal from).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import IntegrityError, connection, transaction

from conversations import errors
from conversations.models import AgentConversation, ConversationMessage, ProviderCall
from conversations.types import ConversationKey, TokenUsage
from graphs.models import Workflow
from opencompany.core.errors import NOT_FOUND, Refused

INSERT_BATCH = 500  # rows per INSERT of the ORM's bulk inserts


@dataclass(frozen=True, slots=True)
class Head:
    """The head row's counters as an append found or left them (zeros and "" for a missing head)."""

    owner_id: int
    length: int
    revision: int
    bytes: int
    digest: str
    notes_revision: int


@dataclass(frozen=True, slots=True)
class Appended:
    """The messages are stored; `head` is the head row as the append left it."""

    head: Head


@dataclass(frozen=True, slots=True)
class Unchanged:
    """Nothing was written: the head already is this append applied, or the append carried nothing."""

    head: Head


type AppendAnswer = Appended | Unchanged | Refused


@dataclass(frozen=True, slots=True)
class Batch:
    """Messages ready to store: the normalized wires, their canonical JSON texts, the texts' UTF-8 (sizes
    and digests) and sizes."""

    wires: list[dict[str, Any]]
    texts: list[str]
    encoded: list[bytes]
    sizes: list[int]


class ConversationStore(Protocol):
    """What the services and selectors need from the database, whatever it is."""

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
        """Append `batch` after exactly `expected_length` stored messages, all or nothing, inside or
        outside a caller's transaction: bump length, bytes, revision and the usage counters and chain
        the digests on from the stored head.

        The checks, in this order: with `expected_digest`, the stored conversation must still start
        with the prefix (`expected_length`, `expected_digest`) (else `Refused("context_changed")`), and a
        head that already is this append applied answers `Unchanged`; the stored length must be
        `expected_length` (`conversation_conflict`); `extra` carries `length` and `expected_length`.
        A batch without messages or usage writes nothing (`Unchanged`); the head row is created for a
        first write at length 0 (`Refused("not_found")` when the workflow is gone).
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
    ) -> ProviderCall | Refused:
        """Append one provider call to the ledger (`call`: its columns but the owner, which is its
        workflow's; every other column takes its field's default) and, with `pressure_of`, set that
        head's `pressure` columns if its head digest is still the call's `conversation_digest`. All or
        nothing; `Refused("not_found")`, with nothing written, when the workflow is gone."""
        ...


def chain_digests(encoded: Sequence[bytes], prev: str) -> list[str]:
    """The chained digests `sha256(previous digest + canonical JSON)` of messages stored after `prev`
    (as `wire.digest_chain`, from the UTF-8 already built)."""
    out: list[str] = []
    for data in encoded:
        prev = hashlib.sha256(prev.encode() + data).hexdigest()
        out.append(prev)
    return out


def head_of(row: AgentConversation | None) -> Head:
    if row is None:
        return Head(owner_id=0, length=0, revision=0, bytes=0, digest="", notes_revision=0)
    return Head(
        owner_id=row.owner_id,
        length=row.length,
        revision=row.revision,
        bytes=row.bytes,
        digest=row.head_digest,
        notes_revision=row.notes_revision,
    )


def append_check(
    head: Head | None,
    *,
    digest_before: str | None,
    expected_length: int,
    expected_digest: str | None,
    batch: Batch,
) -> Refused | Unchanged | None:
    """An append's checks against the head as found (None: missing), in the protocol's order; None
    when it may write. `digest_before` is the stored digest at `expected_length - 1` when the head is
    longer than that (what an append raced past would still start with)."""
    length = head.length if head is not None else 0
    if expected_digest is not None:
        if head is None or head.length < expected_length:
            extends = False
        elif head.length == expected_length:
            extends = head.digest == expected_digest
        else:
            extends = digest_before == expected_digest
        if not extends:
            return Refused(errors.CONTEXT_CHANGED, {"length": length, "expected_length": expected_length})
        if (
            head is not None
            and batch.wires
            and head.length == expected_length + len(batch.wires)
            and head.digest == chain_digests(batch.encoded, expected_digest)[-1]
        ):
            return Unchanged(head)
    if length != expected_length:
        return Refused(errors.CONVERSATION_CONFLICT, {"length": length, "expected_length": expected_length})
    return None


def workflow_gone() -> Refused:
    return Refused(NOT_FOUND)


def load_where() -> str:
    quote = connection.ops.quote_name
    messages, heads = ConversationMessage._meta.db_table, AgentConversation._meta.db_table
    return (
        f"FROM {quote(messages)} m JOIN {quote(heads)} c "
        f"ON m.{quote('conversation_id')} = c.{quote('id')} "
        f"WHERE c.{quote('workflow_id')} = %s AND c.{quote('generation')} = %s "
        f"AND c.{quote('agent_node_id')} = %s"
    )


def key_params(key: ConversationKey) -> list[str | int]:
    return [key.workflow_id, key.generation, key.agent_node_id]


# The head's columns a provider call's pressure sets, and the ledger column the store decides.
PRESSURE_COLUMNS = ("last_input_tokens", "pressure_headroom_tokens", "context_window", "pressure_estimated")
CALL_DERIVED = {"owner_id": "w.owner_id"}


def check_call(
    call: Mapping[str, Any], pressure_of: ConversationKey | None, pressure: Mapping[str, Any]
) -> None:
    if set(call) & set(CALL_DERIVED):
        raise TypeError(f"the store decides the ledger columns {sorted(CALL_DERIVED)}")
    if pressure_of is not None and set(pressure) != set(PRESSURE_COLUMNS):
        raise TypeError(f"a call's pressure sets exactly {list(PRESSURE_COLUMNS)}")
    if pressure_of is not None and pressure_of.workflow_id != call.get("workflow_id"):
        raise TypeError("a call sets the pressure of its own workflow's conversation only")


class LockedAppend:
    """The append with the head row locked first (created for a first write): every check then reads
    what the lock's last holder left, so the answer is final. Call inside a transaction. Each store
    supplies the lock (`head_lock`) and the write under it (`_write_locked`)."""

    def head_lock(self, *, key: ConversationKey) -> AgentConversation | None:
        raise NotImplementedError

    def _write_locked(
        self,
        key: ConversationKey,
        row: AgentConversation,
        digests: list[str],
        batch: Batch,
        usage: TokenUsage | None,
        now: datetime,
    ) -> Head:
        """Store `batch` after the locked head `row` (`digests` chained on from it) and bump its counters."""
        raise NotImplementedError

    def _append_locked(
        self,
        *,
        key: ConversationKey,
        expected_length: int,
        expected_digest: str | None,
        batch: Batch,
        usage: TokenUsage | None,
        now: datetime,
    ) -> AppendAnswer:
        writes = bool(batch.wires) or usage is not None
        row = self.head_lock(key=key)
        if row is None and writes and expected_length == 0:
            row = self._head_create(key)
            if row is None:
                return workflow_gone()
        digest_before = None
        if row is not None and expected_digest is not None and 0 < expected_length < row.length:
            digest_before = (
                ConversationMessage.objects.filter(conversation=row, seq=expected_length - 1)
                .values_list("digest", flat=True)
                .first()
            )
        head = head_of(row) if row is not None else None
        refusal = append_check(
            head,
            digest_before=digest_before,
            expected_length=expected_length,
            expected_digest=expected_digest,
            batch=batch,
        )
        if refusal is not None:
            return refusal
        if row is None or not writes:
            return Unchanged(head_of(row))
        return Appended(
            self._write_locked(key, row, chain_digests(batch.encoded, row.head_digest), batch, usage, now)
        )

    def _head_create(self, key: ConversationKey) -> AgentConversation | None:
        """The head row of `key`, created and locked (None when the workflow is gone)."""
        owner_id = Workflow.objects.filter(pk=key.workflow_id).values_list("owner_id", flat=True).first()
        if owner_id is None:
            return None
        try:
            with transaction.atomic():
                return AgentConversation.objects.create(owner_id=owner_id, **key.filter_kwargs())
        except IntegrityError:
            # Another writer created it first; its commit released the unique index, now wait on its row.
            row = self.head_lock(key=key)
            if row is None:
                raise
            return row
