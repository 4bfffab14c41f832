"""Embeddings accelerate recall (hybrid), never gate it (degraded), and are rebuildable."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from memory import selectors, services
from memory.embeddings import clear_embedder_cache, cosine, cosines, pack, unpack
from memory.models import IndexingState, MemoryEmbedding, MemoryItem
from tests.memory.embedders import concept_vector


@pytest.fixture(autouse=True)
def _fresh_embedder_cache():
    clear_embedder_cache()
    yield
    clear_embedder_cache()


def _remember(scope, content, capture):
    with capture(execute=True):
        return services.memory_remember(scope=scope, content=content, actor="owner:1").memory


def test_with_an_embedder_recall_is_hybrid_and_finds_a_synonym(
    scope, settings, django_capture_on_commit_callbacks
):
    settings.OPENCOMPANY_EMBEDDER = "tests.memory.embedders.synonyms"
    car = _remember(scope, "My car is a red Volvo", django_capture_on_commit_callbacks)
    _remember(scope, "Walks the dog at seven", django_capture_on_commit_callbacks)

    page = selectors.memory_recall(scope=scope, query="automobile")

    assert page.retrieval == "hybrid"
    assert page.degraded is None
    assert [i["id"] for i in page.items] == [car["id"]]
    assert MemoryItem.objects.get(memory_id=car["id"]).indexing_state == IndexingState.READY
    assert MemoryEmbedding.objects.count() == 2


def test_without_an_embedder_the_synonym_is_not_found(scope, django_capture_on_commit_callbacks):
    _remember(scope, "My car is a red Volvo", django_capture_on_commit_callbacks)

    page = selectors.memory_recall(scope=scope, query="automobile")

    assert (page.items, page.retrieval, page.degraded) == ([], "fts", None)


def test_failing_embedder_never_fails_remember_and_recall_degrades_to_fts(
    scope, settings, django_capture_on_commit_callbacks
):
    settings.OPENCOMPANY_EMBEDDER = "tests.memory.embedders.broken"

    car = _remember(scope, "My car is a red Volvo", django_capture_on_commit_callbacks)
    page = selectors.memory_recall(scope=scope, query="car")

    assert MemoryItem.objects.get().indexing_state == IndexingState.FAILED
    assert MemoryEmbedding.objects.exists() is False
    assert [i["id"] for i in page.items] == [car["id"]]
    assert (page.retrieval, page.degraded) == ("fts", "embedder_unavailable")


def test_embedding_runs_only_after_commit(scope, settings, django_capture_on_commit_callbacks):
    settings.OPENCOMPANY_EMBEDDER = "tests.memory.embedders.synonyms"
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.memory_remember(scope=scope, content="My car", actor="owner:1")

    assert MemoryEmbedding.objects.exists() is False
    assert MemoryItem.objects.get().indexing_state == IndexingState.PENDING
    for callback in callbacks:
        callback()
    assert MemoryItem.objects.get().indexing_state == IndexingState.READY


def test_rebuild_memory_index_restores_fts_rows_and_vectors(
    scope, settings, django_capture_on_commit_callbacks
):
    settings.OPENCOMPANY_EMBEDDER = "tests.memory.embedders.broken"
    car = _remember(scope, "My car is a red Volvo", django_capture_on_commit_callbacks)
    settings.OPENCOMPANY_EMBEDDER = "tests.memory.embedders.synonyms"
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM memory_item_fts")
            cursor.execute("DELETE FROM memory_item_trigram")
        assert selectors.memory_recall(scope=scope, query="volvo").items == []
    assert selectors.memory_recall(scope=scope, query="automobile").items == []

    out = StringIO()
    call_command("rebuild_memory_index", "--workflow", scope.workflow_id, stdout=out)

    assert [i["id"] for i in selectors.memory_recall(scope=scope, query="volvo").items] == [car["id"]]
    page = selectors.memory_recall(scope=scope, query="automobile")
    assert ([i["id"] for i in page.items], page.degraded) == ([car["id"]], None)
    assert MemoryItem.objects.get().indexing_state == IndexingState.READY
    assert out.getvalue().strip() == "items=1 embedded=1 failed=0"


class _EmbeddingsHandler(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        payload = {
            "object": "list",
            "model": body["model"],
            "data": [
                {"object": "embedding", "index": i, "embedding": concept_vector(t)}
                for i, t in enumerate(inputs)
            ],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def embeddings_server():
    _EmbeddingsHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_openai_compatible_embedder_through_the_real_sdk(
    scope, settings, embeddings_server, django_capture_on_commit_callbacks
):
    settings.OPENCOMPANY_EMBEDDER = "openai:local-embed"
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{embeddings_server.server_port}/v1"
    settings.OPENAI_API_KEY = "sk-loopback"

    car = _remember(scope, "My car is a red Volvo", django_capture_on_commit_callbacks)
    page = selectors.memory_recall(scope=scope, query="automobile")

    assert page.retrieval == "hybrid"
    assert [i["id"] for i in page.items] == [car["id"]]
    first = _EmbeddingsHandler.requests[0]
    assert first["path"] == "/v1/embeddings"
    assert first["auth"] == "Bearer sk-loopback"
    assert first["body"]["model"] == "local-embed"
    assert MemoryEmbedding.objects.get().model_name == "local-embed"
    assert len(_EmbeddingsHandler.requests) == 2


def test_a_namespace_s_cosines_in_one_pass_equal_the_cosine_of_each_vector():
    query = [0.5, -1.0, 2.0]
    packed = [pack([1.0, 0.0, 0.0]), pack([0.0, 0.0, 0.0]), pack([1.0, 2.0]), pack([0.5, -1.0, 2.0])]

    together = cosines(query, packed)

    assert together == pytest.approx([cosine(query, unpack(blob)) for blob in packed], abs=1e-9)
    assert together[1:3] == [0.0, 0.0]
    assert together[3] == pytest.approx(1.0)
