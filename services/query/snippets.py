"""A result's snippet: at most ``d.SNIPPET_MAX_CHARS`` of its text, from the lines that answer.

A result is a passage of up to 400 tokens (~1,600 characters of conversation) and its
snippet holds 700: which 700 decides whether the agent sees the answer without a
``memory_get``. The snippet is the run of whole lines (from a line's start; the last one
may be cut) that holds the most of the query's terms, each term counted once with its IDF
weight — so a rare word ("sunrise") outweighs a name that is on every line of a
conversation ("Caroline"). Of runs that hold as much, the one starting nearest the best
chunk's first line wins (the chunk that ranked, where the vector side found it); with no
term in the text at all, the snippet starts there.
"""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.services.query.keyword import Term, token_string
from memoryd.shared import defaults as d


def snippet(text: str, terms: Sequence[Term], weights: Sequence[float], anchor: int) -> str:
    """The snippet of ``text``; ``anchor``: the 0-based line of ``text`` where its best chunk starts."""
    if len(text) <= d.SNIPPET_MAX_CHARS:
        return text
    lines = text.split("\n")
    return "\n".join(lines[start(lines, terms, weights, anchor):])[:d.SNIPPET_MAX_CHARS]


def start(lines: list[str], terms: Sequence[Term], weights: Sequence[float], anchor: int) -> int:
    """The first line of the snippet among ``lines`` (see the module's docstring)."""
    if len(weights) != len(terms):  # no keyword side (a vector-only answer): the best chunk's start
        return anchor
    found = [frozenset(i for i, term in enumerate(terms) if term.found_in(token_string(line))) for line in lines]
    best, best_key = anchor, (0.0, 0)
    for first in range(len(lines)):
        held: set[int] = set()
        size, last = 0, first
        while last < len(lines) and (last == first or size + len(lines[last]) <= d.SNIPPET_MAX_CHARS):
            held |= found[last]
            size += len(lines[last]) + 1
            last += 1
        key = (sum(weights[i] for i in held), -abs(first - anchor))
        if key[0] > best_key[0] or (key[0] == best_key[0] > 0 and key[1] > best_key[1]):
            best, best_key = first, key
    return best
