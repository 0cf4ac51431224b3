"""``memoryd log diff``: the lines added, changed and removed between two moments, each with
the event that did it and who wrote the file — through real workers and a real Redis."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from memoryd.shared.config.workspace import Workspace
from memoryd.shared.events import FileDeleted, MemoryFlushed
from memoryd.shared.runtime.survey import changed_event
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

pytestmark = pytest.mark.integration

AGENT = "main"


def _saved(p: Pipeline, path: Path, origin: str = "watch") -> None:
    """What the watcher does for a saved file: log and queue its file.changed; wait until indexed."""
    found = Workspace(p.settings.agent(AGENT)).classify(path)
    assert found is not None
    event = changed_event(p.bus, AGENT, found, origin=origin)
    assert event is not None
    p.bus.emit("chunk", [event])
    wait_until(lambda: p.query(AGENT, "SELECT seq FROM files WHERE path = ?", (found.path,)) == [(event.seq,)],
               timeout=60, what=f"{found.path} indexed\n{p.logs()}")


def test_log_diff_names_each_change_and_who_wrote_it(workspace: Path, make_settings, redis_url: str,
                                                     tmp_path: Path) -> None:
    settings, config = make_settings(workspace, redis=redis_url)
    p = Pipeline(config, redis_url, settings, tmp_path)
    daily = workspace / "memory" / "2026-03-01.md"
    old = workspace / "memory" / "old.md"
    try:
        p.start("chunk", "embed", "index")
        daily.write_text("- met Ana about the launch\n- budget is 10k\n- next review in May\n")
        old.write_text("- an old note\n- that goes away\n")
        p.cli("index", "--agent", AGENT, "--wait", "--json")  # the CLI indexes the first versions, and waits for them
        time.sleep(1.1)
        since = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        time.sleep(1.1)
        daily.write_text("- met Ana about the launch\n- budget is 12k\n- next review in May\n- Ana leads QA\n")
        _saved(p, daily)  # a person's edit, seen by the watcher
        time.sleep(1.1)
        middle = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        time.sleep(1.1)
        flushed = workspace / "memory" / "2026-03-02.md"
        flushed.write_text("- the user prefers short answers\n")  # the session flush writes, then logs it
        p.bus.log([MemoryFlushed(agent=AGENT, session="s-42", files=["memory/2026-03-02.md"])])
        _saved(p, flushed)
        old.unlink()
        p.bus.emit("index", [FileDeleted(agent=AGENT, path="memory/old.md", seq=p.bus.next_seq(AGENT))])
        wait_until(lambda: p.query(AGENT, "SELECT status FROM files WHERE path = 'memory/old.md'") == [("deleted",)],
                   timeout=60, what="the delete applied")
        out = json.loads(p.cli("log", "diff", "--agent", AGENT, "--since", since, "--json").stdout)
        until = json.loads(p.cli("log", "diff", "--agent", AGENT, "--since", since, "--until", middle,
                                 "--json").stdout)
        text = p.cli("log", "diff", "--agent", AGENT, "--since", since).stdout
    finally:
        p.stop()
    changes = {c["path"]: c for c in out["changes"]}
    assert list(changes) == ["memory/2026-03-01.md", "memory/2026-03-02.md", "memory/old.md"]
    edit = changes["memory/2026-03-01.md"]
    assert (edit["origin"], edit["writer"], edit["event"]) == ("watch", "watcher", "chunks.embedded")
    assert edit["changed"] == [{"line": 2, "old": "- budget is 10k", "new": "- budget is 12k"}]
    assert edit["added"] == [{"line": 4, "text": "- Ana leads QA"}] and edit["removed"] == []
    note = changes["memory/2026-03-02.md"]
    assert note["writer"] == "session flush (session s-42)"
    assert note["added"] == [{"line": 1, "text": "- the user prefers short answers"}]
    gone = changes["memory/old.md"]
    assert gone["event"] == "file.deleted" and gone["status"] == "deleted"
    assert [r["text"] for r in gone["removed"]] == ["- an old note", "- that goes away"]
    assert out["summary"] == {"changes": 3, "files": 3, "linesAdded": 2, "linesRemoved": 2, "linesChanged": 1}
    assert [c["path"] for c in until["changes"]] == ["memory/2026-03-01.md"]  # --until: only what came before
    assert "by session flush (session s-42)" in text and "~ 2: - budget is 10k  →  - budget is 12k" in text
    before = json.loads(Pipeline(config, redis_url, settings, tmp_path).cli(
        "log", "diff", "--agent", AGENT, "--since", "2000-01-01", "--until", since, "--json").stdout)
    assert {c["writer"] for c in before["changes"]} == {"CLI (memoryd index)"}
