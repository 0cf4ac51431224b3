"""Hostile trees in a memory folder: names that are not UTF-8, a folder 1,000 levels deep, a FIFO
named ``x.md``. Walked without recursion, refused before a byte is read, reported with a reason."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import GetRequest
from memoryd.shared import defaults as d
from memoryd.shared.config.workspace import NotRegularFile, Workspace, file_sha256
from memoryd.shared.events import FileChanged, FileSkipped
from memoryd.shared.exceptions import PathRefused
from memoryd.shared.index.chunking import chunk_file
from memoryd.shared.index.store import IndexReader
from tests.hostile import hostile_files


def run_bounded(target, *args):  # noqa: ANN001, ANN201 - a test helper that never waits forever
    """Run ``target(*args)`` in a thread; fail (instead of hanging the suite) if it blocks.
    → its result; its exception is raised here."""
    outcome: list = []

    def call() -> None:
        try:
            outcome.append((True, target(*args)))
        except Exception as exc:  # handed to the test's thread below
            outcome.append((False, exc))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), f"{target.__name__} blocked (on a FIFO?)"
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def test_a_survey_walks_hostile_trees_and_says_what_it_skipped(workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace)
    with hostile_files(workspace / "memory"):
        survey = run_bounded(Workspace(settings.agent("main")).survey)
    assert sorted(f.path for f in survey.files) == ["memory/deep/a/a/a/a/a/shallow.md", "memory/fine.md"]
    reasons = {s.path: s.reason for s in survey.skipped}
    deepest = "memory/deep/" + "/".join(["a"] * d.MAX_DIR_DEPTH)
    assert set(reasons) == {"memory/caf\\xe9.md", "memory/d\\xfcsseldorf", deepest}
    assert "not valid UTF-8" in reasons["memory/caf\\xe9.md"] and "rename" in reasons["memory/caf\\xe9.md"]
    assert f"more than {d.MAX_DIR_DEPTH} levels" in reasons[deepest]


def test_index_records_the_skipped_names_for_status(workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace)
    with hostile_files(workspace / "memory"):
        stats = run_bounded(index_now, settings, "main")
        again = run_bounded(index_now, settings, "main")
    assert stats["files"] == 2 and stats["files_skipped"] == 3
    reader = IndexReader(settings.index_path("main"))
    try:
        skipped = {s["path"]: s["reason"] for s in reader.skipped()}
        indexed = sorted(p for p, h in reader.live_hashes().items() if h)
    finally:
        reader.close()
    assert "memory/caf\\xe9.md" in skipped and len(skipped) == 3
    assert indexed == ["memory/deep/a/a/a/a/a/shallow.md", "memory/fine.md"]
    assert again["files_deleted"] == 0 and again["files_skipped"] == 3  # a second run keeps them


def test_a_fifo_named_md_is_refused_before_it_is_read(workspace: Path, make_settings) -> None:
    os.mkfifo(workspace / "memory" / "x.md")
    settings, _ = make_settings(workspace)
    event = FileChanged(agent="main", path="memory/x.md", seq=1, root=str(workspace / "memory"), rel="x.md",
                        sha256="", size=0, mtime=0.0)
    skipped = run_bounded(chunk_file, event, settings)
    assert isinstance(skipped, FileSkipped) and "FIFO" in skipped.reason
    with pytest.raises(NotRegularFile, match="FIFO"):
        run_bounded(file_sha256, workspace / "memory" / "x.md")
    service = QueryService(settings)
    try:
        with pytest.raises(PathRefused, match="FIFO"):
            run_bounded(service.get, "main", GetRequest(path="memory/x.md"))
    finally:
        service.close()


def test_memory_get_and_the_watcher_ignore_too_deep_and_non_utf8_paths(workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace)
    ws = Workspace(settings.agent("main"))
    too_deep = workspace / "memory" / Path(*["a"] * (d.MAX_DIR_DEPTH + 1)) / "n.md"
    assert ws.classify(too_deep) is None
    assert ws.classify(Path(os.fsdecode(os.fsencode(workspace) + b"/memory/caf\xe9.md"))) is None
    assert ws.classify(workspace / "memory" / Path(*["a"] * d.MAX_DIR_DEPTH) / "n.md") is not None
