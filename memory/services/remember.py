"""Remember: a new item, version 1, written whole by the memory store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from memory import fields as f
from memory.errors import (
    IDEMPOTENCY_KEY_REUSED,
    MEMORY_QUOTA_EXCEEDED,
    idempotency_key_reused,
    quota_exceeded,
)
from memory.models import IndexingState, MemoryItem, MemoryReceipt, MemoryRevision
from memory.scope import MemoryScope
from memory.selectors import memory_view
from memory.services._common import (
    MemoryResult,
    Receipt,
    _initial_indexing_state,
    _publish,
    _receipt_meta,
    _replay_item,
    _revision_from,
)
from memory.services.maintenance import _schedule_embedding
from memory.stores import Refused, Remembered, Replay, memory_store
from opencompany.core.errors import ApplicationError
from opencompany.core.ids import mint_id
from opencompany.core.json import fingerprint

# --- entry points ----------------------------------------------------------------------------


def memory_remember(
    *,
    scope: MemoryScope,
    content: str,
    actor: str,
    title: str | None = None,
    category: str | None = None,
    tags: list[str] | None = None,
    expires_at: datetime | str | None = None,
    operation_id: str | None = None,
) -> MemoryResult:
    """Store a new item (version 1) in the scope. `memory_quota_exceeded` past
    `OPENCOMPANY_MEMORY_MAX_ITEMS` items in the namespace.

    The store writes it all or nothing (one statement on PostgreSQL in the common case) and answers
    what happened: the new item, the replay of the same request under `operation_id`
    (`applied: false`, no event) or a refusal (`idempotency_key_reused`, `memory_quota_exceeded`),
    which writes nothing.
    """
    draft = _draft(
        scope=scope,
        content=content,
        actor=actor,
        title=title,
        category=category,
        tags=tags,
        expires_at=expires_at,
        operation_id=operation_id,
    )
    outcome = memory_store().remember(
        item=draft.item,
        revision=draft.revision,
        receipt=draft.receipt,
        limit=int(settings.OPENCOMPANY_MEMORY_MAX_ITEMS),
        now=draft.now,
    )
    match outcome:
        case Remembered(pk=pk):
            draft.item.pk = pk
            return _remembered(scope, draft)
        case Replay(receipt=receipt):
            return _replay_item(receipt, receipt.operation_id)
        case Refused(code=code, extra=extra):
            raise _refusal(code, extra)


# --- internals -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Draft:
    """A cleaned remember request and the rows it writes, not yet saved."""

    item: MemoryItem
    revision: MemoryRevision
    receipt: MemoryReceipt | None
    operation_id: str | None
    fingerprint: str
    view: dict[str, Any]
    now: datetime


def _draft(
    *,
    scope: MemoryScope,
    content: str,
    actor: str,
    title: str | None,
    category: str | None,
    tags: list[str] | None,
    expires_at: datetime | str | None,
    operation_id: str | None,
) -> _Draft:
    actor = f.clean_actor(actor)
    operation_id = f.clean_operation_id(operation_id)
    clean_tags = f.clean_tags(tags)
    clean_expiry = f.clean_expires_at(expires_at)
    clean: dict[str, Any] = {
        "content": f.clean_content(content),
        "title": f.clean_title(title),
        "category": f.clean_category(category),
        "tags": clean_tags,
        "expires_at": clean_expiry,
    }
    request_fp = fingerprint(
        {"operation": "remember", **clean, "expires_at": clean_expiry.isoformat() if clean_expiry else None}
    )
    now = timezone.now()
    item = MemoryItem(
        memory_id=mint_id("mem"),
        namespace=scope.namespace,
        owner_id=scope.owner_id,
        workflow_id=scope.workflow_id,
        memory_node_id=scope.memory_node_id,
        tag_index=f.tag_index(clean_tags),
        version=1,
        indexing_state=_initial_indexing_state(),
        created_at=now,
        updated_at=now,
        created_by=actor,
        updated_by=actor,
        **clean,
    )
    view = memory_view(item)
    receipt = None
    if operation_id is not None:
        receipt = MemoryReceipt(
            namespace=scope.namespace,
            workflow_id=scope.workflow_id,
            operation_id=operation_id,
            operation="remember",
            fingerprint=request_fp,
            result=_receipt_meta(view, operation="remember", revision_version=1),
            created_at=now,
        )
    return _Draft(
        item=item,
        revision=_revision_from(item, operation="remember", actor=actor, at=now, version=1),
        receipt=receipt,
        operation_id=operation_id,
        fingerprint=request_fp,
        view=view,
        now=now,
    )


def _refusal(code: str, extra: dict[str, Any]) -> ApplicationError:
    """The error a refused remember raises, with its message."""
    if code == IDEMPOTENCY_KEY_REUSED:
        return idempotency_key_reused()
    if code == MEMORY_QUOTA_EXCEEDED:
        return quota_exceeded(limit=int(extra["limit"]))
    raise ValueError(f"unknown remember refusal {code!r}")


def _remembered(scope: MemoryScope, draft: _Draft) -> MemoryResult:
    """The answer to an applied remember, with its event and embedding scheduled after commit."""
    _publish(scope, "remember", draft.item.memory_id, 1)
    if draft.item.indexing_state == IndexingState.PENDING:
        _schedule_embedding([draft.item.pk])
    return MemoryResult("remember", draft.view, Receipt(draft.operation_id, applied=True))
