"""A result's snippet: at most ``d.SNIPPET_MAX_CHARS`` of its text, from the lines that answer.

A result is a passage of up to 400 tokens (~1,600 characters of conversation) and its
snippet holds 700: which 700 decides whether the agent sees the answer without a
``memory_get``. The snippet is the run of whole lines (from a line's start; the last one
may be cut) that holds the most of the query's terms, each term counted once with its IDF
weight — so a rare word ("sunrise") outweighs a name that is on every line of a
conversation ("Caroline"). Of runs that hold as much, the one starting nearest the best
chunk's first line wins (the chunk that ranked, where the vector side found it); with no
term in the text at all, the snippet starts there.

Where the vector side knows how near each line is to the question (its window vectors:
services/query/linescores.py), a run also scores the mean nearness of its two nearest lines,
``d.SNIPPET_NEAR_WEIGHT`` to the share of the terms' weight it holds: in a conversation the answer
is often the reply after the line that repeats the question's words ("How long have you been into
art?" — "Seven years now"), and only the vectors see it (locomo-dev: the answer line in the
snippet for 0.782 of the questions on terms alone; docs/query.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from memoryd.services.query.keyword import Term, token_string
from memoryd.shared import defaults as d


def snippet(text: str, terms: Sequence[Term], weights: Sequence[float], anchor: int,
            near: Sequence[float] | None = None) -> str:
    """The snippet of ``text``; ``anchor``: the 0-based line of ``text`` where its best chunk starts;
    ``near``: each line's nearness to the question (NaN: not known), or None."""
    if len(text) <= d.SNIPPET_MAX_CHARS:
        return text
    lines = text.split("\n")
    if near is not None and len(near) != len(lines):
        near = None
    return "\n".join(lines[start(lines, terms, weights, anchor, near):])[:d.SNIPPET_MAX_CHARS]


def start(lines: list[str], terms: Sequence[Term], weights: Sequence[float], anchor: int,
          near: Sequence[float] | None = None) -> int:
    """The first line of the snippet among ``lines`` (see the module's docstring)."""
    keyworded = len(weights) == len(terms)  # else no keyword side (a vector-only answer)
    if not keyworded and near is None:
        return anchor
    found = [frozenset(i for i, term in enumerate(terms) if term.found_in(token_string(line))) if keyworded
             else frozenset() for line in lines]
    total = (sum(weights) if keyworded else 0.0) or 1.0
    best, best_key = anchor, (0.0, 0)
    for first in range(len(lines)):
        held: set[int] = set()
        size, last = 0, first
        while last < len(lines) and (last == first or size + len(lines[last]) <= d.SNIPPET_MAX_CHARS):
            held |= found[last]
            size += len(lines[last]) + 1
            last += 1
        score = sum(weights[i] for i in held) / total
        if near is not None:
            score += d.SNIPPET_NEAR_WEIGHT * _nearest_two(near[first:last])
        key = (score, -abs(first - anchor))
        if key[0] > best_key[0] or (key[0] == best_key[0] > 0 and key[1] > best_key[1]):
            best, best_key = first, key
    return best


def _nearest_two(near: Sequence[float]) -> float:
    """The mean nearness of a run's two nearest lines (its one known line; 0 when none is known)."""
    known = sorted((x for x in near if not math.isnan(x)), reverse=True)[:2]
    return sum(known) / len(known) if known else 0.0
