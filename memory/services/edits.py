"""Update, forget and clear: version-checked changes to existing items, each with its revision."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from memory import fields as f
from memory.errors import invalid_field, item_not_found, version_conflict
from memory.models import IndexingState, MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.scope import MemoryScope
from memory.selectors import active_q, memory_view
from memory.services._common import (
    ClearResult,
    MemoryResult,
    Receipt,
    _claim_receipt,
    _ensure_namespace,
    _initial_indexing_state,
    _publish,
    _receipt_meta,
    _remove_items,
    _replay_item,
    _revision_from,
)
from memory.services.maintenance import _schedule_embedding
from opencompany.core.json import fingerprint


def _clean_patch(patch: Any) -> dict[str, Any]:
    if not isinstance(patch, dict):
        raise invalid_field("patch", "Must be an object.")
    unknown = sorted(set(patch) - f.PATCH_FIELDS)
    if unknown:
        raise invalid_field(f"patch.{unknown[0]}", "Unknown field.")
    if not patch:
        raise invalid_field("patch", "Send at least one field to change.")
    out: dict[str, Any] = {}
    if "content" in patch:
        out["content"] = f.clean_content(patch["content"], field="patch.content")
    if "title" in patch:
        out["title"] = f.clean_title(patch["title"], field="patch.title")
    if "category" in patch:
        out["category"] = f.clean_category(patch["category"], field="patch.category")
    if "tags" in patch:
        out["tags"] = f.clean_tags(patch["tags"], field="patch.tags", max_len=f.PATCH_TAG_MAX)
    if "expires_at" in patch:
        out["expires_at"] = f.clean_expires_at(patch["expires_at"], field="patch.expires_at")
    return out


@transaction.atomic
def memory_update(
    *,
    scope: MemoryScope,
    memory_id: str,
    expected_version: int,
    patch: dict[str, Any],
    actor: str,
    operation_id: str | None = None,
) -> MemoryResult:
    """Change only the fields present in `patch` of an active item whose version is
    `expected_version`; the version goes up by one. A stale version is `version_conflict` with
    `extra.current_version`; an expired or missing item is `not_found`; `content: null` is refused."""
    actor = f.clean_actor(actor)
    operation_id = f.clean_operation_id(operation_id)
    memory_id = f.clean_memory_id(memory_id)
    expected_version = f.clean_version(expected_version)
    changes = _clean_patch(patch)
    request_fp = fingerprint(
        {
            "operation": "update",
            "memory_id": memory_id,
            "expected_version": expected_version,
            "patch": {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in changes.items()},
        }
    )
    now = timezone.now()
    replay = None
    if operation_id is not None:
        replay = _claim_receipt(
            scope=scope,
            operation_id=operation_id,
            operation="update",
            request_fingerprint=request_fp,
            result={
                "operation": "update",
                "memory_id": memory_id,
                "version": expected_version + 1,
                "revision_version": expected_version + 1,
            },
        )
    if replay is not None and operation_id is not None:
        return _replay_item(replay, operation_id)
    values = dict(changes)
    if "tags" in values:
        values["tag_index"] = f.tag_index(values["tags"])
    if {"content", "title", "category", "tags"} & set(values):
        values["indexing_state"] = _initial_indexing_state()
    updated = (
        MemoryItem.objects.filter(namespace=scope.namespace, memory_id=memory_id, version=expected_version)
        .filter(active_q(now))
        .update(**values, version=F("version") + 1, updated_at=now, updated_by=actor)
    )
    if not updated:
        current = (
            MemoryItem.objects.filter(namespace=scope.namespace, memory_id=memory_id)
            .filter(active_q(now))
            .values_list("version", flat=True)
            .first()
        )
        if current is None:
            raise item_not_found()
        raise version_conflict(expected=expected_version, current=current)
    item = MemoryItem.objects.get(namespace=scope.namespace, memory_id=memory_id)
    _revision_from(item, operation="update", actor=actor, at=now, version=item.version).save(
        force_insert=True
    )
    view = memory_view(item)
    if operation_id is not None:
        MemoryReceipt.objects.filter(namespace=scope.namespace, operation_id=operation_id).update(
            result=_receipt_meta(view, operation="update", revision_version=item.version)
        )
    _publish(scope, "update", item.memory_id, item.version)
    if item.indexing_state == IndexingState.PENDING:
        _schedule_embedding([item.pk])
    return MemoryResult("update", view, Receipt(operation_id, applied=True))


@transaction.atomic
def memory_forget(
    *,
    scope: MemoryScope,
    memory_id: str,
    expected_version: int,
    actor: str,
    operation_id: str | None = None,
) -> MemoryResult:
    """Remove an item (expired ones too) whose version is `expected_version`. Its revisions stay, with
    their content erased, and a tombstone revision (`version + 1`, operation `forget`) records the
    removal. The answer shows the item as it was, once."""
    actor = f.clean_actor(actor)
    operation_id = f.clean_operation_id(operation_id)
    memory_id = f.clean_memory_id(memory_id)
    expected_version = f.clean_version(expected_version)
    request_fp = fingerprint(
        {"operation": "forget", "memory_id": memory_id, "expected_version": expected_version}
    )
    replay = None
    if operation_id is not None:
        replay = _claim_receipt(
            scope=scope,
            operation_id=operation_id,
            operation="forget",
            request_fingerprint=request_fp,
            result={
                "operation": "forget",
                "memory_id": memory_id,
                "version": expected_version,
                "revision_version": expected_version + 1,
            },
        )
    if replay is not None and operation_id is not None:
        return _replay_item(replay, operation_id)
    item = (
        MemoryItem.objects.select_for_update().filter(namespace=scope.namespace, memory_id=memory_id).first()
    )
    if item is None:
        raise item_not_found()
    if item.version != expected_version:
        raise version_conflict(expected=expected_version, current=item.version)
    now = timezone.now()
    view = memory_view(item)
    _remove_items([item], operation=MemoryRevision.Operation.FORGET, actor=actor, now=now)
    MemoryNamespace.objects.filter(pk=scope.namespace).update(item_count=F("item_count") - 1, updated_at=now)
    if operation_id is not None:
        MemoryReceipt.objects.filter(namespace=scope.namespace, operation_id=operation_id).update(
            result=_receipt_meta(view, operation="forget", revision_version=item.version + 1)
        )
    _publish(scope, "forget", item.memory_id, item.version)
    return MemoryResult("forget", view, Receipt(operation_id, applied=True))


@transaction.atomic
def memory_clear(*, scope: MemoryScope, actor: str, operation_id: str | None = None) -> ClearResult:
    """Remove every item of the namespace (expired ones too), each with a tombstone revision, and erase
    the content of their revisions. Items only: conversations (Context) are not touched."""
    actor = f.clean_actor(actor)
    operation_id = f.clean_operation_id(operation_id)
    replay = _claim_receipt(
        scope=scope,
        operation_id=operation_id,
        operation="clear",
        request_fingerprint=fingerprint({"operation": "clear"}),
        result={"operation": "clear", "cleared": 0},
    )
    if replay is not None:
        return ClearResult(int(replay.result.get("cleared", 0)), Receipt(operation_id, applied=False))
    now = timezone.now()
    _ensure_namespace(scope, now)
    MemoryNamespace.objects.select_for_update().filter(pk=scope.namespace).get()
    items = list(MemoryItem.objects.filter(namespace=scope.namespace).order_by("pk"))
    cleared = _remove_items(items, operation=MemoryRevision.Operation.CLEAR, actor=actor, now=now)
    MemoryNamespace.objects.filter(pk=scope.namespace).update(item_count=0, updated_at=now)
    if operation_id is not None:
        MemoryReceipt.objects.filter(namespace=scope.namespace, operation_id=operation_id).update(
            result={"operation": "clear", "cleared": cleared}
        )
    _publish(scope, "clear", None, None)
    return ClearResult(cleared, Receipt(operation_id, applied=True))
