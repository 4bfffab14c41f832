"""The PostgreSQL memory store: remember in one hand-written statement, prepared on the connection
(`opencompany.core.db`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F

from memory.errors import MEMORY_QUOTA_EXCEEDED
from memory.models import MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.stores.base import (
    MemoryStore,
    Refused,
    Remembered,
    RememberOutcome,
    insert_columns,
    namespace_create,
    receipt_answer,
)
from opencompany.core.db import hot_fetchone

# How many times a remember runs its statement: a new namespace takes a second one; a third is for a
# namespace that changed between a statement and the read that followed it.
ATTEMPTS = 3


class PostgresMemoryStore(MemoryStore):
    """One statement takes the slot, claims the receipt and inserts the item and its revision, each
    only when the one before applied. When it writes nothing, the store reads why: the receipt's
    earlier request (replayed or refused), a full namespace (refused) or none yet (created, and the
    statement runs again)."""

    def remember(
        self,
        *,
        item: MemoryItem,
        revision: MemoryRevision,
        receipt: MemoryReceipt | None,
        limit: int,
        now: datetime,
    ) -> RememberOutcome:
        sql, params = self._statement(item=item, revision=revision, receipt=receipt, limit=limit, now=now)
        for _attempt in range(ATTEMPTS):
            row = hot_fetchone(sql, params)
            if row is not None and row[1] is not None:
                return Remembered(int(row[1]))
            if row is not None and row[0]:
                # A concurrent request claimed the same operation id between the check and the insert,
                # and the statement committed the slot on its own: give it back.
                MemoryNamespace.objects.filter(pk=item.namespace).update(item_count=F("item_count") - 1)
            if receipt is not None:
                existing = MemoryReceipt.objects.filter(
                    namespace=receipt.namespace, operation_id=receipt.operation_id
                ).first()
                if existing is not None:
                    return receipt_answer(existing, receipt)
            count = (
                MemoryNamespace.objects.filter(pk=item.namespace).values_list("item_count", flat=True).first()
            )
            if count is None:
                namespace_create(item, now)
            elif count >= limit:
                return Refused(MEMORY_QUOTA_EXCEEDED, {"limit": limit})
        raise RuntimeError("the memory namespace changed under every attempt to remember in it")

    @staticmethod
    def _statement(
        *,
        item: MemoryItem,
        revision: MemoryRevision,
        receipt: MemoryReceipt | None,
        limit: int,
        now: datetime,
    ) -> tuple[str, list[Any]]:
        namespace_table, receipt_table = MemoryNamespace._meta.db_table, MemoryReceipt._meta.db_table
        params: list[Any] = [now, item.namespace, limit]
        unclaimed = ""
        if receipt is not None:
            unclaimed = (
                f" AND NOT EXISTS (SELECT 1 FROM {receipt_table} WHERE namespace = %s AND operation_id = %s)"  # noqa: S608 - our table, values bound
            )
            params += [receipt.namespace, receipt.operation_id]
        parts = [
            f"ns AS (UPDATE {namespace_table} SET item_count = item_count + 1, updated_at = %s "  # noqa: S608 - our table, values bound
            f"WHERE id = %s AND item_count < %s{unclaimed} RETURNING 1)"
        ]
        source = "ns"
        if receipt is not None:
            receipt_columns, receipt_values = insert_columns(receipt)
            parts.append(
                f"r AS (INSERT INTO {receipt_table} ({', '.join(receipt_columns)}) "  # noqa: S608 - our table, values bound
                f"SELECT {', '.join(['%s'] * len(receipt_values))} FROM ns "
                "ON CONFLICT (namespace, operation_id) DO NOTHING RETURNING 1)"
            )
            params += receipt_values
            source = "r"
        item_columns, item_values = insert_columns(item)
        parts.append(
            f"it AS (INSERT INTO {MemoryItem._meta.db_table} ({', '.join(item_columns)}) "  # noqa: S608 - our table, values bound
            f"SELECT {', '.join(['%s'] * len(item_values))} FROM {source} RETURNING id)"
        )
        params += item_values
        revision_columns, revision_values = insert_columns(revision)
        parts.append(
            f"rv AS (INSERT INTO {MemoryRevision._meta.db_table} ({', '.join(revision_columns)}) "  # noqa: S608 - our table, values bound
            f"SELECT {', '.join(['%s'] * len(revision_values))} FROM it RETURNING 1)"
        )
        params += revision_values
        sql = "WITH " + ", ".join(parts) + " SELECT (SELECT count(*) FROM ns), (SELECT id FROM it)"  # noqa: S608
        return sql, params
