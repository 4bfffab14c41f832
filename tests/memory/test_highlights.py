"""Highlights: the words of an item that made it match, whatever shortcut finds them first."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memory.search import Hit, RecallQuery, analyze, highlights
from memory.search.query import NO_CONTENT_WORDS, WORD_RE, _stemmer, stem
from memory.search.scoring import COMPOUND, EXACT, PREFIX, TYPO, token_matches

# Mixed case, accents, letters whose lower case is longer or special (İ, Σ, the Kelvin sign), digits.
WORDS = [
    "Coffee",
    "coffees",
    "COFFEE",
    "cofee",
    "café",
    "Straße",
    "İstanbul",
    "istanbul",
    "ΟΔΟΣ",
    "οδος",
    "\u212aelvin",
    "kelvin",
    "postgres",
    "PostgreSQL",
    "run",
    "Running",
    "runner",
    "2024",
    "one",
    "only",
    "the",
    "Meeting",
    "meetin",
    "dog's",
]
SEPARATORS = [" ", "-", "_", ". ", "'", "\n", ", "]


def _word_by_word(query: RecallQuery, hit: Hit, texts: list[str]) -> list[str]:
    """Every word of the texts checked against every way the hit matched, no shortcut."""
    phrase_stems = {stem(w) for phrase in query.phrases for w in phrase if w not in NO_CONTENT_WORDS}
    found: dict[str, None] = {}
    for text in texts:
        for token in WORD_RE.findall(text):
            lowered = token.lower()
            if (phrase_stems and stem(lowered) in phrase_stems) or any(
                token_matches(query.words[i], lowered, kind) for i, kind in hit.kinds
            ):
                found.setdefault(lowered, None)
    return list(found)


texts = st.lists(
    st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=12).map(
        lambda parts: "".join(word + separator for word, separator in parts)
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    typed=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    quoted=st.booleans(),
    picks=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    item=texts,
)
def test_highlights_are_the_words_a_word_by_word_reading_finds(typed, quoted, picks, item):
    text = " ".join(typed)
    query = analyze(f'"{text}"' if quoted else text)
    kinds: list[tuple[int, str]] = []
    for i, word in enumerate(query.words):
        allowed = [EXACT, *([PREFIX] if word.prefix else []), *([COMPOUND] if word.compound else [])]
        allowed += [TYPO] if word.edits else []
        kinds.append((i, allowed[picks[i % len(picks)] % len(allowed)]))
    hit = Hit(pk=1, tier=0, score=0.0, matched=(), match="some", kinds=tuple(kinds))

    assert highlights(query, hit, item) == _word_by_word(query, hit, item)


def test_words_are_stemmed_by_the_compiled_snowball_stemmer():
    assert type(_stemmer()).__module__ == "Stemmer"
    assert _stemmer().stemWord("organizational") == "organiz"
