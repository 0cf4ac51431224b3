"""The recall evaluation set: tests/fixtures/recall/ indexed for real and scored as an agent sees it.

Each ``wsNN/`` is one agent's workspace of daily notes; ``questions.json`` asks questions of
it with the lines that answer them. :func:`build` copies every workspace under a
directory, registers one agent per workspace (id = ``wsNN``, its ``extraPaths`` as given)
and indexes each in-process with ``tests/inline_index.py's index_now``; :func:`score` asks
the questions through ``QueryService.search`` and counts hits.

A result *hits* a question when its path is one of the expected paths and its line range
holds that expected line. recall@k = share of questions with a hit among the first k
results (R@1/3/6 from a call with maxResults 6, the default an agent gets; R@10 from a
call with maxResults 10); MRR over the maxResults-6 call; ``empty`` = answerable
questions that got no result at all; ``lines/result`` = the mean lines a result of the
maxResults-6 call spans (a wider result holds more answers, and costs the agent more to
read). Used by bench/retrieval.py (the tables) and tests/test_query_retrieval.py (the
asserts on a fast subset).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings

FIXTURE = Path(__file__).parent / "fixtures" / "recall"
#: recall@k for these k; 6 is the default maxResults, 10 what users raise it to.
KS = (1, 3, 6, 10)


@dataclass(frozen=True)
class Question:
    id: str
    ws: str
    kind: str
    split: str
    q: str
    expect: tuple[tuple[str, int], ...]
    #: The workspace's kind of text: "notes" (an agent's daily notes) or "conversation" (two
    #: people's chat sessions written as daily notes, the external benchmark's shape).
    style: str = "notes"


def load(fixture: Path = FIXTURE) -> dict[str, Any]:
    return json.loads((fixture / "questions.json").read_text(encoding="utf-8"))


def questions(fixture: Path = FIXTURE) -> list[Question]:
    data = load(fixture)
    styles = {ws: entry.get("style", "notes") for ws, entry in data["workspaces"].items()}
    return [Question(x["id"], x["ws"], x["kind"], x["split"], x["q"], tuple((p, int(n)) for p, n in x["expect"]),
                     styles[x["ws"]])
            for x in data["questions"]]


def unanswerable(fixture: Path = FIXTURE) -> list[tuple[str, str]]:
    """(workspace, question) pairs the workspace holds no answer to."""
    return [(x["ws"], x["q"]) for x in load(fixture)["unanswerable"]]


def build(directory: Path, provider: str = "local", workspaces: Iterable[str] | None = None,
          search: dict[str, Any] | None = None, fixture: Path = FIXTURE) -> Settings:
    """Copy the workspaces under ``directory`` (once), index each in-process, return the settings.

    ``search``: extra ``memorySearch`` settings (camelCase, as in the config file) for every
    agent, e.g. ``{"query": {"mmr": {"enabled": False}}}``. An index already in
    ``directory`` whose fingerprint still matches is brought up to date, not rebuilt.
    """
    data = load(fixture)
    wanted = sorted(workspaces or data["workspaces"])
    entries = []
    for ws in wanted:
        target = directory / "workspaces" / ws
        if not target.exists():
            shutil.copytree(fixture / ws, target)
        entry: dict[str, Any] = {"id": ws, "workspace": str(target)}
        entry["extraPaths"] = data["workspaces"][ws].get("extraPaths", [])
        entries.append(entry)
    memory_search = merge({"provider": provider}, search or {})
    config = {"agents": {"defaults": {"memorySearch": memory_search}, "list": entries},
              "memoryd": {"stateDir": str(directory / "state")}}
    path = directory / "memoryd.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    # state_dir beats $MEMORYD_STATE_DIR, which the tests' autouse fixture points at tmp.
    settings = load_settings(path, state_dir=directory / "state")
    for ws in wanted:
        index_now(settings, ws)
    return settings


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` laid over ``base``; nested objects are merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def hit_rank(results: list[Any], question: Question) -> int | None:
    """1-based rank of the first result holding an expected line, or None."""
    for rank, result in enumerate(results, start=1):
        for path, line in question.expect:
            if result.path == path and result.start_line <= line <= result.end_line:
                return rank
    return None


@dataclass
class Outcome:
    question: Question
    rank: int | None  # first hit in the maxResults-6 answer
    rank10: int | None  # first hit in the maxResults-10 answer
    returned: int  # results of the maxResults-6 answer
    lines: int  # lines the maxResults-6 answer's results span, together


def ask(service: QueryService, qs: Iterable[Question], fusion: str | None = None,
        **request: Any) -> list[Outcome]:
    """Every question twice (maxResults 6 and 10) with ``fusion`` (None = the configured default)."""
    out = []
    for q in qs:
        six = service.search(q.ws, SearchRequest(query=q.q, fusion=fusion, max_results=6, **request)).results
        ten = service.search(q.ws, SearchRequest(query=q.q, fusion=fusion, max_results=10, **request)).results
        spans = sum(r.end_line - r.start_line + 1 for r in six)
        out.append(Outcome(q, hit_rank(six, q), hit_rank(ten, q), len(six), spans))
    return out


def score(outcomes: list[Outcome]) -> dict[str, float | int]:
    """R@1/3/6/10, MRR, empty answers, the mean lines of a result (what an agent reads) and the
    question count of some outcomes."""
    n = len(outcomes) or 1
    out: dict[str, float | int] = {"n": len(outcomes)}
    for k in KS:
        ranks = [o.rank10 if k > 6 else o.rank for o in outcomes]
        out[f"R@{k}"] = round(sum(1 for r in ranks if r is not None and r <= k) / n, 3)
    out["MRR"] = round(sum(1.0 / o.rank for o in outcomes if o.rank) / n, 3)
    out["empty"] = sum(1 for o in outcomes if o.returned == 0)
    out["lines/result"] = round(sum(o.lines for o in outcomes) / max(sum(o.returned for o in outcomes), 1), 1)
    return out


def noise(service: QueryService, fusion: str | None = None, fixture: Path = FIXTURE,
          workspaces: Iterable[str] | None = None) -> dict[str, float | int]:
    """For the unanswerable questions: how many got any result, and the mean number returned."""
    keep = set(workspaces) if workspaces is not None else None
    pairs = [(ws, q) for ws, q in unanswerable(fixture) if keep is None or ws in keep]
    counts = [len(service.search(ws, SearchRequest(query=q, fusion=fusion)).results) for ws, q in pairs]
    return {"n": len(counts), "answered": sum(1 for c in counts if c),
            "mean_results": round(sum(counts) / max(len(counts), 1), 2)}
