"""What a memory store promises, whatever the database, and what it answers.

A store performs a whole remember on its database and answers what happened: `Remembered` (the new
item's key), `Replay` (the receipt of the same request, made earlier) or `Refused` (a code and its
extra, no row written). The services keep the rules, the events and the refusal messages; they never
write after a store answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import connection

from memory.errors import IDEMPOTENCY_KEY_REUSED
from memory.models import MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from opencompany.core.errors import Refused


@dataclass(frozen=True, slots=True)
class Remembered:
    """The item and its first revision are written (and the receipt, when one was given)."""

    pk: int


@dataclass(frozen=True, slots=True)
class Replay:
    """The same request was remembered before under this operation id: nothing was written."""

    receipt: MemoryReceipt


type RememberOutcome = Remembered | Replay | Refused


class MemoryStore(Protocol):
    """What the remember service needs from the database, whatever it is."""

    def remember(
        self,
        *,
        item: MemoryItem,
        revision: MemoryRevision,
        receipt: MemoryReceipt | None,
        limit: int,
        now: datetime,
    ) -> RememberOutcome:
        """Remember `item` and its first `revision` in its namespace, all or nothing, inside or
        outside a transaction.

        With a `receipt`, its `(namespace, operation_id)` is claimed first: when an earlier request
        holds it, the answer is `Replay` (same fingerprint) or `Refused(idempotency_key_reused)`.
        The namespace is created by its first item; one holding `limit` items answers
        `Refused(memory_quota_exceeded, {"limit": limit})`. Otherwise one quota slot is taken and
        the receipt, the item and the revision are inserted: `Remembered(pk)`.
        """
        ...


def insert_columns(obj: Any) -> tuple[list[str], list[Any]]:
    """Column names and database values of a model instance, without its auto primary key."""
    columns: list[str] = []
    values: list[Any] = []
    for model_field in type(obj)._meta.concrete_fields:
        if model_field.primary_key and getattr(obj, model_field.attname) is None:
            continue  # an auto primary key: the database assigns it
        columns.append(connection.ops.quote_name(model_field.column))
        values.append(model_field.get_db_prep_save(getattr(obj, model_field.attname), connection))
    return columns, values


def receipt_insert(receipt: MemoryReceipt) -> bool:
    """Insert `receipt` unless its `(namespace, operation_id)` is taken: True when this call inserted it.

    The unique index decides in one round trip, without a savepoint; a concurrent insert of the same
    key waits on the index until the first one commits or rolls back.
    """
    columns, values = insert_columns(receipt)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(MemoryReceipt._meta.db_table)} ({', '.join(columns)}) "  # noqa: S608 - our table, values bound
            f"VALUES ({', '.join(['%s'] * len(values))}) "
            "ON CONFLICT (namespace, operation_id) DO NOTHING RETURNING id",
            values,
        )
        return cursor.fetchone() is not None


def receipt_answer(existing: MemoryReceipt, receipt: MemoryReceipt) -> Replay | Refused:
    """The answer to a request whose operation id `existing` already holds: its replay when it is
    the same request, else `idempotency_key_reused`."""
    if existing.fingerprint != receipt.fingerprint:
        return Refused(IDEMPOTENCY_KEY_REUSED)
    return Replay(existing)


def namespace_create(item: MemoryItem, now: datetime) -> None:
    """Create the namespace of `item` (empty) unless it exists."""
    MemoryNamespace.objects.bulk_create(
        [
            MemoryNamespace(
                id=item.namespace,
                owner_id=item.owner_id,
                workflow_id=item.workflow_id,
                memory_node_id=item.memory_node_id,
                created_at=now,
                updated_at=now,
            )
        ],
        ignore_conflicts=True,
    )
