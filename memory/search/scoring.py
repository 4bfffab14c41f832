"""One ranking for both databases: the databases find candidates, this module orders them.

Each candidate arrives with how every query word matched it (as written, as a prefix, as a compound
part or through a typo) and the number of items in scope that match each word. The score is BM25F:
a word's frequency is the weighted count of the fields it appears in (title, tags or category,
content), saturated and length-normalized by characters as in Okapi BM25, times the word's IDF in
the namespace and a factor for how it matched. For a query of up to `TIER_WORDS_MAX` words, items that
match every word of an alternative form the first tier, so they always come first; ties go to the newer
item (higher id).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

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
# A query of up to this many words is a search: items holding all of them come first. A longer one
# is a question, whose words a good answer need not all hold (a long text holds many words by chance).
TIER_WORDS_MAX = 3

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
    fields: dict[int, frozenset[str]]  # word → the fields it is found in (title, labels, content)
    phrases: frozenset[int]
    groups: tuple[bool, ...]


class Hit(NamedTuple):
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


def within_edits(a: str, b: str, k: int) -> bool:
    """True when `b` is at most `k` insertions, deletions, substitutions or adjacent swaps from `a`."""
    if abs(len(a) - len(b)) > k:
        return False
    if a == b:
        return True
    if k == 1:
        return _one_edit(a, b)
    if not _keeps_a_piece(a, b, k):
        return False
    return _within_edits(a, b, k)


def _one_edit(a: str, b: str) -> bool:
    """Whether two different words are one edit apart: past their first difference, the rest is
    the same, or swapped there, or one letter longer."""
    if len(a) > len(b):
        a, b = b, a
    p = 0
    while p < len(a) and a[p] == b[p]:
        p += 1
    if len(a) < len(b):
        return a[p:] == b[p + 1 :]
    if a[p + 1 :] == b[p + 1 :]:
        return True
    return p + 1 < len(a) and a[p] == b[p + 1] and a[p + 1] == b[p] and a[p + 2 :] == b[p + 2 :]


def _keeps_a_piece(a: str, b: str, k: int) -> bool:
    """Whether one of `2k + 1` pieces of `a` is in `b`, as it must be when `b` is within `k` edits:
    an edit breaks at most one piece, a swap across two pieces both."""
    pieces = 2 * k + 1
    if len(a) < pieces:
        return True
    bounds = [len(a) * n // pieces for n in range(pieces + 1)]
    return any(a[bounds[n] : bounds[n + 1]] in b for n in range(pieces))


@lru_cache(maxsize=65536)
def _within_edits(a: str, b: str, k: int) -> bool:
    """The optimal string alignment distance of `a` and `b`, row by row, given up once a row
    exceeds `k` (no later row can come back under it)."""
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
    return set(map(str.lower, WORD_RE.findall(text)))


def rank(query: RecallQuery, candidates: list[Candidate], *, df: dict[str, int], total: int) -> list[Hit]:
    """The accepted candidates, best first. `df` holds per word (`w<i>`) and phrase (`p<j>`) the
    number of items in scope that match it; `total` is the number of items in scope."""
    weights = {key: idf(max(total, count, 1), count) for key, count in df.items()}
    word_idf = [weights.get(f"w{i}", 0.0) for i in range(len(query.words))]
    phrase_idf = [weights.get(f"p{j}", 0.0) for j in range(len(query.phrases))]
    texts = [word.text for word in query.words]
    phrase_texts = [" ".join(phrase) for phrase in query.phrases]
    groups = [(g.words, frozenset(g.phrases)) for g in query.groups]
    content = FIELD_WEIGHT["content"]
    tiered = len(query.words) + len(query.phrases) <= TIER_WORDS_MAX
    # A word's weighted field count depends only on the set of fields it is found in.
    frequencies: dict[frozenset[str], float] = {}
    hits: list[Hit] = []
    for cand in candidates:
        words, phrases, fields = cand.words, cand.phrases, cand.fields
        open_groups = [g for g, ok in zip(groups, cand.groups, strict=True) if ok]
        if not any(any(w in words for w in ids) or needed & phrases for ids, needed in open_groups):
            continue
        norm = K1 * (1.0 - B + B * cand.length / AVG_CHARS)
        score = 0.0
        for index, kind in words.items():
            found_in = fields.get(index) or _CONTENT
            frequency = frequencies.get(found_in)
            if frequency is None:
                frequency = frequencies[found_in] = sum(map(FIELD_WEIGHT.__getitem__, found_in))
            score += word_idf[index] * KIND_WEIGHT[kind] * (frequency * (K1 + 1.0) / (frequency + norm))
        for index in phrases:
            score += phrase_idf[index] * (content * (K1 + 1.0) / (content + norm))
        complete = any(all(w in words for w in ids) and needed <= phrases for ids, needed in open_groups)
        kinds = tuple(sorted(words.items()))
        matched = tuple(texts[i] for i, _ in kinds)
        if phrases:
            matched += tuple(phrase_texts[j] for j in sorted(phrases))
        if not TOLERANCES.isdisjoint(words.values()):
            label = MATCH_FUZZY
        else:
            label = MATCH_ALL if complete else MATCH_SOME
        hits.append(Hit(cand.pk, int(complete and tiered), round(score, 6), matched, label, kinds))
    hits.sort(key=lambda h: (-h.tier, -h.score, -h.pk))
    return hits


_CONTENT = frozenset({"content"})


def highlights(query: RecallQuery, hit: Hit, texts: list[str]) -> list[str]:
    """The words of an item's texts that made it match, lower-cased, in first-seen order."""
    phrase_stems = {stem(w) for phrase in query.phrases for w in phrase if w not in NO_CONTENT_WORDS}
    checks = [(query.words[i], kind) for i, kind in hit.kinds]
    heads = _heads(checks, phrase_stems)
    if heads is not None and not heads:
        return []
    # With known first letters, the regex engine skips every other word before Python sees it.
    finder = WORD_RE if heads is None else _words_beginning(frozenset(heads))
    seen: dict[str, None] = {}
    rejected: set[str] = set()
    for text in texts:
        for token in finder.findall(text):
            lowered = token.lower()
            if lowered in seen or lowered in rejected:
                continue
            if (heads is None or lowered[:1] in heads) and (
                (phrase_stems and stem(lowered) in phrase_stems)
                or any(token_matches(word, lowered, kind) for word, kind in checks)
            ):
                seen[lowered] = None
            else:
                rejected.add(lowered)
    return list(seen)


@lru_cache(maxsize=4096)
def _words_beginning(heads: frozenset[str]) -> re.Pattern[str]:
    """The words (as `WORD_RE` reads them) whose first letter may lower-case to one of `heads`:
    case-insensitive, so a superset that the caller checks again."""
    letters = "".join(re.escape(h) for h in sorted(heads))
    return re.compile(rf"(?<![^\W_])[{letters}][^\W_]*", re.IGNORECASE)


def _heads(checks: list[tuple[QueryWord, str]], phrase_stems: set[str]) -> set[str] | None:
    """The first letters a matching word can begin with (see `token_matches`: Porter keeps a word's
    first letter), or None when any word might match (a typo, or a stem that is empty)."""
    heads: set[str] = set()
    for word, kind in checks:
        if kind == TYPO or (kind == EXACT and not word.stem):
            return None
        if kind == EXACT:
            heads.add(word.stem[:1])
        else:
            heads.update(
                {word.text[:1], word.prefix_lexeme[:1]} if kind == PREFIX else {word.prefix_lexeme[:1]}
            )
    if "" in phrase_stems:
        return None
    return heads | {s[:1] for s in phrase_stems}
