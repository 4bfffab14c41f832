"""The portable memory store: the ORM and plain SQL in one transaction, on SQLite and on PostgreSQL
(any database with `INSERT … ON CONFLICT DO NOTHING RETURNING`)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import F

from memory.errors import MEMORY_QUOTA_EXCEEDED
from memory.models import MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.stores.base import (
    MemoryStore,
    Refused,
    Remembered,
    RememberOutcome,
    namespace_create,
    receipt_answer,
    receipt_insert,
)


class PortableMemoryStore(MemoryStore):
    """Each step in order in one transaction (a savepoint inside the caller's): the receipt's claim,
    the quota slot, the item and its revision; a refusal rolls the claim back."""

    def remember(
        self,
        *,
        item: MemoryItem,
        revision: MemoryRevision,
        receipt: MemoryReceipt | None,
        limit: int,
        now: datetime,
    ) -> RememberOutcome:
        with transaction.atomic():
            if receipt is not None and not receipt_insert(receipt):
                # The id is taken (a concurrent claim of it waited on the unique index until that committed).
                existing = MemoryReceipt.objects.get(
                    namespace=receipt.namespace, operation_id=receipt.operation_id
                )
                return receipt_answer(existing, receipt)
            if not self._take_slot(item, limit, now):
                namespace_create(item, now)
                if not self._take_slot(item, limit, now):
                    transaction.set_rollback(True)  # gives the receipt's claim back
                    return Refused(MEMORY_QUOTA_EXCEEDED, {"limit": limit})
            item.save(force_insert=True)
            revision.save(force_insert=True)
        return Remembered(item.pk)

    @staticmethod
    def _take_slot(item: MemoryItem, limit: int, now: datetime) -> int:
        """Count one more item against the quota in a single conditional UPDATE (no check-then-act)."""
        return MemoryNamespace.objects.filter(pk=item.namespace, item_count__lt=limit).update(
            item_count=F("item_count") + 1, updated_at=now
        )
