"""Reads of Memory: get, list, ranked recall and revision history. Expired items are invisible.

Every read filters by the scope's namespace; reads never create anything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from memory import embeddings as emb
from memory import fields as f
from memory.errors import invalid_field, item_not_found
from memory.models import IndexingState, MemoryEmbedding, MemoryItem, MemoryRevision
from memory.scope import MemoryScope
from memory.search import Filters, ParsedQuery, parse_query, ranked_ids
from opencompany.core.errors import ApplicationError
from opencompany.core.pagination import INVALID_CURSOR, Ascending, NewestFirst, make_cursor, read_cursor

logger = logging.getLogger(__name__)

RETRIEVAL_FTS = "fts"
RETRIEVAL_HYBRID = "hybrid"
RETRIEVAL_LIST = "list"
DEGRADED_EMBEDDER = "embedder_unavailable"
HYBRID_CANDIDATES = 200
VECTOR_MIN_SIMILARITY = 0.3
RRF_K = 60


@dataclass(frozen=True)
class MemoryPage:
    operation: str
    items: list[dict[str, Any]]
    next_cursor: str | None
    retrieval: str
    degraded: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "items": self.items,
            "count": len(self.items),
            "next_cursor": self.next_cursor,
            "retrieval": self.retrieval,
            "degraded": self.degraded,
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def memory_view(item: MemoryItem) -> dict[str, Any]:
    """The one serialized shape of an item (API, tool, admin, events never carry it)."""
    return {
        "id": item.memory_id,
        "title": item.title,
        "content": item.content,
        "category": item.category,
        "tags": list(item.tags or []),
        "version": item.version,
        "expires_at": _iso(item.expires_at),
        "created_at": _iso(item.created_at),
        "updated_at": _iso(item.updated_at),
        "created_by": item.created_by,
        "updated_by": item.updated_by,
        "indexing_state": item.indexing_state,
    }


def revision_view(revision: MemoryRevision) -> dict[str, Any]:
    return {
        "memory_id": revision.memory_id,
        "version": revision.version,
        "operation": revision.operation,
        "title": revision.title,
        "content": revision.content,
        "category": revision.category,
        "tags": list(revision.tags or []),
        "expires_at": _iso(revision.expires_at),
        "actor": revision.actor,
        "created_at": _iso(revision.created_at),
    }


def active_q(now: datetime) -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now)


def memory_items_for(*, scope: MemoryScope, now: datetime | None = None) -> QuerySet[MemoryItem]:
    """The scope's active items (not expired at `now`)."""
    return MemoryItem.objects.filter(namespace=scope.namespace).filter(active_q(now or timezone.now()))


def memory_get(*, scope: MemoryScope, memory_id: str) -> dict[str, Any]:
    """The active item with that id in the scope, or `not_found`."""
    memory_id = f.clean_memory_id(memory_id)
    item = memory_items_for(scope=scope).filter(memory_id=memory_id).first()
    if item is None:
        raise item_not_found()
    return memory_view(item)


def _apply_filters(
    queryset: QuerySet[MemoryItem], categories: list[str], tags: list[str]
) -> QuerySet[MemoryItem]:
    if categories:
        queryset = queryset.filter(category__in=categories)
    for tag in tags:
        queryset = queryset.filter(tag_index__contains=f"\x1f{tag}\x1f")
    return queryset


def memory_list(
    *,
    scope: MemoryScope,
    categories: list[str] | None = None,
    tags: list[str] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> MemoryPage:
    """Active items newest first (`created_at`, then id, descending); category = any of the given,
    tags = all of the given; keyset pages behind an opaque signed cursor bound to the namespace and
    the filters."""
    cats = f.clean_categories(categories)
    wanted_tags = f.clean_tags(tags)
    size = f.clean_limit(limit)
    token = f.clean_cursor(cursor)
    page = NewestFirst(salt="memory", bound_to=[scope.namespace, "list", cats, wanted_tags]).page(
        _apply_filters(memory_items_for(scope=scope), cats, wanted_tags), cursor=token, size=size
    )
    return MemoryPage("list", [memory_view(r) for r in page.rows], page.next_cursor, RETRIEVAL_LIST, None)


def _keyset_position(position: Any) -> tuple[float, int]:
    try:
        return float(position[0]), int(position[1])
    except (TypeError, ValueError, IndexError, KeyError):
        raise ApplicationError(INVALID_CURSOR, "The cursor is invalid or was tampered with.") from None


def _vector_neighbours(
    *, scope: MemoryScope, filters: Filters, query_vector: list[float], model_name: str
) -> list[tuple[int, float]]:
    """Exact cosine over the namespace's ready vectors (active, filtered items), best first."""
    items = _apply_filters(
        MemoryItem.objects.filter(namespace=scope.namespace).filter(active_q(filters.now)),
        list(filters.categories),
        list(filters.tags),
    )
    rows = MemoryEmbedding.objects.filter(
        namespace=scope.namespace, model_name=model_name, item__in=items.values("pk")
    ).values_list("item_id", "vector")
    scored = []
    for pk, blob in rows:
        similarity = emb.cosine(query_vector, emb.unpack(blob))
        if similarity >= VECTOR_MIN_SIMILARITY:
            scored.append((int(pk), similarity))
    scored.sort(key=lambda row: (-row[1], -row[0]))
    return scored[:HYBRID_CANDIDATES]


def _fuse(fts: list[tuple[int, float]], vectors: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of two best-first lists."""
    scores: dict[int, float] = {}
    for ranked in (fts, vectors):
        for rank, (pk, _score) in enumerate(ranked, start=1):
            scores[pk] = scores.get(pk, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores.items(), key=lambda row: (-row[1], -row[0]))


def _hybrid_ranking(
    *, scope: MemoryScope, parsed: ParsedQuery, query: str, filters: Filters
) -> tuple[list[tuple[int, float]] | None, str | None]:
    """Fused ranking when an embedder answers; `(None, degraded)` to fall back to full text."""
    embedder = emb.get_embedder()
    if embedder is None:
        return None, None
    try:
        query_vector = emb.embed_texts(embedder, [query])[0]
    except emb.EmbedderError as exc:
        logger.warning("memory recall embedder failed namespace=%s error=%s", scope.namespace, exc)
        return None, DEGRADED_EMBEDDER
    fts = ranked_ids(parsed, filters, after=None, limit=HYBRID_CANDIDATES)
    vectors = _vector_neighbours(
        scope=scope, filters=filters, query_vector=query_vector, model_name=embedder.model_name
    )
    missing = (
        MemoryItem.objects.filter(namespace=scope.namespace, indexing_state=IndexingState.FAILED)
        .filter(active_q(filters.now))
        .exists()
    )
    return _fuse(fts, vectors), (DEGRADED_EMBEDDER if missing else None)


def memory_recall(
    *,
    scope: MemoryScope,
    query: str,
    categories: list[str] | None = None,
    tags: list[str] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> MemoryPage:
    """Active items matching `query` (web-search syntax, see `memory.search`), best first.

    Full text on both databases; with an embedder, FTS ranks are fused with exact cosine neighbours
    (`retrieval: "hybrid"`); when the embedder fails recall answers from full text with
    `degraded: "embedder_unavailable"`. A query with no searchable word is `invalid_request`.
    """
    text = f.clean_query(query)
    parsed = parse_query(text)
    if parsed.is_empty:
        raise invalid_field("query", "The query has no searchable words.")
    cats = f.clean_categories(categories)
    wanted_tags = f.clean_tags(tags)
    size = f.clean_limit(limit)
    token = f.clean_cursor(cursor)
    filters = Filters(
        namespace=scope.namespace, now=timezone.now(), categories=tuple(cats), tags=tuple(wanted_tags)
    )

    fused, degraded = _hybrid_ranking(scope=scope, parsed=parsed, query=text, filters=filters)
    retrieval = RETRIEVAL_HYBRID if fused is not None else RETRIEVAL_FTS
    bound = [scope.namespace, retrieval, parsed.canonical(), cats, wanted_tags]
    position = read_cursor(token, salt="memory", bound_to=bound)
    after = _keyset_position(position) if position is not None else None

    if fused is None:
        ranked = ranked_ids(parsed, filters, after=after, limit=size + 1)
    else:
        ranked = [row for row in fused if after is None or (row[1], row[0]) < after][: size + 1]
    page = ranked[:size]
    by_pk = MemoryItem.objects.in_bulk([pk for pk, _ in page])
    items = [memory_view(by_pk[pk]) for pk, _ in page if pk in by_pk]
    next_cursor = None
    if len(ranked) > size:
        last_pk, last_score = page[-1]
        next_cursor = make_cursor(salt="memory", bound_to=bound, position=[last_score, last_pk])
    return MemoryPage("recall", items, next_cursor, retrieval, degraded)


def memory_revisions(
    *, scope: MemoryScope, memory_id: str, limit: int | None = None, cursor: str | None = None
) -> dict[str, Any]:
    """Every recorded version of an item in the scope (forgotten items included), oldest first."""
    memory_id = f.clean_memory_id(memory_id)
    size = f.clean_limit(limit)
    token = f.clean_cursor(cursor)
    page = Ascending(field="version", salt="memory", bound_to=[scope.namespace, "revisions", memory_id]).page(
        MemoryRevision.objects.filter(namespace=scope.namespace, memory_id=memory_id),  # type: ignore[misc]
        cursor=token,
        size=size,
    )
    if not page.rows and not token:
        raise item_not_found()
    return {"results": [revision_view(r) for r in page.rows], "next_cursor": page.next_cursor}
