"""Retrieval quality per fusion mode on the fixed test set (tests/fixtures/retrieval/), as JSON.

    python bench/retrieval.py [--provider local] [--min-score 0.35]

Indexes the fixture workspace with the real pipeline code (``memoryd.shared.indexing.index_now``)
and the local MiniLM model, then asks every question in every mode with the default
``maxResults`` 6 and ``minScore`` 0.35 — what an agent gets. Prints recall@1/3/6 and
MRR per mode (overall and per kind of question), and for the unanswerable questions the
mean number of results still returned (noise: lower is better). Takes ~15 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from retrieval_set import Question, build, evaluate, misses, questions  # noqa: E402

from memoryd.services.query.engine import QueryService  # noqa: E402
from memoryd.services.query.models import SearchRequest  # noqa: E402

MODES = ("rrf", "weighted", "keyword", "vector")


def unanswerable() -> list[str]:
    data = json.loads((REPO / "tests" / "fixtures" / "retrieval" / "questions.json").read_text(encoding="utf-8"))
    return data["unanswerable"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="local", help="embedding provider (default local MiniLM)")
    parser.add_argument("--min-score", type=float, help="override minScore (default: the configured 0.35)")
    args = parser.parse_args()
    request = {} if args.min_score is None else {"min_score": args.min_score}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        settings = build(Path(tmp), provider=args.provider)
        indexed = time.perf_counter() - started
        service = QueryService(settings)
        qs = questions()
        kinds = sorted({q.kind for q in qs})
        report: dict = {"provider": args.provider, "questions": len(qs), "index_seconds": round(indexed, 2),
                        "modes": {}, "by_kind": {}, "noise": {}, "misses@3": {}}
        for mode in MODES:
            report["modes"][mode] = evaluate(service, qs, mode, **request)
            report["by_kind"][mode] = {
                kind: evaluate(service, [q for q in qs if q.kind == kind], mode, **request) for kind in kinds
            }
            report["noise"][mode] = _noise(service, mode, request)
        for mode in ("rrf", "weighted"):
            report["misses@3"][mode] = misses(service, qs, mode, 3)
        service.close()
    print(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


def _noise(service: QueryService, mode: str, request: dict) -> float:
    """Mean results returned for questions memory cannot answer."""
    counts = [len(service.search("main", SearchRequest(query=q, fusion=mode, **request)).results)
              for q in unanswerable()]
    return round(sum(counts) / len(counts), 2)


__all__ = ["Question", "main"]

if __name__ == "__main__":
    sys.exit(main())
