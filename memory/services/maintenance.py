"""Housekeeping writes: expiry purge, receipt pruning, embeddings and the index rebuild."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from memory import embeddings as emb
from memory.models import (
    IndexingState,
    MemoryEmbedding,
    MemoryItem,
    MemoryNamespace,
    MemoryReceipt,
    MemoryRevision,
)
from memory.scope import MemoryScope
from memory.search import fts_rebuild, stems_prune, words_prune
from memory.services._common import _publish, _remove_items

logger = logging.getLogger(__name__)


EMBED_BATCH = 64


def _schedule_embedding(item_pks: list[int]) -> None:
    pks = list(item_pks)

    def _run() -> None:
        try:
            memory_embed(item_ids=pks)
        except Exception:
            logger.exception("memory embedding after commit failed items=%d", len(pks))

    transaction.on_commit(_run, robust=True)


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


def memory_stems_prune(*, batch: int = 200) -> int:
    """Delete the indexed stems no item holds any more (PostgreSQL: a removed item's words stay in
    `memory_stem` until this runs). Returns how many."""
    return stems_prune(batch=batch)


def memory_words_prune(*, batch: int = 200) -> int:
    """Delete the indexed words no item holds any more (PostgreSQL: a removed item's words stay in
    `memory_word` until this runs). Returns how many."""
    return words_prune(batch=batch)


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
