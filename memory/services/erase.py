"""Erasure of the Memory kept for deleted workflows (a registered `graphs` eraser)."""

from __future__ import annotations

from memory.models import MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision


def memory_erase(*, owner_id: int, workflow_ids: list[str] | None) -> dict[str, int]:
    """Delete the owner's Memory of these workflows (all of the owner's with `workflow_ids=None`):
    items with their embeddings and full-text rows, revisions, receipts and namespaces. Call inside the
    deleting transaction."""
    namespaces = MemoryNamespace.objects.filter(owner_id=owner_id)
    items = MemoryItem.objects.filter(owner_id=owner_id)
    if workflow_ids is not None:
        namespaces = namespaces.filter(workflow_id__in=list(workflow_ids))
        items = items.filter(workflow_id__in=list(workflow_ids))
    namespace_ids = sorted(
        set(namespaces.values_list("id", flat=True)) | set(items.values_list("namespace", flat=True))
    )
    erased_items = items.count()
    items.delete()
    revisions = receipts = 0
    for start in range(0, len(namespace_ids), 500):
        chunk = namespace_ids[start : start + 500]
        revisions += MemoryRevision.objects.filter(namespace__in=chunk).delete()[0]
        receipts += MemoryReceipt.objects.filter(namespace__in=chunk).delete()[0]
    erased_namespaces, _ = MemoryNamespace.objects.filter(pk__in=namespace_ids).delete()
    return {
        "items": erased_items,
        "revisions": revisions,
        "receipts": receipts,
        "namespaces": erased_namespaces,
    }
