"""Sanity checks for the recall evaluation set in tests/fixtures/recall/ (data only, no project imports)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "recall"
KINDS = {
    "single-fact",
    "multi-session",
    "temporal",
    "preference",
    "identifier",
    "paraphrase",
    "person",
    "cjk",
    "source-balance",
}
DAILY = re.compile(r"\d{4}-\d{2}-\d{2}\.md")
DATA: dict[str, Any] = json.loads((FIXTURE / "questions.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("ws", sorted(DATA["workspaces"]))
def test_workspace_layout(ws: str) -> None:
    root = FIXTURE / ws
    assert (root / "MEMORY.md").is_file()
    daily = sorted((root / "memory").glob("*.md"))
    assert len(daily) >= 10
    for path in daily:
        assert DAILY.fullmatch(path.name), path
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first == f"# {path.stem}", path
    for extra in DATA["workspaces"][ws].get("extraPaths", []):
        assert (root / extra["path"]).is_dir()


def test_question_set_shape() -> None:
    questions: list[dict[str, Any]] = DATA["questions"]
    assert len(DATA["workspaces"]) >= 10
    assert len(questions) >= 300
    ids = [q["id"] for q in questions]
    assert len(ids) == len(set(ids))
    kinds = Counter(q["kind"] for q in questions)
    assert set(kinds) <= KINDS
    assert kinds["cjk"] >= 40
    assert {q["split"] for q in questions} <= {"tune", "heldout"}
    assert {q["ws"] for q in questions} <= set(DATA["workspaces"])
    heldout = sum(q["split"] == "heldout" for q in questions) / len(questions)
    assert 0.2 <= heldout <= 0.4
    assert len(DATA["unanswerable"]) >= 30
    assert {u["ws"] for u in DATA["unanswerable"]} <= set(DATA["workspaces"])


def test_expected_lines_exist() -> None:
    cache: dict[Path, list[str]] = {}
    for q in DATA["questions"]:
        assert q["expect"], q["id"]
        for rel, line in q["expect"]:
            path = FIXTURE / q["ws"] / rel
            assert path.is_file(), (q["id"], rel)
            lines = cache.setdefault(path, path.read_text(encoding="utf-8").splitlines())
            assert 1 <= line <= len(lines), (q["id"], rel, line)
            text = lines[line - 1].strip()
            assert text and not text.startswith("#"), (q["id"], rel, line, text)
