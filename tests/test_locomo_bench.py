"""bench/locomo.py's scoring rule on a made-up conversation in the locomo-dev layout (hash provider)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import locomo  # noqa: E402

from memoryd.services.query.engine import QueryService  # noqa: E402

TURNS = [f"- **Ann**: filler turn {i} about nothing in particular, weather and errands" for i in range(40)]
TURNS[30] = "- **Bob**: the kayak club meets on Thursdays at the old boathouse"


def _conversation(root: Path) -> None:
    conv = root / "conv-01"
    (conv / "memory").mkdir(parents=True)
    (conv / "MEMORY.md").write_text("", encoding="utf-8")
    text = "# 2023-05-08\n\n## Session 1 — 13:56\n\n" + "\n".join(TURNS) + "\n"
    (conv / "memory" / "2023-05-08.md").write_text(text, encoding="utf-8")
    line = 5 + 30  # 1-based: four lines of headings, then the turns
    qrels = [
        {"qid": "q1", "question": "When does the kayak club meet?", "category": 2,
         "evidence": [{"path": "memory/2023-05-08.md", "line": line}]},
        {"qid": "q2", "question": "Is it adversarial?", "category": 5,
         "evidence": [{"path": "memory/2023-05-08.md", "line": line}]},
        {"qid": "q3", "question": "What has no evidence?", "category": 4, "evidence": []},
    ]
    (conv / "qrels.jsonl").write_text("\n".join(json.dumps(q) for q in qrels), encoding="utf-8")


def test_only_scored_categories_with_evidence_are_asked_and_a_hit_is_counted_in_its_snippet(tmp_path: Path) -> None:
    root = tmp_path / "locomo-dev"
    _conversation(root)
    qs = locomo.questions(root)
    assert [q.qid for q in qs] == ["q1"]
    service = QueryService(locomo.build(tmp_path / "work", root, "hash", {}))
    try:
        (outcome,) = locomo.ask(service, root, qs)
    finally:
        service.close()
    assert not (tmp_path / "work" / "locomo" / "conv-01" / "qrels.jsonl").exists()  # the answers stay out
    assert outcome.hit and outcome.in_snippet and outcome.returned >= 1
    figures = locomo.report([outcome])
    assert figures["all"]["R@6"] == 1.0 and figures["by_category"]["temporal"]["n"] == 1
    missed = locomo.Outcome(outcome.question, False, False, 0, 0, 0)
    assert locomo.score([outcome, missed])["R@6"] == 0.5 and locomo.score([missed])["empty"] == 1
