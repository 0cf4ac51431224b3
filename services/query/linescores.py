"""How near each line of a result is to the question: the cosines of its chunks' window vectors.

A chunk of an in-process model has a vector per window of a few lines, and the index knows each
window's lines (shared/embed/windowlines.py). A line's nearness is the best cosine of the windows
that hold it, mapped onto 0..1 as fusion maps the vector side (``fusion.vector_evidence``'s span,
not clipped). The snippet (services/query/snippets.py) weighs it beside the query's terms: in a
conversation the answer is often the line after the one that repeats the question's words, and
only the vectors see that it is the answer. A few window rows per result, read by rowid: no scan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from memoryd.services.query.agentindex import Snapshot
from memoryd.services.query.fusion import Span
from memoryd.services.query.ranking import Passage
from memoryd.services.query.vectors import VectorIndex


def nearness(index: Snapshot, matrix: VectorIndex | None, query: np.ndarray, passages: Sequence[Passage],
             span: Span) -> list[list[float] | None]:
    """Per passage, the nearness of each of its lines (NaN where no window says); None for a passage
    none of whose lines is known (a remote model's one vector a chunk, an index written before)."""
    none: list[list[float] | None] = [None] * len(passages)
    if matrix is None or span is None or span[1] <= span[0]:
        return none
    place = {cid: (p.path, row.start_line) for p in passages for cid, row in zip(p.ids, p.members, strict=True)}
    windows = index.windows(list(place))
    if not windows:
        return none
    cosines = matrix.scores(query, np.asarray([w[1] for w in windows], dtype=np.int64))
    lo, hi = span
    by_line: dict[tuple[str, int], float] = {}  # (path, line) → the best nearness of a window holding it
    for (cid, _, first, last), cosine in zip(windows, cosines, strict=True):
        if math.isnan(cosine):
            continue
        path, start = place[cid]
        for line in range(start + first, start + last + 1):
            by_line[path, line] = max(by_line.get((path, line), -math.inf), (float(cosine) - lo) / (hi - lo))
    out: list[list[float] | None] = []
    for p in passages:
        lines = [by_line.get((p.path, n), math.nan) for n in range(p.start_line, p.end_line + 1)]
        out.append(None if all(math.isnan(x) for x in lines) else lines)
    return out
