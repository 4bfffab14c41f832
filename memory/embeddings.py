"""Optional embedders: an accelerator for recall, never the source of truth.

`OPENCOMPANY_EMBEDDER` (read at call time):
- `none` (default): recall is full-text only;
- `local`: all-MiniLM-L6-v2 on the CPU, offline (`memory.local_embedder`, the `local` extra);
- `openai` or `openai:<model>`: any OpenAI-compatible `/v1/embeddings` through the `openai` SDK
  (`OPENAI_BASE_URL` points it at Ollama, vLLM, LM Studio…; default model `text-embedding-3-small`);
- `sentence-transformers:<name>`: a local model (optional extra, imported only when chosen);
- a dotted path to a zero-argument factory returning an object with `model_name` and
  `embed(texts) -> list[list[float]]` (tests and custom embedders).
"""

from __future__ import annotations

import hashlib
import math
import struct
import threading
from typing import Any, Protocol, cast

from django.conf import settings
from django.utils.module_loading import import_string

from memory.local_embedder import LocalEmbedder

try:  # installed with the `local` extra (onnxruntime needs it): a namespace's cosines in one pass
    import numpy as np
except ImportError:  # pragma: no cover - the dev lock installs it
    np = None  # type: ignore[assignment]

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"


class Embedder(Protocol):
    model_name: str

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class EmbedderError(RuntimeError):
    """The embedder could not produce vectors (network, model, or a malformed answer)."""


class OpenAIEmbedder:
    def __init__(self, *, model: str, api_key: str, base_url: str | None) -> None:
        from openai import OpenAI

        self.model_name = model
        self._client = OpenAI(
            api_key=api_key or "not-needed", base_url=base_url or None, max_retries=0, timeout=30
        )

    def embed(self, texts: list[str]) -> list[list[float]]:
        response = self._client.embeddings.create(model=self.model_name, input=texts)
        ordered = sorted(response.data, key=lambda d: d.index)
        return [list(d.embedding) for d in ordered]


class SentenceTransformerEmbedder:
    def __init__(self, name: str) -> None:
        from sentence_transformers import SentenceTransformer  # optional extra

        self.model_name = f"sentence-transformers:{name}"
        self._model = SentenceTransformer(name)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, row)) for row in self._model.encode(texts)]


_cache: dict[tuple[str, ...], Embedder] = {}
_cache_lock = threading.Lock()


def get_embedder() -> Embedder | None:
    """The configured embedder, or None when recall is full-text only."""
    config = str(getattr(settings, "OPENCOMPANY_EMBEDDER", "none") or "none").strip()
    if config.lower() == "none":
        return None
    key = (config, str(settings.OPENAI_BASE_URL or ""), str(settings.OPENAI_API_KEY or ""))
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    embedder = embedder_for(config)
    with _cache_lock:
        _cache[key] = embedder
    return embedder


def embedder_for(config: str) -> Embedder:
    """A new embedder for one `OPENCOMPANY_EMBEDDER` value other than `none` (not cached)."""
    if config == "local":
        return LocalEmbedder()
    if config == "openai" or config.startswith("openai:"):
        model = config.partition(":")[2] or DEFAULT_OPENAI_MODEL
        return OpenAIEmbedder(model=model, api_key=settings.OPENAI_API_KEY, base_url=settings.OPENAI_BASE_URL)
    if config.startswith("sentence-transformers:"):
        return SentenceTransformerEmbedder(config.partition(":")[2])
    return cast(Embedder, import_string(config)())


def clear_embedder_cache() -> None:
    with _cache_lock:
        _cache.clear()


def embed_texts(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """Call the embedder and check its answer; any failure is an `EmbedderError`."""
    try:
        vectors = embedder.embed(texts)
    except Exception as exc:
        raise EmbedderError(type(exc).__name__) from exc
    if len(vectors) != len(texts) or any(not v for v in vectors):
        raise EmbedderError("the embedder returned no vector for some texts")
    dims = len(vectors[0])
    if any(len(v) != dims for v in vectors) or any(not math.isfinite(x) for v in vectors for x in v):
        raise EmbedderError("the embedder returned malformed vectors")
    return vectors


def item_text(*, title: str | None, category: str | None, tags: list[str], content: str) -> str:
    return "\n".join(part for part in (title or "", category or "", " ".join(tags), content) if part)


def content_hash(model_name: str, text: str) -> str:
    return hashlib.sha256(f"{model_name}\x00{text}".encode()).hexdigest()


def pack(vector: list[float]) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def unpack(data: Any) -> list[float]:
    raw = bytes(data)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def normalize(vector: list[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine of two vectors of equal length (0 for a zero vector or a length mismatch)."""
    if len(a) != len(b):
        return 0.0
    na = math.sqrt(math.fsum(x * x for x in a))
    nb = math.sqrt(math.fsum(x * x for x in b))
    if not na or not nb:
        return 0.0
    return math.fsum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def cosines(query: list[float], packed: list[Any]) -> list[float]:
    """The cosine of `query` with each packed vector (see `pack`), as `cosine` computes it; with numpy
    installed in one matrix product rather than a Python loop per vector."""
    dims = len(query)
    if np is None or not packed:
        return [cosine(query, unpack(blob)) for blob in packed]
    out = [0.0] * len(packed)
    same = [n for n, blob in enumerate(packed) if len(blob) == 4 * dims]
    if not same:
        return out
    q = np.asarray(query, dtype=np.float64)
    matrix = np.frombuffer(b"".join(bytes(packed[n]) for n in same), dtype="<f4").reshape(len(same), dims)
    norms = np.linalg.norm(matrix.astype(np.float64), axis=1) * float(np.linalg.norm(q))
    dots = matrix.astype(np.float64) @ q
    for n, dot, norm in zip(same, dots.tolist(), norms.tolist(), strict=True):
        out[n] = dot / norm if norm else 0.0
    return out
