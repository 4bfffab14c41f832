"""Counts of what Memory keeps, read before a destructive or moving action so its confirmation page can
say what it will touch: a workflow's Memory (`graphs.hooks` inventory), Clear Memory and the expiry
purge. Removing an item also erases the content of its revisions and writes a tombstone revision
(`memory.services`): those rows are counted too."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from graphs.hooks import InventoryLine
from memory.models import MemoryEmbedding, MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision


def memory_inventory(*, owner_id: int, workflow_ids: list[str]) -> list[InventoryLine]:
    """Inventory (`graphs.hooks`): the owner's Memory of these workflows (expired items included) with
    every revision, receipt and embedding of its namespaces, as the eraser and the owner-change hook
    select them."""
    ids = list(workflow_ids)
    items = MemoryItem.objects.filter(owner_id=owner_id, workflow_id__in=ids)
    namespaces = sorted(
        set(
            MemoryNamespace.objects.filter(owner_id=owner_id, workflow_id__in=ids).values_list(
                "pk", flat=True
            )
        )
        | set(items.values_list("namespace", flat=True))
    )
    return [
        InventoryLine("memory", "namespaces", "Memory namespaces", len(namespaces)),
        InventoryLine("memory", "items", "Memory items", items.count()),
        InventoryLine(
            "memory",
            "revisions",
            "Memory revisions (history)",
            MemoryRevision.objects.filter(namespace__in=namespaces).count(),
        ),
        InventoryLine(
            "memory",
            "receipts",
            "Memory receipts (idempotency ledger)",
            MemoryReceipt.objects.filter(namespace__in=namespaces).count(),
        ),
        InventoryLine(
            "memory",
            "embeddings",
            "Memory embeddings",
            MemoryEmbedding.objects.filter(namespace__in=namespaces).count(),
        ),
    ]


def _removal_lines(items: QuerySet[MemoryItem], what: str) -> list[InventoryLine]:
    pairs = list(items.values_list("namespace", "memory_id"))
    revisions = 0
    by_namespace: dict[str, list[str]] = {}
    for namespace, memory_id in pairs:
        by_namespace.setdefault(namespace, []).append(memory_id)
    for namespace, memory_ids in sorted(by_namespace.items()):
        for start in range(0, len(memory_ids), 500):
            revisions += MemoryRevision.objects.filter(
                namespace=namespace,
                memory_id__in=memory_ids[start : start + 500],  # type: ignore[misc]
            ).count()
    return [
        InventoryLine("memory", "items", what, len(pairs)),
        InventoryLine("memory", "revisions_erased", "Revisions whose content is erased", revisions),
        InventoryLine("memory", "tombstones", "Removal records written (no content)", len(pairs)),
        InventoryLine(
            "memory",
            "embeddings",
            "Embeddings removed",
            MemoryEmbedding.objects.filter(item__in=items).count(),
        ),
    ]


def memory_clear_inventory(*, namespace: str) -> list[InventoryLine]:
    """What Clear Memory does to one namespace: every item goes (expired ones too), the content of
    their revisions is erased, a removal record is written per item. Context is not touched."""
    return _removal_lines(MemoryItem.objects.filter(namespace=namespace), "Memory items removed")


def memory_purge_inventory(*, now: datetime | None = None) -> list[InventoryLine]:
    """What `memory_purge_expired` does: every item past its expiry, in every namespace, goes as
    Clear Memory's do."""
    now = now or timezone.now()
    return _removal_lines(
        MemoryItem.objects.filter(expires_at__lte=now), "Expired Memory items removed (every workflow)"
    )
