"""One ranking for both databases: the databases find candidates, this module orders them.

Each candidate arrives with how every query word matched it (as written, as a prefix, as a compound
part or through a typo) and the number of items in scope that match each word. The score is BM25F:
a word's frequency is the weighted count of the fields it appears in (title, tags or category,
content), saturated and length-normalized by characters as in Okapi BM25, times the word's IDF in
the namespace and a factor for how it matched. Items that match every word of an alternative form
the first tier, so they always come first; ties go to the newer item (higher id).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from memory.search.query import NO_CONTENT_WORDS, WORD_RE, QueryWord, RecallQuery, stem

EXACT = "exact"
PREFIX = "prefix"  # the last word as typed, or `word*`
COMPOUND = "compound"
TYPO = "typo"
KIND_WEIGHT = {EXACT: 1.0, PREFIX: 0.9, COMPOUND: 0.7, TYPO: 0.6}
TOLERANCES = frozenset({COMPOUND, TYPO})

FIELD_WEIGHT = {"title": 2.0, "labels": 1.5, "content": 1.0}  # labels: tags and category
K1 = 1.2
B = 0.5
AVG_CHARS = 160.0

MATCH_ALL = "all"
MATCH_SOME = "some"
MATCH_FUZZY = "fuzzy"
MATCH_RECENT = "recent"
MATCH_SIMILAR = "similar"  # an embedder's neighbour that full text did not find


@dataclass
class Candidate:
    """An item that full text found, and how each query word and phrase matched it."""

    pk: int
    length: int
    words: dict[int, str]
    fields: dict[int, set[str]]  # word → the fields it is found in (title, labels, content)
    phrases: frozenset[int]
    groups: tuple[bool, ...]


@dataclass(frozen=True)
class Hit:
    pk: int
    tier: int
    score: float
    matched: tuple[str, ...]
    match: str
    kinds: tuple[tuple[int, str], ...] = ()

    @property
    def position(self) -> tuple[int, float, int]:
        return (self.tier, self.score, self.pk)


def idf(total: int, df: int) -> float:
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


def _saturate(frequency: float, length: int) -> float:
    return frequency * (K1 + 1.0) / (frequency + K1 * (1.0 - B + B * length / AVG_CHARS))


@lru_cache(maxsize=65536)
def within_edits(a: str, b: str, k: int) -> bool:
    """True when `b` is at most `k` insertions, deletions, substitutions or adjacent swaps from `a`."""
    if abs(len(a) - len(b)) > k:
        return False
    if a == b:
        return True
    before: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            value = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                value = min(value, before[j - 2] + 1)
            cur[j] = value
        if min(cur) > k:
            return False
        before, prev = prev, cur
    return prev[-1] <= k


def token_matches(word: QueryWord, token: str, kind: str) -> bool:
    """Whether one lower-cased word of an item matches a query word in the way `kind` says."""
    # Porter keeps a word's first letter (or stems it to nothing), so a different first letter
    # answers without stemming the token.
    if kind == EXACT:
        target = word.stem
        return (not target or token[:1] == target[:1]) and stem(token) == target
    if kind == PREFIX and token.startswith(word.text):
        return True
    if kind in (COMPOUND, PREFIX):
        lexeme = word.prefix_lexeme
        return token[:1] == lexeme[:1] and stem(token).startswith(lexeme)
    return within_edits(word.text, token, word.edits)


def word_kind_in(word: QueryWord, tokens: set[str]) -> str | None:
    """How `word` matches a text given as its set of lower-cased words, or None."""
    kinds = [EXACT]
    if word.prefix or word.surface_prefix:
        kinds.append(PREFIX)
    elif word.compound:
        kinds.append(COMPOUND)
    if word.edits:
        kinds.append(TYPO)
    for kind in kinds:
        if any(token_matches(word, t, kind) for t in tokens):
            return kind
    return None


def tokens_of(text: str) -> set[str]:
    return {t.lower() for t in WORD_RE.findall(text)}


def rank(query: RecallQuery, candidates: list[Candidate], *, df: dict[str, int], total: int) -> list[Hit]:
    """The accepted candidates, best first. `df` holds per word (`w<i>`) and phrase (`p<j>`) the
    number of items in scope that match it; `total` is the number of items in scope."""
    weights = {key: idf(max(total, count, 1), count) for key, count in df.items()}
    hits: list[Hit] = []
    for cand in candidates:
        open_groups = [g for g, ok in zip(query.groups, cand.groups, strict=True) if ok]
        if not any(
            any(w in cand.words for w in g.words) or set(g.phrases) & cand.phrases for g in open_groups
        ):
            continue
        score = 0.0
        for index, kind in cand.words.items():
            found_in = cand.fields.get(index) or {"content"}
            frequency = sum(FIELD_WEIGHT[name] for name in found_in)
            idf_w = weights.get(f"w{index}", 0.0)
            score += idf_w * KIND_WEIGHT[kind] * _saturate(frequency, cand.length)
        for index in cand.phrases:
            score += weights.get(f"p{index}", 0.0) * _saturate(FIELD_WEIGHT["content"], cand.length)
        complete = any(
            all(w in cand.words for w in g.words) and set(g.phrases) <= cand.phrases for g in open_groups
        )
        matched = tuple(query.words[i].text for i in sorted(cand.words)) + tuple(
            " ".join(query.phrases[j]) for j in sorted(cand.phrases)
        )
        if any(kind in TOLERANCES for kind in cand.words.values()):
            label = MATCH_FUZZY
        else:
            label = MATCH_ALL if complete else MATCH_SOME
        kinds = tuple(sorted(cand.words.items()))
        hits.append(Hit(cand.pk, int(complete), round(score, 6), matched, label, kinds))
    hits.sort(key=lambda h: (-h.tier, -h.score, -h.pk))
    return hits


def highlights(query: RecallQuery, hit: Hit, texts: list[str]) -> list[str]:
    """The words of an item's texts that made it match, lower-cased, in first-seen order."""
    phrase_stems = {stem(w) for phrase in query.phrases for w in phrase if w not in NO_CONTENT_WORDS}
    seen: dict[str, None] = {}
    for text in texts:
        for token in WORD_RE.findall(text):
            lowered = token.lower()
            if lowered in seen:
                continue
            if (phrase_stems and stem(lowered) in phrase_stems) or any(
                token_matches(query.words[i], lowered, kind) for i, kind in hit.kinds
            ):
                seen[lowered] = None
    return list(seen)
