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
from memory.errors import item_not_found
from memory.models import IndexingState, MemoryEmbedding, MemoryItem, MemoryRevision
from memory.scope import MemoryScope
from memory.search import (
    MATCH_RECENT,
    MATCH_SIMILAR,
    Filters,
    Hit,
    ItemRecord,
    ItemRow,
    RecallQuery,
    analyze,
    highlights,
    item_records,
    items_by_pk,
    ranked_hits,
    recent,
)
from opencompany.core.errors import ApplicationError
from opencompany.core.pagination import INVALID_CURSOR, Ascending, NewestFirst, make_cursor, read_cursor
from opencompany.core.times import rfc3339_or_none

logger = logging.getLogger(__name__)

RETRIEVAL_FTS = "fts"
RETRIEVAL_HYBRID = "hybrid"
RETRIEVAL_LIST = "list"
RETRIEVAL_RECENT = "recent"
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
    return rfc3339_or_none(value)


def memory_view(item: MemoryItem | ItemRecord) -> dict[str, Any]:
    """The one serialized shape of an item (API, tool, admin, events never carry it); recall reads
    its page as records rather than models."""
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


def _keyset_position(position: Any) -> tuple[int, float, int]:
    try:
        tier, score, pk = position
        return int(tier), float(score), int(pk)
    except (TypeError, ValueError):
        raise ApplicationError(INVALID_CURSOR, "The cursor is invalid or was tampered with.") from None


def _recent_position(position: Any) -> tuple[datetime, int]:
    try:
        at, pk = position
        parsed = datetime.fromisoformat(str(at))
        if parsed.tzinfo is None:
            raise ValueError(at)
        return parsed, int(pk)
    except (TypeError, ValueError):
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
    rows = list(
        MemoryEmbedding.objects.filter(
            namespace=scope.namespace, model_name=model_name, item__in=items.values("pk")
        ).values_list("item_id", "vector")
    )
    similarities = emb.cosines(query_vector, [blob for _, blob in rows])
    scored = [
        (int(pk), similarity)
        for (pk, _), similarity in zip(rows, similarities, strict=True)
        if similarity >= VECTOR_MIN_SIMILARITY
    ]
    scored.sort(key=lambda row: (-row[1], -row[0]))
    return scored[:HYBRID_CANDIDATES]


def _fuse(hits: list[Hit], vectors: list[tuple[int, float]]) -> list[Hit]:
    """Reciprocal rank fusion of the full-text hits and the vector neighbours; a neighbour that
    full text did not find is marked `similar`."""
    scores: dict[int, float] = {}
    for ranked in ([h.pk for h in hits], [pk for pk, _ in vectors]):
        for rank, pk in enumerate(ranked, start=1):
            scores[pk] = scores.get(pk, 0.0) + 1.0 / (RRF_K + rank)
    by_pk = {h.pk: h for h in hits}
    fused = []
    for pk, score in scores.items():
        hit = by_pk.get(pk)
        fused.append(
            Hit(pk, 0, round(score, 6), hit.matched, hit.match, hit.kinds)
            if hit is not None
            else Hit(pk, 0, round(score, 6), (), MATCH_SIMILAR)
        )
    fused.sort(key=lambda h: (-h.score, -h.pk))
    return fused


def _hybrid_ranking(
    *, scope: MemoryScope, query: RecallQuery, text: str, filters: Filters
) -> tuple[list[Hit], dict[int, ItemRow], str, str | None]:
    """The full-text ranking, fused with vector neighbours when an embedder answers, and the items
    full text read with its hits."""
    ranking = ranked_hits(query, filters)
    hits, rows = ranking.hits, ranking.items
    embedder = emb.get_embedder()
    if embedder is None:
        return hits, rows, RETRIEVAL_FTS, None
    try:
        query_vector = emb.embed_texts(embedder, [text])[0]
    except emb.EmbedderError as exc:
        logger.warning("memory recall embedder failed namespace=%s error=%s", scope.namespace, exc)
        return hits, rows, RETRIEVAL_FTS, DEGRADED_EMBEDDER
    vectors = _vector_neighbours(
        scope=scope, filters=filters, query_vector=query_vector, model_name=embedder.model_name
    )
    missing = (
        MemoryItem.objects.filter(namespace=scope.namespace, indexing_state=IndexingState.FAILED)
        .filter(active_q(filters.now))
        .exists()
    )
    fused = _fuse(hits[:HYBRID_CANDIDATES], vectors)
    return fused, rows, RETRIEVAL_HYBRID, (DEGRADED_EMBEDDER if missing else None)


def recall_view(
    item: ItemRecord, *, score: float, matched: list[str], match: str, highlight: list[str]
) -> dict[str, Any]:
    """An item as recall returns it: why it matched beside what it holds."""
    return memory_view(item) | {"score": score, "matched": matched, "match": match, "highlight": highlight}


def memory_recall(
    *,
    scope: MemoryScope,
    query: str,
    categories: list[str] | None = None,
    tags: list[str] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> MemoryPage:
    """Active items for `query`, best first: the one recall behind the tool, the API and the panel.

    Any word may match (see `memory.search`): items matching more of the words, and rarer ones,
    rank higher, items matching every word come first, and each result carries `score`, `matched`
    (the query words it matched), `match` (`all`, `some`, `fuzzy`) and `highlight` (its words that
    matched). A query without searchable words ("what do you remember about me?") answers the most
    recently updated items, marked `match: "recent"` (`retrieval: "recent"`). With an embedder the
    full-text ranking is fused with exact cosine neighbours (`retrieval: "hybrid"`; neighbours that
    full text did not find are `match: "similar"`); when the embedder fails recall answers from full
    text with `degraded: "embedder_unavailable"`. Only a blank or over-long query is refused.
    """
    text = f.clean_query(query)
    recall_query = analyze(text)
    cats = f.clean_categories(categories)
    wanted_tags = f.clean_tags(tags)
    size = f.clean_limit(limit)
    token = f.clean_cursor(cursor)
    filters = Filters(
        namespace=scope.namespace, now=timezone.now(), categories=tuple(cats), tags=tuple(wanted_tags)
    )
    if not recall_query.has_content:
        return _recall_recent(scope, recall_query, filters, cats, wanted_tags, size, token)

    hits, rows, retrieval, degraded = _hybrid_ranking(
        scope=scope, query=recall_query, text=text, filters=filters
    )
    bound = [scope.namespace, retrieval, recall_query.canonical, cats, wanted_tags]
    position = read_cursor(token, salt="memory", bound_to=bound)
    if position is not None:
        after = _keyset_position(position)
        hits = [h for h in hits if h.position < after]
    page = hits[:size]
    read = [rows[h.pk] for h in page if h.pk in rows]
    by_pk = {item.pk: item for item in item_records(read)}
    by_pk |= items_by_pk([h.pk for h in page if h.pk not in rows])  # neighbours full text did not find
    items = []
    for hit in page:
        item = by_pk.get(hit.pk)
        if item is None:
            continue
        words = highlights(recall_query, hit, [item.title or "", item.content, *item.tags])
        items.append(
            recall_view(item, score=hit.score, matched=list(hit.matched), match=hit.match, highlight=words)
        )
    next_cursor = None
    if len(hits) > size:
        next_cursor = make_cursor(salt="memory", bound_to=bound, position=list(page[-1].position))
    return MemoryPage("recall", items, next_cursor, retrieval, degraded)


def _recall_recent(
    scope: MemoryScope,
    query: RecallQuery,
    filters: Filters,
    cats: list[str],
    wanted_tags: list[str],
    size: int,
    token: str | None,
) -> MemoryPage:
    bound = [scope.namespace, RETRIEVAL_RECENT, query.canonical, cats, wanted_tags]
    position = read_cursor(token, salt="memory", bound_to=bound)
    after = _recent_position(position) if position is not None else None
    pks = recent(query, filters, after=after, limit=size + 1)
    page = pks[:size]
    by_pk = items_by_pk(page)
    rows = [by_pk[pk] for pk in page if pk in by_pk]
    items = [recall_view(item, score=0.0, matched=[], match=MATCH_RECENT, highlight=[]) for item in rows]
    next_cursor = None
    if len(pks) > size and rows:
        last = rows[-1]
        next_cursor = make_cursor(
            salt="memory", bound_to=bound, position=[last.updated_at.isoformat(), last.pk]
        )
    return MemoryPage("recall", items, next_cursor, RETRIEVAL_RECENT, None)


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
