"""Deterministic embedders for tests: words of one concept share a dimension."""

from __future__ import annotations

import re
from pathlib import Path

from memory.local_embedder import LocalEmbedder

CONCEPTS = [
    {"car", "automobile", "vehicle", "volvo"},
    {"coffee", "espresso", "latte"},
    {"dog", "puppy", "hound"},
    {"holiday", "vacation", "trip"},
]


def concept_vector(text: str) -> list[float]:
    words = re.findall(r"[a-z]+", text.lower())
    vector = [0.0] * (len(CONCEPTS) + 1)
    for word in words:
        for i, concept in enumerate(CONCEPTS):
            if word in concept:
                vector[i] += 1.0
    vector[-1] = 0.05  # never a zero vector
    return vector


class SynonymEmbedder:
    model_name = "test-synonyms"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [concept_vector(t) for t in texts]


class BrokenEmbedder:
    model_name = "test-broken"

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedder is down")


def synonyms() -> SynonymEmbedder:
    return SynonymEmbedder()


def broken() -> BrokenEmbedder:
    return BrokenEmbedder()


def damaged_local() -> LocalEmbedder:
    """The `local` embedder pointed at a file that is not its model (this one)."""
    return LocalEmbedder(model_path=Path(__file__))
