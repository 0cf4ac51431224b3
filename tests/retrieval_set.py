"""The retrieval test set: tests/fixtures/retrieval/ indexed for real, and hit@k / MRR over its questions.

Used by tests/test_query_retrieval.py (asserts) and bench/retrieval.py (prints the table),
so both measure the same thing: what ``memory_search`` returns with the default
``maxResults`` and ``minScore``, the answer an agent actually gets.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings

FIXTURE = Path(__file__).parent / "fixtures" / "retrieval"
#: recall@k is reported for these k; the largest is the default maxResults.
KS = (1, 3, 6)


@dataclass(frozen=True)
class Question:
    kind: str
    q: str
    expect: tuple[tuple[str, int], ...]


def questions() -> list[Question]:
    data = json.loads((FIXTURE / "questions.json").read_text(encoding="utf-8"))
    return [Question(x["kind"], x["q"], tuple((p, int(line)) for p, line in x["expect"])) for x in data["questions"]]


def build(directory: Path, provider: str = "local") -> Settings:
    """Copy the fixture workspace under ``directory``, index it in-process, return its settings."""
    data = json.loads((FIXTURE / "questions.json").read_text(encoding="utf-8"))
    workspace = directory / "workspace"
    shutil.copytree(FIXTURE / "workspace", workspace)
    config = {
        "agents": {
            "defaults": {"memorySearch": {"provider": provider, "chunking": data["chunking"],
                                          "extraPaths": data["extraPaths"]}},
            "list": [{"id": "main", "workspace": str(workspace)}],
        },
        "memoryd": {"stateDir": str(directory / "state")},
    }
    path = directory / "memoryd.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    # state_dir beats $MEMORYD_STATE_DIR, which the autouse fixture points at the test's tmp dir.
    settings = load_settings(path, state_dir=directory / "state")
    index_now(settings, "main")
    return settings


def first_hit(service: QueryService, question: Question, fusion: str, **request: object) -> int | None:
    """1-based rank of the first result holding an expected line, or None."""
    answer = service.search("main", SearchRequest(query=question.q, fusion=fusion, **request))
    for rank, result in enumerate(answer.results, start=1):
        for path, line in question.expect:
            if result.path == path and result.start_line <= line <= result.end_line:
                return rank
    return None


def evaluate(service: QueryService, qs: list[Question], fusion: str, **request: object) -> dict[str, float]:
    """recall@1/3/6 and MRR (over the returned results) of one fusion mode."""
    ranks = [first_hit(service, q, fusion, **request) for q in qs]
    out = {f"recall@{k}": round(sum(1 for r in ranks if r is not None and r <= k) / len(qs), 3) for k in KS}
    out["mrr"] = round(sum(1.0 / r for r in ranks if r is not None) / len(qs), 3)
    return out


def misses(service: QueryService, qs: list[Question], fusion: str, k: int) -> list[str]:
    """The questions whose answer is not in the top ``k``."""
    out = []
    for q in qs:
        rank = first_hit(service, q, fusion)
        if rank is None or rank > k:
            out.append(f"{q.kind}: {q.q} (rank {rank})")
    return out
