"""What memory_search does after fusion: date windows, source balance, temporal decay, MMR, widening.

Each step is a small function over fused candidates — pure, but for widening, which reads the
chunks around a result through the function it is given — so each can be measured alone
(bench/retrieval.py ``--set``) and tested alone (tests/test_query_ranking.py):

- **dates**: a file's date is the ISO date its *name* starts with (``memory/2026-01-20.md``,
  ``memory/2026-01-20-standup.md``; ``memoryd.services.query.dates``); ``MEMORY.md`` and other files
  have none. The ``after``/``before`` filters keep dated files inside the window (inclusive) and drop
  undated ones: a question about a time window is about the notes of that window.
- **source balance**: results of another source than ``memory`` (an extraPath such as
  ``kb``) are weighed by ``otherSourceWeight`` (0.9), so a long knowledge-base page that
  says something similar does not push the agent's own memory of it down.
- **temporal decay**: a dated note's score × 2^(−age/halfLife), age counted from the newest
  dated note of the index (not the clock: a memory left alone for months keeps its
  answers); undated files never decay. It orders what passed minScore and removes nothing
  (cutting after it emptied answers). Off by default — it lost recall on the set.
- **passages**: chunks of one file that touch (one ends on the line before the other starts)
  and both passed are joined into one result, best chunk first, up to ``passages.maxTokens``
  (400, the chunk size of the seed): the chunker cuts short chunks where the text picks (so an
  edit re-embeds one or two), and two neighbours that both answer are one stretch of memory to
  read, not two results. The freed place goes to the next answer.
- **MMR** (maximal marginal relevance, Carbonell & Goldstein): the results are picked one
  by one, each maximising ``λ × score − (1 − λ) × (highest similarity to one already
  picked)``; similarity is the Jaccard overlap of the chunks' word sets (no vectors
  needed, so it works in keyword-only answers too), a passage's words those of its chunks.
  The picked results are returned in score order.
- **widening** (after MMR, on the picked results): each is filled up to ``passages.maxTokens``
  with the chunks of its file around it, the next one and the one before in turn (a chunk of
  another result is never taken): the question's words and its answer often sit in
  neighbouring chunks ("change of plan for Christmas" | "they're all coming here to Ludlow"),
  and the seed's 400-token chunk would have held both.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from memoryd.services.query.dates import path_date
from memoryd.services.query.fusion import Candidate
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import QuerySettings

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class ChunkRow(NamedTuple):
    """A chunk as a search reads it from the index."""

    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    tokens: int


@dataclass
class Passage:
    """One result: a chunk, or chunks of one file that touch, joined; ``ids`` best first."""

    ids: list[int]
    path: str
    start_line: int
    end_line: int
    tokens: int
    members: list[ChunkRow] = field(default_factory=list)

    @classmethod
    def of(cls, cid: int, row: ChunkRow) -> Passage:
        return cls([cid], row.path, row.start_line, row.end_line, row.tokens, [row])

    @property
    def best(self) -> int:
        return self.ids[0]

    @property
    def text(self) -> str:
        """The passage's lines, from its chunks in line order, a line that two chunks share (a
        chunk's overlap) once: what MMR compares and the snippet is cut from."""
        lines: list[str] = []
        last = 0
        for row in sorted(self.members, key=lambda row: row.start_line):
            own = row.text.split("\n")
            lines += own[max(last - row.start_line + 1, 0):]
            last = max(last, row.end_line)
        return "\n".join(lines)

    def touches(self, row: ChunkRow) -> bool:
        return row.path == self.path and row.start_line <= self.end_line + 1 and row.end_line >= self.start_line - 1

    def add(self, cid: int, row: ChunkRow) -> None:
        self.ids.append(cid)
        self.members.append(row)
        self.start_line, self.end_line = min(self.start_line, row.start_line), max(self.end_line, row.end_line)
        self.tokens += row.tokens


@dataclass(frozen=True)
class DateWindow:
    """Inclusive bounds on a file's date; a window with a bound excludes undated files."""

    after: dt.date | None = None
    before: dt.date | None = None

    @property
    def open(self) -> bool:
        return self.after is None and self.before is None

    def holds(self, path: str) -> bool:
        if self.open:
            return True
        day = path_date(path)
        if day is None:
            return False
        return (self.after is None or day >= self.after) and (self.before is None or day <= self.before)


def depth(limit: int, window: DateWindow) -> int:
    """Candidates the vector side returns for ``limit`` wanted inside ``window``."""
    return limit if window.open else limit * d.WIDEN_WINDOW_DEPTH


def decay(path: str, newest: dt.date | None, half_life_days: float) -> float:
    """2^(−age/halfLife) for a dated file, age in days before ``newest``; 1.0 for undated files."""
    day = path_date(path)
    if day is None or newest is None:
        return 1.0
    age = max((newest - day).days, 0)
    return float(0.5 ** (age / half_life_days))


def source_weight(source: str, other_source_weight: float) -> float:
    """1.0 for the agent's own memory, ``other_source_weight`` for extraPaths' sources."""
    return 1.0 if source == "memory" else other_source_weight


@functools.lru_cache(maxsize=4096)
def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def mmr(ids: Sequence[int], score: Callable[[int], float], text: Callable[[int], str], k: int,
        lam: float) -> list[int]:
    """``k`` of ``ids`` (given best first) chosen by maximal marginal relevance, in pick order.

    Each candidate's highest similarity to the picked ones is kept up to date with the last
    pick only: k × pool overlaps, not k² × pool.
    """
    pool = list(ids[:k * d.MMR_POOL])
    words = {cid: _words(text(cid)) for cid in pool}
    nearest = dict.fromkeys(pool, 0.0)
    picked: list[int] = []
    while pool and len(picked) < k:
        best = max(pool, key=lambda cid: lam * score(cid) - (1 - lam) * nearest[cid])
        picked.append(best)
        pool.remove(best)
        for cid in pool:
            nearest[cid] = max(nearest[cid], _overlap(words[cid], words[best]))
    return picked


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def join(ids: Sequence[int], rows: Mapping[int, ChunkRow], max_tokens: int) -> list[Passage]:
    """The chunks ``ids`` (best first) as passages, in the order of their best chunk: each chunk
    joins the first passage it touches that has room for it (``max_tokens``; 0 joins nothing),
    else starts its own. Only the passages of the chunk's own file are looked at."""
    passages: list[Passage] = []
    by_path: dict[str, list[Passage]] = {}
    for cid in ids:
        row = rows[cid]
        same_file = by_path.setdefault(row.path, [])
        home = next((p for p in same_file if p.tokens + row.tokens <= max_tokens and p.touches(row)), None)
        if home is None:
            home = Passage.of(cid, row)
            passages.append(home)
            same_file.append(home)
        else:
            home.add(cid, row)
    return passages


def widen(passages: Sequence[Passage], around: Callable[[str, int, int], Mapping[int, ChunkRow]],
          max_tokens: int) -> None:
    """Fill each passage up to ``max_tokens`` with the chunks of its file that touch it (``around``:
    path, first line, last line → those chunks), the next one then the one before, in turn; a chunk
    of another passage is never taken."""
    taken = {cid for passage in passages for cid in passage.ids}
    for passage in passages:
        grew = True
        while grew:
            near = [(cid, row) for cid, row in around(passage.path, passage.start_line, passage.end_line).items()
                    if cid not in taken and passage.tokens + row.tokens <= max_tokens]
            after = min((n for n in near if n[1].end_line > passage.end_line), key=lambda n: n[1].start_line,
                        default=None)
            before = max((n for n in near if n[1].start_line < passage.start_line), key=lambda n: n[1].end_line,
                         default=None)
            grew = False
            for cid, row in (n for n in (after, before) if n is not None):
                if passage.tokens + row.tokens <= max_tokens:
                    passage.add(cid, row)
                    taken.add(cid)
                    grew = True


def select(cands: Mapping[int, Candidate], rows: Mapping[int, ChunkRow], query: QuerySettings,
           window: DateWindow, newest: dt.date | None, min_score: float, k: int) -> list[Passage]:
    """The results, best first: fused scores weighed (source balance, temporal decay), kept inside
    ``window`` and at or over ``min_score``, touching chunks joined into passages, diversified by MMR."""
    balance, decayed = query.source_balance, query.temporal_decay
    scored = []
    for cid, c in cands.items():
        row = rows.get(cid)
        if row is None or not window.holds(row.path):
            continue  # a row gone since the vector matrix was read, or outside the dates asked for
        c.weight = source_weight(row.source, balance.other_source_weight) if balance.enabled else 1.0
        c.fused *= c.weight
        passes = c.fused >= min_score  # decay orders what passes; it does not push an answer under minScore
        if decayed.enabled:
            factor = decay(row.path, newest, decayed.half_life_days)
            c.weight *= factor
            c.fused *= factor
        if passes:
            # ties by place, not row id: a rebuilt or replayed index answers exactly as the live one
            scored.append((-c.fused, c.text_rank or 10**9, c.vector_rank or 10**9, row.path, row.start_line,
                           row.end_line, cid))
    scored.sort()
    passages = join([entry[-1] for entry in scored], rows,
                    query.passages.max_tokens if query.passages.enabled else 0)
    if not query.mmr.enabled:
        return passages[:k]
    order = list(range(len(passages)))
    picked = set(mmr(order, lambda i: cands[passages[i].best].fused, lambda i: passages[i].text, k,
                     query.mmr.lambda_))
    return [p for i, p in enumerate(passages) if i in picked]
