"""The `local` embedder: all-MiniLM-L6-v2 on the CPU from the `local` extra, offline, on both databases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from memory import selectors, services
from memory.embeddings import clear_embedder_cache, get_embedder
from memory.local_embedder import MODEL_NAME, LocalEmbedder
from memory.models import IndexingState, MemoryEmbedding, MemoryItem

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())["vectors"]


@pytest.fixture(autouse=True)
def _fresh_embedder_cache():
    clear_embedder_cache()
    yield
    clear_embedder_cache()


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def test_local_vectors_match_the_original_model_and_its_published_similarities():
    sentences = list(REFERENCE)

    vectors = LocalEmbedder().embed(sentences)

    assert [len(v) for v in vectors] == [384, 384, 384]
    assert [round(math.sqrt(sum(x * x for x in v)), 5) for v in vectors] == [1.0, 1.0, 1.0]
    assert min(_cosine(v, REFERENCE[s]) for v, s in zip(vectors, sentences, strict=True)) > 0.999
    similarities = [
        _cosine(vectors[0], vectors[1]),
        _cosine(vectors[0], vectors[2]),
        _cosine(vectors[1], vectors[2]),
    ]
    assert similarities == pytest.approx([0.6660, 0.1046, 0.1411], abs=0.005)
    # A batch embeds each text as it would alone (padding never leaks into the mean).
    assert LocalEmbedder().embed([sentences[1]])[0] == pytest.approx(vectors[1], abs=1e-5)


def _remember(scope, content, capture):
    with capture(execute=True):
        return services.memory_remember(scope=scope, content=content, actor="owner:1").memory


@pytest.mark.django_db
def test_local_embedder_makes_recall_hybrid_and_finds_a_paraphrase(
    scope, settings, django_capture_on_commit_callbacks
):
    settings.OPENCOMPANY_EMBEDDER = "local"
    capture = django_capture_on_commit_callbacks
    _remember(scope, "Booked a table at Le Petit Jardin for our anniversary dinner.", capture)
    dog = _remember(scope, "The dog needs its rabies shot next Tuesday.", capture)
    seats = _remember(scope, "Prefers aisle seats on long flights.", capture)
    _remember(scope, "Quarterly tax payment is due in April.", capture)

    shot = selectors.memory_recall(scope=scope, query="puppy vaccination")
    flights = selectors.memory_recall(scope=scope, query="aisle or window seat on a plane?")

    assert get_embedder().model_name == MODEL_NAME
    assert MemoryEmbedding.objects.filter(model_name=MODEL_NAME, dims=384).count() == 4
    assert set(MemoryItem.objects.values_list("indexing_state", flat=True)) == {IndexingState.READY}
    assert (shot.retrieval, shot.degraded) == ("hybrid", None)
    assert [(i["id"], i["match"]) for i in shot.items] == [(dog["id"], "similar")]
    # Full text finds the seats item too; the fusion keeps it first, as matched by its words.
    assert (flights.retrieval, flights.degraded) == ("hybrid", None)
    first = flights.items[0]
    assert (first["id"], first["match"], first["matched"]) == (seats["id"], "all", ["aisle", "seat"])


@pytest.mark.django_db
def test_without_the_local_embedder_the_paraphrase_is_not_found(scope, django_capture_on_commit_callbacks):
    _remember(scope, "The dog needs its rabies shot next Tuesday.", django_capture_on_commit_callbacks)

    page = selectors.memory_recall(scope=scope, query="puppy vaccination")

    assert (page.items, page.retrieval, page.degraded) == ([], "fts", None)


@pytest.mark.django_db
def test_a_local_embedder_that_cannot_load_its_model_degrades_recall_to_full_text(
    scope, settings, django_capture_on_commit_callbacks
):
    settings.OPENCOMPANY_EMBEDDER = "tests.memory.embedders.damaged_local"

    dog = _remember(scope, "The dog needs its rabies shot next Tuesday.", django_capture_on_commit_callbacks)
    page = selectors.memory_recall(scope=scope, query="dog shot")
    paraphrase = selectors.memory_recall(scope=scope, query="puppy vaccination")

    assert MemoryItem.objects.get().indexing_state == IndexingState.FAILED
    assert MemoryEmbedding.objects.exists() is False
    assert ([i["id"] for i in page.items], page.retrieval, page.degraded) == (
        [dog["id"]],
        "fts",
        "embedder_unavailable",
    )
    assert (paraphrase.items, paraphrase.retrieval, paraphrase.degraded) == (
        [],
        "fts",
        "embedder_unavailable",
    )
