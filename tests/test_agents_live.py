"""Agents added or removed while the pipeline runs: the running watcher starts (and stops)
watching them and every worker stage handles their events, with no restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.shared.runtime.roster import register_agent, remove_agent
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def pipeline(workspace: Path, make_settings, redis_url: str, tmp_path: Path):
    settings, config = make_settings(workspace, redis=redis_url, debounce_ms=200)
    (tmp_path / "logs").mkdir()
    p = Pipeline(config, redis_url, settings, tmp_path / "logs")
    yield p
    p.stop()


def test_an_agent_registered_while_everything_runs_is_watched_and_indexed(pipeline: Pipeline, tmp_path: Path) -> None:
    p = pipeline
    p.start()
    wait_until(lambda: p.bus.last_reconciled().get("main"), timeout=60, what="the watcher's first reconcile")
    pids = {name: proc.pid for name, proc in p.procs.items()}
    new_ws = tmp_path / "new-ws"
    (new_ws / "memory").mkdir(parents=True)
    (new_ws / "MEMORY.md").write_text("the new agent already knew about the heron\n")
    register_agent(p.settings, "new", new_ws)  # what `memoryd index --agent new --workspace W` writes
    assert wait_until(lambda: p.keyword("new", "heron"), timeout=60,
                      what="the new agent's existing file indexed (reconcile)") == ["MEMORY.md"]
    (new_ws / "memory" / "2026-05-01.md").write_text("saved after registration: the kingfisher\n")
    assert wait_until(lambda: p.keyword("new", "kingfisher"), timeout=60,
                      what="a file saved into the new workspace indexed (watch)") == ["memory/2026-05-01.md"]
    assert {name: proc.pid for name, proc in p.procs.items()} == pids  # nobody was restarted

    remove_agent(p.settings, "new")
    wait_until(lambda: "agent new: no longer watched" in p.logs(), timeout=30, what="the watcher to drop agent new")
    (new_ws / "memory" / "2026-05-02.md").write_text("after removal: the cormorant\n")
    (p.settings.agent("main").workspace / "memory" / "main.md").write_text("main still works: the stork\n")
    wait_until(lambda: p.keyword("main", "stork"), timeout=60, what="main's file indexed")
    assert p.events("new", "file.changed", "memory/2026-05-02.md") == []
