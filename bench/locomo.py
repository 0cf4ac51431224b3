"""locomo-dev (``../shared/locomo-dev``): five real LoCoMo conversations, scored as the held-out test scores them.

Read by bench/retrieval.py (``--locomo DIR``). Each ``conv-XX/`` is one agent's workspace
(``memory/YYYY-MM-DD.md``, one file per session date, one ``- **Speaker**: text`` line per
turn) with ``qrels.jsonl`` beside it. The workspaces are copied under the benchmark's work
directory (never into the repository), each indexed as its own agent with the default
settings through the real pipeline code (``recall_set.build``, i.e.
``memoryd.shared.indexing.index_now``), and every question of categories 1–4 that has
evidence is asked as the default call does: the question and nothing else (maxResults 6,
minScore 0.35). A hit is a result of the evidence's path whose ``startLine..endLine`` holds an
evidence line; it is *in the snippet* when that line's text is in the result's snippet.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inline_index import index_now
from recall_set import merge

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings

#: The categories the held-out test counts (5, adversarial, has no answer in the conversation).
SCORED = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
K = 6


@dataclass(frozen=True)
class Question:
    qid: str
    conv: str
    category: int
    q: str
    evidence: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Outcome:
    question: Question
    hit: bool
    in_snippet: bool
    returned: int
    lines: int  # lines the results span, together
    chars: int  # snippet characters, together


def conversations(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "qrels.jsonl").is_file())


def questions(root: Path) -> list[Question]:
    out = []
    for conv in conversations(root):
        for line in (root / conv / "qrels.jsonl").read_text(encoding="utf-8").splitlines():
            x = json.loads(line)
            evidence = tuple((e["path"], int(e["line"])) for e in x["evidence"])
            if x["category"] in SCORED and evidence:
                out.append(Question(x["qid"], conv, x["category"], x["question"], evidence))
    return out


def build(directory: Path, root: Path, provider: str, search: dict[str, Any]) -> Settings:
    """Copy each conversation's workspace under ``directory`` (once), index each as its own agent."""
    entries = []
    for conv in conversations(root):
        target = directory / "locomo" / conv
        if not target.exists():
            shutil.copytree(root / conv, target, ignore=shutil.ignore_patterns("qrels.jsonl"))
        entries.append({"id": conv, "workspace": str(target)})
    config = {"agents": {"defaults": {"memorySearch": merge({"provider": provider}, search)}, "list": entries},
              "memoryd": {"stateDir": str(directory / "locomo-state")}}
    path = directory / "locomo.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    settings = load_settings(path, state_dir=directory / "locomo-state")
    for entry in entries:
        index_now(settings, entry["id"])
    return settings


def _lines(root: Path, conv: str, path: str) -> list[str]:
    return (root / conv / path).read_text(encoding="utf-8").split("\n")


def ask(service: QueryService, root: Path, qs: Iterable[Question]) -> list[Outcome]:
    files: dict[tuple[str, str], list[str]] = {}
    out = []
    for q in qs:
        results = service.search(q.conv, SearchRequest(query=q.q, max_results=K)).results
        hit = in_snippet = False
        for r in results:
            for path, line in q.evidence:
                if r.path == path and r.start_line <= line <= r.end_line:
                    hit = True
                    text = files.setdefault((q.conv, path), _lines(root, q.conv, path))[line - 1]
                    in_snippet = in_snippet or text in r.snippet
        out.append(Outcome(q, hit, in_snippet, len(results), sum(r.end_line - r.start_line + 1 for r in results),
                           sum(len(r.snippet) for r in results)))
    return out


def score(outcomes: list[Outcome]) -> dict[str, float | int]:
    n = len(outcomes) or 1
    return {"n": len(outcomes),
            f"R@{K}": round(sum(o.hit for o in outcomes) / n, 3),
            f"R@{K} in snippet": round(sum(o.in_snippet for o in outcomes) / n, 3),
            "empty": sum(1 for o in outcomes if not o.returned),
            "lines/call": round(sum(o.lines for o in outcomes) / n, 1),
            "snippet chars/call": round(sum(o.chars for o in outcomes) / n, 0)}


def report(outcomes: list[Outcome]) -> dict[str, Any]:
    return {"all": score(outcomes),
            "by_category": {name: score([o for o in outcomes if o.question.category == cat])
                            for cat, name in SCORED.items()}}
