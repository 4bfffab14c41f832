"""Owner change: a workflow's Memory namespaces move to the namespaces derived for its new owner."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from graphs.hooks import OwnerChange
from memory.models import MemoryEmbedding, MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.scope import namespace_for


@transaction.atomic
def memory_namespaces_move(*, workflow_id: str, old_owner_id: int, new_owner_id: int) -> dict[str, int]:
    """Re-key every Memory namespace of the workflow from the old owner's derivation to the new
    owner's: items (and their owner), revisions, receipts and embeddings follow, and each namespace row
    is replaced with the new owner's, its count recounted. Recall and the tool then find the items
    under the new owner as they did under the old one. Returns `{namespaces, items}` moved.

    Call inside the transaction that locked the workflow row (`workflow_transfer`)."""
    nodes = set(
        MemoryNamespace.objects.select_for_update()
        .filter(workflow_id=workflow_id, owner_id=old_owner_id)
        .order_by("pk")
        .values_list("memory_node_id", flat=True)
    )
    nodes |= set(
        MemoryItem.objects.filter(workflow_id=workflow_id, owner_id=old_owner_id)
        .values_list("memory_node_id", flat=True)
        .distinct()
    )
    now = timezone.now()
    moved_items = 0
    for node in sorted(nodes):
        old = namespace_for(owner_id=old_owner_id, workflow_id=workflow_id, memory_node_id=node)
        new = namespace_for(owner_id=new_owner_id, workflow_id=workflow_id, memory_node_id=node)
        moved_items += MemoryItem.objects.filter(namespace=old).update(namespace=new, owner_id=new_owner_id)
        MemoryRevision.objects.filter(namespace=old).update(namespace=new)
        MemoryEmbedding.objects.filter(namespace=old).update(namespace=new)
        # A receipt id the new namespace already holds keeps that receipt (ids are unique per namespace).
        taken = MemoryReceipt.objects.filter(namespace=new).values("operation_id")
        MemoryReceipt.objects.filter(namespace=old, operation_id__in=taken).delete()
        MemoryReceipt.objects.filter(namespace=old).update(namespace=new)
        created_at = (
            MemoryNamespace.objects.filter(pk=old).values_list("created_at", flat=True).first() or now
        )
        MemoryNamespace.objects.filter(pk=old).delete()
        MemoryNamespace.objects.bulk_create(
            [
                MemoryNamespace(
                    id=new,
                    owner_id=new_owner_id,
                    workflow_id=workflow_id,
                    memory_node_id=node,
                    created_at=created_at,
                    updated_at=now,
                )
            ],
            ignore_conflicts=True,
        )
        count = MemoryItem.objects.filter(namespace=new).aggregate(n=Count("pk"))["n"]
        MemoryNamespace.objects.filter(pk=new).update(item_count=count, updated_at=now)
    return {"namespaces": len(nodes), "items": moved_items}


def memory_owner_change_hook(change: OwnerChange) -> dict[str, Any]:
    """Owner-change hook (`graphs.hooks`): Memory goes with the workflow."""
    return memory_namespaces_move(
        workflow_id=change.workflow_id, old_owner_id=change.old_owner_id, new_owner_id=change.new_owner_id
    )
