"""What the Memory writes share: their results, the actor names, and the plain helpers they call
(receipts, the quota, revisions, the after-commit event). The entry points own the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from memory import embeddings as emb
from memory.errors import idempotency_key_reused
from memory.models import IndexingState, MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.scope import MemoryScope
from memory.selectors import memory_view, revision_view
from memory.stores import receipt_insert
from opencompany.core.events import owner_group, publish_on_commit

EVENT_TYPE = "memory.updated"


@dataclass(frozen=True)
class Receipt:
    operation_id: str | None
    applied: bool

    def as_dict(self) -> dict[str, Any]:
        return {"operation_id": self.operation_id, "applied": self.applied}


@dataclass(frozen=True)
class MemoryResult:
    """The answer of remember/update/forget: the item as it is after the mutation (forget: as it
    was when removed) and the receipt."""

    operation: str
    memory: dict[str, Any]
    receipt: Receipt

    def as_dict(self) -> dict[str, Any]:
        return {"operation": self.operation, "memory": self.memory, "receipt": self.receipt.as_dict()}


@dataclass(frozen=True)
class ClearResult:
    cleared: int
    receipt: Receipt

    def as_dict(self) -> dict[str, Any]:
        return {"operation": "clear", "cleared": self.cleared, "receipt": self.receipt.as_dict()}


def owner_actor(user: Any) -> str:
    """`owner:<id>`: the actor of an edit made where the owner works (the chat page, the API), whatever
    else the account may do."""
    return f"owner:{user.pk}"


def staff_actor(user: Any) -> str:
    """`staff:<id>`: the actor of an edit made in the admin."""
    return f"staff:{user.pk}"


# --- internals (plain helpers; the entry points own the transaction) -----------------------


def _publish(scope: MemoryScope, operation: str, memory_id: str | None, version: int | None) -> None:
    publish_on_commit(
        owner_group(scope.owner_id),
        EVENT_TYPE,
        {
            "workflow_id": scope.workflow_id,
            "memory_node_id": scope.memory_node_id,
            "operation": operation,
            "memory_id": memory_id,
            "version": version,
        },
    )


def _claim_receipt(
    *,
    scope: MemoryScope,
    operation_id: str | None,
    operation: str,
    request_fingerprint: str,
    result: dict[str, Any],
) -> MemoryReceipt | None:
    """Claim `(namespace, operation_id)` for this request. Returns None when claimed (or no id),
    else the earlier receipt to replay; a different request under the same id is refused.

    A concurrent claim of the same id waits on the unique index until the first commits, then
    replays it (or claims it, when the first rolled back)."""
    if operation_id is None:
        return None
    claim = MemoryReceipt(
        namespace=scope.namespace,
        workflow_id=scope.workflow_id,
        operation_id=operation_id,
        operation=operation,
        fingerprint=request_fingerprint,
        result=result,
        created_at=timezone.now(),
    )
    if receipt_insert(claim):
        return None
    existing = MemoryReceipt.objects.get(namespace=scope.namespace, operation_id=operation_id)
    if existing.fingerprint != request_fingerprint:
        raise idempotency_key_reused()
    return existing


def _replay_item(receipt: MemoryReceipt, operation_id: str) -> MemoryResult:
    """Rebuild the first result from the receipt's metadata and the revision it recorded."""
    meta = receipt.result
    memory_id, version = meta["memory_id"], int(meta["version"])
    item = MemoryItem.objects.filter(
        memory_id=memory_id, namespace=receipt.namespace, version=version
    ).first()
    if item is not None and receipt.operation != "forget":
        view = memory_view(item)
    else:
        revision = MemoryRevision.objects.get(memory_id=memory_id, version=int(meta["revision_version"]))
        view = revision_view(revision)
        view = {
            "id": memory_id,
            "title": view["title"],
            "content": view["content"],
            "category": view["category"],
            "tags": view["tags"],
            "version": version,
            "expires_at": view["expires_at"],
            "created_at": meta.get("created_at"),
            "updated_at": meta.get("updated_at"),
            "created_by": meta.get("created_by"),
            "updated_by": meta.get("updated_by"),
            "indexing_state": meta.get("indexing_state"),
        }
    return MemoryResult(receipt.operation, view, Receipt(operation_id, applied=False))


def _receipt_meta(view: dict[str, Any], *, operation: str, revision_version: int) -> dict[str, Any]:
    """What a receipt keeps: ids, versions, timestamps and actors, never title/content/tags."""
    return {
        "operation": operation,
        "memory_id": view["id"],
        "version": view["version"],
        "revision_version": revision_version,
        "created_at": view["created_at"],
        "updated_at": view["updated_at"],
        "created_by": view["created_by"],
        "updated_by": view["updated_by"],
        "indexing_state": view["indexing_state"],
    }


def _ensure_namespace(scope: MemoryScope, now: datetime) -> None:
    MemoryNamespace.objects.bulk_create(
        [
            MemoryNamespace(
                id=scope.namespace,
                owner_id=scope.owner_id,
                workflow_id=scope.workflow_id,
                memory_node_id=scope.memory_node_id,
                created_at=now,
                updated_at=now,
            )
        ],
        ignore_conflicts=True,
    )


def _revision_from(
    item: MemoryItem, *, operation: str, actor: str, at: datetime, version: int
) -> MemoryRevision:
    return MemoryRevision(
        memory_id=item.memory_id,
        namespace=item.namespace,
        workflow_id=item.workflow_id,
        memory_node_id=item.memory_node_id,
        version=version,
        operation=operation,
        title=item.title,
        content=item.content,
        category=item.category,
        tags=list(item.tags or []),
        expires_at=item.expires_at,
        actor=actor,
        created_at=at,
    )


def _initial_indexing_state() -> str:
    return IndexingState.PENDING if emb.get_embedder() is not None else IndexingState.LEXICAL


def _tombstone(item: MemoryItem, *, operation: str, actor: str, at: datetime) -> MemoryRevision:
    """The revision recording a removal: who, when, the version and the operation; no content."""
    return MemoryRevision(
        memory_id=item.memory_id,
        namespace=item.namespace,
        workflow_id=item.workflow_id,
        memory_node_id=item.memory_node_id,
        version=item.version + 1,
        operation=operation,
        title=None,
        content=None,
        category=None,
        tags=[],
        expires_at=None,
        actor=actor,
        created_at=at,
    )


def _erase_revisions(namespace: str, memory_ids: list[str]) -> int:
    """Erase the content of every revision of these items (removed items keep no text anywhere)."""
    erased = 0
    for start in range(0, len(memory_ids), 500):
        erased += MemoryRevision.objects.filter(
            namespace=namespace,
            memory_id__in=memory_ids[start : start + 500],  # type: ignore[misc]
        ).update(title=None, content=None, category=None, tags=[], expires_at=None)
    return erased


def _remove_items(items: list[MemoryItem], *, operation: str, actor: str, now: datetime) -> int:
    """Erase the revisions of these items, tombstone and delete them (call inside the transaction that
    locked their namespace or the items)."""
    if not items:
        return 0
    by_namespace: dict[str, list[str]] = {}
    for item in items:
        by_namespace.setdefault(item.namespace, []).append(item.memory_id)
    for namespace, memory_ids in sorted(by_namespace.items()):
        _erase_revisions(namespace, memory_ids)
    MemoryRevision.objects.bulk_create(
        [_tombstone(i, operation=operation, actor=actor, at=now) for i in items], batch_size=500
    )
    pks = [i.pk for i in items]
    for start in range(0, len(pks), 500):
        MemoryItem.objects.filter(pk__in=pks[start : start + 500]).delete()
    return len(pks)
