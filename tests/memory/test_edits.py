"""Typo tolerance: `within_edits` is the optimal string alignment distance, whichever shortcut answers."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from memory.search.scoring import within_edits


def _distance(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and adjacent swaps, the full table."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def test_every_pair_of_short_words_over_three_letters():
    words = ["".join(p) for n in range(5) for p in itertools.product("abc", repeat=n)]
    for a, b in itertools.product(words, repeat=2):
        distance = _distance(a, b)
        for k in (0, 1, 2):
            assert within_edits(a, b, k) == (distance <= k), (a, b, k)


@given(
    a=st.text(alphabet="abcdxy", min_size=5, max_size=12),
    edits=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 12), st.sampled_from("abcdxy")), max_size=3),
)
def test_words_a_few_edits_from_a_long_word(a, edits):
    b = list(a)
    for op, at, letter in edits:
        at = min(at, len(b))
        if op == 0:
            b.insert(at, letter)
        elif op == 1 and at < len(b):
            del b[at]
        elif op == 2 and at < len(b):
            b[at] = letter
        elif op == 3 and at + 1 < len(b):
            b[at], b[at + 1] = b[at + 1], b[at]
    typed = "".join(b)
    distance = _distance(a, typed)
    for k in (1, 2):
        assert within_edits(a, typed, k) == (distance <= k)
