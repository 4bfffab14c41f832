"""Writes of Memory: remember, update, forget, clear, purge, receipts, embeddings, index rebuild.

Every mutation is one transaction that (a) claims its receipt when an `operation_id` is given — a
retry of the same request replays the first result with `applied: false` and writes nothing, the
same id with a different request is `idempotency_key_reused`, a refused mutation leaves no receipt
because the claim rolls back with it — (b) checks versions in the UPDATE's WHERE, (c) records a
revision for every applied version (and a tombstone for a removal), and (d) publishes
`memory.updated` and schedules embedding only after commit.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from memory import embeddings as emb
from memory import fields as f
from memory.errors import (
    idempotency_key_reused,
    invalid_field,
    item_not_found,
    quota_exceeded,
    version_conflict,
)
from memory.models import (
    IndexingState,
    MemoryEmbedding,
    MemoryItem,
    MemoryNamespace,
    MemoryReceipt,
    MemoryRevision,
)
from memory.scope import MemoryScope
from memory.search import fts_rebuild
from memory.selectors import active_q, memory_view, revision_view
from opencompany.core.db import hot_fetchone
from opencompany.core.events import owner_group, publish_on_commit
from opencompany.core.ids import mint_id
from opencompany.core.json import fingerprint

logger = logging.getLogger(__name__)

EVENT_TYPE = "memory.updated"
EMBED_BATCH = 64


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


def actor_for_user(user: Any) -> str:
    """`staff:<id>` for staff acting in the admin, `owner:<id>` otherwise."""
    return f"{'staff' if getattr(user, 'is_staff', False) else 'owner'}:{user.pk}"


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


def _schedule_embedding(item_pks: list[int]) -> None:
    pks = list(item_pks)

    def _run() -> None:
        try:
            memory_embed(item_ids=pks)
        except Exception:
            logger.exception("memory embedding after commit failed items=%d", len(pks))

    transaction.on_commit(_run, robust=True)


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
    # One round trip on the common path: the unique index decides, no savepoint needed.
    table = MemoryReceipt._meta.db_table
    result_field = MemoryReceipt._meta.get_field("result")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (namespace, workflow_id, operation_id, operation, fingerprint, result, created_at) "  # noqa: S608 - our table
            "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (namespace, operation_id) DO NOTHING RETURNING id",
            [
                scope.namespace,
                scope.workflow_id,
                operation_id,
                operation,
                request_fingerprint,
                result_field.get_db_prep_value(result, connection),
                timezone.now(),
            ],
        )
        if cursor.fetchone() is not None:
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


def _reserve_slot(scope: MemoryScope, now: datetime) -> None:
    """Count one more item against the quota in a single conditional UPDATE (no check-then-act)."""
    limit = int(settings.OPENCOMPANY_MEMORY_MAX_ITEMS)

    def _take() -> int:
        return MemoryNamespace.objects.filter(pk=scope.namespace, item_count__lt=limit).update(
            item_count=F("item_count") + 1, updated_at=now
        )

    if _take():
        return
    _ensure_namespace(scope, now)
    if not _take():
        raise quota_exceeded(limit=limit)


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
    """Remove an item (expired ones too) whose version is `expected_version`. Its revisions stay,
    with a tombstone revision (`version + 1`, operation `forget`) recording the removal."""
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
    _revision_from(item, operation="forget", actor=actor, at=now, version=item.version + 1).save(
        force_insert=True
    )
    MemoryItem.objects.filter(pk=item.pk).delete()
    MemoryNamespace.objects.filter(pk=scope.namespace).update(item_count=F("item_count") - 1, updated_at=now)
    if operation_id is not None:
        MemoryReceipt.objects.filter(namespace=scope.namespace, operation_id=operation_id).update(
            result=_receipt_meta(view, operation="forget", revision_version=item.version + 1)
        )
    _publish(scope, "forget", item.memory_id, item.version)
    return MemoryResult("forget", view, Receipt(operation_id, applied=True))


def _remove_items(items: list[MemoryItem], *, operation: str, actor: str, now: datetime) -> int:
    """Tombstone and delete these items (call inside the transaction that locked their namespace)."""
    if not items:
        return 0
    MemoryRevision.objects.bulk_create(
        [_revision_from(i, operation=operation, actor=actor, at=now, version=i.version + 1) for i in items],
        batch_size=500,
    )
    pks = [i.pk for i in items]
    for start in range(0, len(pks), 500):
        MemoryItem.objects.filter(pk__in=pks[start : start + 500]).delete()
    return len(pks)


@transaction.atomic
def memory_clear(*, scope: MemoryScope, actor: str, operation_id: str | None = None) -> ClearResult:
    """Remove every item of the namespace (expired ones too), each with a tombstone revision.
    Items only: conversations (Context) are not touched."""
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


@transaction.atomic
def memory_purge_expired(*, now: datetime | None = None, batch: int = 1000) -> int:
    """Delete items whose `expires_at` has passed (every namespace), with `expire` tombstones.
    Returns how many were removed."""
    now = now or timezone.now()
    removed = 0
    while True:
        items = list(
            MemoryItem.objects.select_for_update().filter(expires_at__lte=now).order_by("pk")[:batch]
        )
        if not items:
            break
        removed += _remove_items(
            items, operation=MemoryRevision.Operation.EXPIRE, actor="system:expiry", now=now
        )
        per_namespace = Counter(i.namespace for i in items)
        for namespace, count in sorted(per_namespace.items()):
            MemoryNamespace.objects.filter(pk=namespace).update(
                item_count=F("item_count") - count, updated_at=now
            )
        scopes = {(i.namespace, i.owner_id, i.workflow_id, i.memory_node_id) for i in items}
        for namespace, owner_id, workflow_id, node in sorted(scopes):
            _publish(MemoryScope(owner_id, workflow_id, node, namespace), "expire", None, None)
    return removed


@transaction.atomic
def memory_receipts_prune(*, older_than_days: int | None = None) -> int:
    """Delete receipts older than `OPENCOMPANY_MEMORY_RECEIPT_DAYS` (default 30). Returns the count."""
    days = int(older_than_days if older_than_days is not None else settings.OPENCOMPANY_MEMORY_RECEIPT_DAYS)
    cutoff = timezone.now() - timedelta(days=days)
    deleted, _ = MemoryReceipt.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def memory_embed(*, item_ids: list[int]) -> dict[str, int]:
    """Compute and store vectors for these items with the configured embedder, outside any write
    transaction. A failure marks the items `embedding_failed` (they stay findable by full text).
    Items changed meanwhile are left to the later call their change scheduled."""
    embedder = emb.get_embedder()
    if embedder is None or not item_ids:
        return {"embedded": 0, "failed": 0}
    rows = list(
        MemoryItem.objects.filter(pk__in=item_ids).values_list(
            "pk", "version", "namespace", "title", "category", "tags", "content"
        )
    )
    texts = [emb.item_text(title=r[3], category=r[4], tags=list(r[5] or []), content=r[6]) for r in rows]
    try:
        vectors = emb.embed_texts(embedder, texts) if texts else []
    except emb.EmbedderError as exc:
        logger.warning("memory embedding failed items=%d error=%s", len(rows), exc)
        for pk, version, *_ in rows:
            MemoryItem.objects.filter(pk=pk, version=version).update(indexing_state=IndexingState.FAILED)
        return {"embedded": 0, "failed": len(rows)}
    now = timezone.now()
    for (pk, version, namespace, *_), text, vector in zip(rows, texts, vectors, strict=True):
        with transaction.atomic():
            if not MemoryItem.objects.filter(pk=pk, version=version).exists():
                continue
            MemoryEmbedding.objects.update_or_create(
                item_id=pk,
                defaults={
                    "namespace": namespace,
                    "model_name": embedder.model_name,
                    "dims": len(vector),
                    "vector": emb.pack(vector),
                    "content_hash": emb.content_hash(embedder.model_name, text),
                    "updated_at": now,
                },
            )
            MemoryItem.objects.filter(pk=pk, version=version).update(indexing_state=IndexingState.READY)
    return {"embedded": len(rows), "failed": 0}


def memory_index_rebuild(*, workflow_id: str | None = None) -> dict[str, int]:
    """Rebuild the projections from the items: the FTS rows (SQLite), the namespace counters, and,
    with an embedder, every missing, failed or stale vector."""
    items = MemoryItem.objects.all()
    if workflow_id:
        items = items.filter(workflow_id=workflow_id)
    with transaction.atomic():
        indexed = fts_rebuild(item_ids=None if not workflow_id else list(items.values_list("pk", flat=True)))
        namespaces = MemoryNamespace.objects.all()
        if workflow_id:
            namespaces = namespaces.filter(workflow_id=workflow_id)
        for namespace in namespaces.select_for_update().order_by("pk"):
            count = MemoryItem.objects.filter(namespace=namespace.pk).count()
            MemoryNamespace.objects.filter(pk=namespace.pk).update(item_count=count)
    embedded = failed = 0
    embedder = emb.get_embedder()
    if embedder is not None:
        pks = list(items.order_by("pk").values_list("pk", flat=True))
        for start in range(0, len(pks), EMBED_BATCH):
            chunk = pks[start : start + EMBED_BATCH]
            stale = _stale_embeddings(chunk, embedder.model_name)
            if stale:
                outcome = memory_embed(item_ids=stale)
                embedded += outcome["embedded"]
                failed += outcome["failed"]
    return {"items": indexed, "embedded": embedded, "failed": failed}


def _stale_embeddings(pks: list[int], model_name: str) -> list[int]:
    have = dict(
        MemoryEmbedding.objects.filter(item_id__in=pks, model_name=model_name).values_list(
            "item_id", "content_hash"
        )
    )
    stale = []
    for pk, title, category, tags, content, state in MemoryItem.objects.filter(pk__in=pks).values_list(
        "pk", "title", "category", "tags", "content", "indexing_state"
    ):
        text = emb.item_text(title=title, category=category, tags=list(tags or []), content=content)
        if state != IndexingState.READY or have.get(pk) != emb.content_hash(model_name, text):
            stale.append(pk)
    return stale
