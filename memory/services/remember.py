"""Remember: a new item, version 1 (one statement on PostgreSQL in the common case)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from memory import fields as f
from memory.models import IndexingState, MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.scope import MemoryScope
from memory.selectors import memory_view
from memory.services._common import (
    MemoryResult,
    Receipt,
    _claim_receipt,
    _initial_indexing_state,
    _publish,
    _receipt_meta,
    _replay_item,
    _reserve_slot,
    _revision_from,
)
from memory.services.maintenance import _schedule_embedding
from opencompany.core.db import hot_fetchone
from opencompany.core.ids import mint_id
from opencompany.core.json import fingerprint

# --- entry points ----------------------------------------------------------------------------


def _insert_columns(obj: Any) -> tuple[list[str], list[Any]]:
    """Column names and database values of a model instance, without its auto primary key."""
    columns: list[str] = []
    values: list[Any] = []
    for field in type(obj)._meta.concrete_fields:
        if field.primary_key and getattr(obj, field.attname) is None:
            continue  # an auto primary key: the database assigns it
        columns.append(connection.ops.quote_name(field.column))
        values.append(field.get_db_prep_save(getattr(obj, field.attname), connection))
    return columns, values


def _remember_one_statement(
    *,
    scope: MemoryScope,
    item: MemoryItem,
    revision: MemoryRevision,
    operation_id: str | None,
    request_fp: str,
    receipt_result: dict[str, Any],
    now: datetime,
) -> int | None:
    """PostgreSQL: take a quota slot, claim the receipt, insert the item and its first revision in one
    statement, each step only if the one before applied (so the statement is all or nothing even in
    autocommit). Returns the new item's pk, or None when it did not apply (new or full namespace, a
    receipt already there); the caller then takes the general path."""
    namespace_table, receipt_table = MemoryNamespace._meta.db_table, MemoryReceipt._meta.db_table
    params: list[Any] = [now, scope.namespace, int(settings.OPENCOMPANY_MEMORY_MAX_ITEMS)]
    unclaimed = ""
    if operation_id is not None:
        unclaimed = (
            f" AND NOT EXISTS (SELECT 1 FROM {receipt_table} WHERE namespace = %s AND operation_id = %s)"  # noqa: S608
        )
        params += [scope.namespace, operation_id]
    parts = [
        f"ns AS (UPDATE {namespace_table} SET item_count = item_count + 1, updated_at = %s "  # noqa: S608 - our tables
        f"WHERE id = %s AND item_count < %s{unclaimed} RETURNING 1)"
    ]
    source = "ns"
    if operation_id is not None:
        parts.append(
            f"r AS (INSERT INTO {receipt_table} "  # noqa: S608 - our table names, values bound
            "(namespace, workflow_id, operation_id, operation, fingerprint, result, created_at) "
            "SELECT %s, %s, %s, %s, %s, %s, %s FROM ns ON CONFLICT (namespace, operation_id) DO NOTHING RETURNING 1)"
        )
        params += [
            scope.namespace,
            scope.workflow_id,
            operation_id,
            "remember",
            request_fp,
            MemoryReceipt._meta.get_field("result").get_db_prep_value(receipt_result, connection),
            now,
        ]
        source = "r"
    item_columns, item_values = _insert_columns(item)
    parts.append(
        f"it AS (INSERT INTO {MemoryItem._meta.db_table} ({', '.join(item_columns)}) "  # noqa: S608
        f"SELECT {', '.join(['%s'] * len(item_values))} FROM {source} RETURNING id)"
    )
    params += item_values
    revision_columns, revision_values = _insert_columns(revision)
    parts.append(
        f"rv AS (INSERT INTO {MemoryRevision._meta.db_table} ({', '.join(revision_columns)}) "  # noqa: S608
        f"SELECT {', '.join(['%s'] * len(revision_values))} FROM it RETURNING 1)"
    )
    params += revision_values
    sql = "WITH " + ", ".join(parts) + " SELECT (SELECT count(*) FROM ns), (SELECT id FROM it)"  # noqa: S608
    row = hot_fetchone(sql, params)
    if row is not None and row[1] is not None:
        return int(row[1])
    if row is not None and row[0]:
        # A concurrent request claimed the same operation id between the check and the insert:
        # give the slot back; the general path replays that request's result.
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {namespace_table} SET item_count = item_count - 1 WHERE id = %s",  # noqa: S608
                [scope.namespace],
            )
    return None


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

    On PostgreSQL the common case (a new receipt, room in an existing namespace) is one statement, one
    round trip; anything else (a replay, a reused key, a full or new namespace) writes nothing there and
    is answered by the general path in its own transaction.
    """
    args = (scope, content, actor, title, category, tags, expires_at, operation_id)
    if connection.vendor == "postgresql":
        fast = _remember(*args, fast=True)  # one statement: atomic on its own
        if fast is not None:
            return fast
    with transaction.atomic():
        result = _remember(*args, fast=False)
    assert result is not None  # noqa: S101 - the general path always answers or raises
    return result


def _remember(
    scope: MemoryScope,
    content: str,
    actor: str,
    title: str | None,
    category: str | None,
    tags: list[str] | None,
    expires_at: datetime | str | None,
    operation_id: str | None,
    *,
    fast: bool,
) -> MemoryResult | None:
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
    receipt_result = _receipt_meta(view, operation="remember", revision_version=1)
    if fast:
        pk = _remember_one_statement(
            scope=scope,
            item=item,
            revision=_revision_from(item, operation="remember", actor=actor, at=now, version=1),
            operation_id=operation_id,
            request_fp=request_fp,
            receipt_result=receipt_result,
            now=now,
        )
        if pk is None:
            return None
        item.pk = pk
        _publish(scope, "remember", item.memory_id, 1)
        if item.indexing_state == IndexingState.PENDING:
            _schedule_embedding([item.pk])
        return MemoryResult("remember", view, Receipt(operation_id, applied=True))
    replay = _claim_receipt(
        scope=scope,
        operation_id=operation_id,
        operation="remember",
        request_fingerprint=request_fp,
        result=receipt_result,
    )
    if replay is not None and operation_id is not None:
        return _replay_item(replay, operation_id)
    _reserve_slot(scope, now)
    item.save(force_insert=True)
    _revision_from(item, operation="remember", actor=actor, at=now, version=1).save(force_insert=True)
    _publish(scope, "remember", item.memory_id, 1)
    if item.indexing_state == IndexingState.PENDING:
        _schedule_embedding([item.pk])
    return MemoryResult("remember", view, Receipt(operation_id, applied=True))
