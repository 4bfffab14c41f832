"""Recall queries: the web-search syntax parsed once, and the words a query searches for.

Plain words are matched any-word and ranked (see `memory.search.scoring`). The explicit syntax keeps
its meaning: `"quoted phrases"` must appear, `-item` excludes, `or` separates alternatives, and a
trailing `*` makes a word a prefix. Words are runs of letters and digits, so nothing a person types
ever reaches a database's query syntax: each backend compiles these tokens itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import snowballstemmer

MAX_QUERY_ITEMS = 32
WORD_RE = re.compile(r"[^\W_]+")

# PostgreSQL's `english` stop-word list (Snowball), so both databases drop the same words.
_STOP_WORDS_TEXT = """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her
    hers herself it its itself they them their theirs themselves what which who whom this that these those
    am is are was were be been being have has had having do does did doing a an the and but if or because
    as until while of at by for with about against between into through during before after above below to
    from up down in out on off over under again further then once here there when where why how all any
    both each few more most other some such no nor not only own same so than too very s t can will just don
    should now"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
# Words that ask for memory rather than name what is in it ("what do you remember about me?").
RECALL_WORDS = frozenset(
    [
        "remember",
        "remembered",
        "recall",
        "recalled",
        "know",
        "knew",
        "tell",
        "told",
        "anything",
        "something",
        "everything",
        "please",
    ]
)
NO_CONTENT_WORDS = STOP_WORDS | RECALL_WORDS
# Words that, right after a question word, ask for a kind of answer rather than name what it is about:
# "how long has she played tennis" is about tennis; "what kind of pasta" about pasta.
QUESTION_PHRASES = {
    "how": frozenset(["long", "many", "much", "often"]),
    "what": frozenset(["kind", "kinds", "type", "types", "sort", "sorts"]),
    "which": frozenset(["kind", "kinds", "type", "types", "sort", "sorts"]),
}

PREFIX_MIN = 3  # the last word typed also matches as a prefix from this length
COMPOUND_MIN = 4  # any word this long also matches indexed words it begins ("postgres" → PostgreSQL)
TYPO_MIN = 5  # words this long tolerate one typo
TYPO_TWO_MIN = 9  # words this long tolerate two


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    # PyStemmer's compiled stemmer when it is installed (a dependency): scoring and highlights stem
    # every word of the items they read, and the pure-Python one is far slower on a cold cache.
    return snowballstemmer.stemmer("porter")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Porter stem of a lower-cased word: the algorithm both databases index with."""
    return str(_stemmer().stemWord(word))


def prefix_lexeme(word: str) -> str:
    """What a prefix match of `word` looks for at the start of indexed stems: its stem ("docs" →
    "doc", so "documentation" is found), or the word as typed when the stem is shorter than
    `PREFIX_MIN` letters ("one" stems to "on", which would begin every "on…" word)."""
    stemmed = stem(word)
    return stemmed if len(stemmed) >= PREFIX_MIN else word


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]
    prefix: bool = False
    negated: bool = False
    quoted: bool = False

    @property
    def is_phrase(self) -> bool:
        return len(self.words) > 1


@dataclass
class ParsedQuery:
    """OR of groups of terms, in the order typed."""

    groups: list[list[Term]] = field(default_factory=list)

    def canonical(self) -> str:
        """A normalized text form: what cursors are bound to (same meaning → same string)."""
        parts = []
        for group in self.groups:
            items = []
            for term in group:
                text = " ".join(term.words)
                text = f'"{text}"' if term.quoted else text
                items.append(("-" if term.negated else "") + text + ("*" if term.prefix else ""))
            parts.append(" ".join(items))
        return " or ".join(parts)


def _make_terms(text: str, *, quoted: bool, negated: bool) -> list[Term]:
    prefix = not quoted and text.endswith("*")
    words = tuple(w.lower() for w in WORD_RE.findall(text))
    if not words or all(w in NO_CONTENT_WORDS for w in words):
        return []
    if len(words) == 1:
        return [Term(words=words, prefix=prefix, negated=negated)]
    if quoted or negated:
        return [Term(words=words, negated=negated, quoted=True)]
    # "coffee-shops" unquoted is two words, each matched on its own.
    return [Term(words=(w,)) for w in words if w not in NO_CONTENT_WORDS]


def parse_query(text: str) -> ParsedQuery:
    """Parse web-search syntax into groups of terms (pure; never raises)."""
    tokens: list[tuple[str, Term | None]] = []
    previous = ""  # the plain word typed before this one, lower-cased
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        negated = False
        if ch == "-" and i + 1 < n and not text[i + 1].isspace():
            negated = True
            i += 1
            ch = text[i]
        if ch == '"':
            end = text.find('"', i + 1)
            end = n if end == -1 else end
            terms = _make_terms(text[i + 1 : end], quoted=True, negated=negated)
            i = end + 1
        else:
            end = i
            while end < n and not text[end].isspace() and text[end] != '"':
                end += 1
            chunk = text[i:end]
            i = end
            if not negated and chunk.lower() == "or":
                tokens.append(("or", None))
                continue
            asks = QUESTION_PHRASES.get(previous, frozenset())
            previous = chunk.lower()
            if not negated and previous in asks:
                continue
            terms = _make_terms(chunk, quoted=False, negated=negated)
        tokens.extend(("term", term) for term in terms)

    groups: list[list[Term]] = [[]]
    count = 0
    for kind, term in tokens:
        if term is None or kind == "or":
            if groups[-1]:
                groups.append([])
            continue
        if count >= MAX_QUERY_ITEMS:
            break
        groups[-1].append(term)
        count += 1
    return ParsedQuery(groups=[g for g in groups if g])


# --- what a query searches for -----------------------------------------------------------------


@dataclass(frozen=True)
class QueryWord:
    """A positive query word and the tolerances it gets (computed once: ranking asks for them per
    candidate)."""

    text: str
    last: bool = False
    explicit_prefix: bool = False

    @cached_property
    def stem(self) -> str:
        return stem(self.text)

    @cached_property
    def prefix_lexeme(self) -> str:
        """What its prefix and compound matches look for at the start of indexed stems."""
        return prefix_lexeme(self.text)

    @cached_property
    def prefix_covers(self) -> bool:
        """Whether its prefix match also finds every item the word as written does."""
        return self.stem.startswith(self.prefix_lexeme)

    @cached_property
    def prefix(self) -> bool:
        """Matches indexed words it begins, as typed (the last word, or `word*`)."""
        return self.explicit_prefix or (self.last and len(self.text) >= PREFIX_MIN)

    @cached_property
    def compound(self) -> bool:
        """Matches indexed words it begins as a tolerance ("postgres" → "postgresql")."""
        return not self.prefix and len(self.text) >= COMPOUND_MIN and self.text.isalpha()

    @cached_property
    def edits(self) -> int:
        """How many typos the word tolerates when nothing matches it as written."""
        if not self.text.isalpha() or len(self.text) < TYPO_MIN:
            return 0
        return 2 if len(self.text) >= TYPO_TWO_MIN else 1

    @cached_property
    def surface_prefix(self) -> bool:
        """Type-ahead past the stem ("meetin" → "meeting") when nothing matches it as written."""
        return self.last and len(self.text) >= COMPOUND_MIN


@dataclass(frozen=True)
class Group:
    """One alternative: its positive words and phrases (indexes) and what it excludes."""

    words: tuple[int, ...]
    phrases: tuple[int, ...]
    negatives: tuple[Term, ...]


@dataclass(frozen=True)
class RecallQuery:
    words: tuple[QueryWord, ...]
    phrases: tuple[tuple[str, ...], ...]
    groups: tuple[Group, ...]
    canonical: str

    @property
    def has_content(self) -> bool:
        return bool(self.words or self.phrases)

    @property
    def negatives(self) -> tuple[Term, ...]:
        return tuple(t for g in self.groups for t in g.negatives)

    @property
    def strict(self) -> bool:
        """Some alternative requires a phrase or excludes something."""
        return any(g.phrases or g.negatives for g in self.groups)


def analyze(text: str) -> RecallQuery:
    """The words, phrases and alternatives of a query text (pure; never raises)."""
    parsed = parse_query(text)
    order: list[str] = []
    explicit: set[str] = set()
    phrases: list[tuple[str, ...]] = []
    groups: list[Group] = []
    for group in parsed.groups:
        word_ids: list[int] = []
        phrase_ids: list[int] = []
        negatives: list[Term] = []
        for term in group:
            if term.negated:
                negatives.append(term)
            elif term.quoted:
                if term.words not in phrases:
                    phrases.append(term.words)
                phrase_ids.append(phrases.index(term.words))
            else:
                word = term.words[0]
                if word not in order:
                    order.append(word)
                if term.prefix:
                    explicit.add(word)
                if order.index(word) not in word_ids:
                    word_ids.append(order.index(word))
        groups.append(Group(tuple(word_ids), tuple(phrase_ids), tuple(negatives)))
    last_typed = _last_plain_word(parsed)
    words = tuple(QueryWord(text=w, last=(w == last_typed), explicit_prefix=(w in explicit)) for w in order)
    kept = tuple(g for g in groups if g.words or g.phrases) or tuple(groups)
    return RecallQuery(words=words, phrases=tuple(phrases), groups=kept, canonical=parsed.canonical())


def _last_plain_word(parsed: ParsedQuery) -> str | None:
    """The word typed last, when the query ends with a plain word."""
    if not parsed.groups:
        return None
    term = parsed.groups[-1][-1]
    return None if term.negated or term.quoted else term.words[0]
