"""A fingerprint change rebuilds side by side, from the log, in slices, while searches answer.

The live index is made by ``memoryd index`` through a real Redis; then the chunking changes
and real chunk/embed/index worker processes run with the new configuration: the indexer
keeps the old index answering, queues the rebuild job, and the job swaps the new index in.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.workspace import Workspace
from memoryd.shared.index.apply import fingerprint
from memoryd.shared.rebuild.replay import replay
from memoryd.shared.rebuild.sidebyside import live_fingerprint, pending_plan, rebuild
from memoryd.shared.runtime.survey import changed_event
from tests.faults.support import fresh_rows, index_rows, wait_converged, write_corpus
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

pytestmark = pytest.mark.integration

AGENT = "main"
REPO = Path(__file__).resolve().parent.parent


class Searcher(threading.Thread):
    """Searches the live index without pause; records every answer and every error."""

    def __init__(self, service: QueryService, settings_dir: Path) -> None:
        super().__init__(daemon=True)
        self.service = service
        self.plan = settings_dir
        self.stop = threading.Event()
        self.answered = 0
        self.during_rebuild = 0
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            rebuilding = self.plan.exists()
            try:
                answer = self.service.search(AGENT, SearchRequest(query="project note-17 fact 5", min_score=0))
                if not any(r.path == "memory/note-017.md" for r in answer.results):
                    self.failures.append(f"no note-017 in {[r.path for r in answer.results]}")
                self.answered += 1
                self.during_rebuild += int(rebuilding and self.plan.exists())
            except Exception as exc:  # noqa: BLE001 - every failure is a finding of this test
                self.failures.append(repr(exc))
            time.sleep(0.01)


def test_a_chunking_change_rebuilds_side_by_side_while_searches_answer(
        workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> None:
    write_corpus(workspace / "memory", files=80, lines=60)
    old, config = make_settings(workspace, redis=redis_url)
    env = dict(os.environ, MEMORYD_CONFIG=str(config))
    subprocess.run([sys.executable, "-m", "memoryd.services.cli", "index", "--agent", AGENT, "--json"], env=env,
                   cwd=REPO, check=True, capture_output=True, timeout=300)
    old_fingerprint = live_fingerprint(old, AGENT)
    settings, config = make_settings(workspace, redis=redis_url, chunking={"tokens": 200, "overlap": 40},
                                     extra={"memoryd": {"log": {"rebuildSliceSeconds": 0.2}}})
    assert fingerprint(settings, AGENT) != old_fingerprint
    pipe = Pipeline(config, redis_url, settings, tmp_path)
    searcher = Searcher(QueryService(settings), settings.index_path(AGENT).with_name(f"{AGENT}.sqlite.rebuild.json"))
    searcher.start()
    try:
        pipe.start("chunk", "embed", "index")
        edited = workspace / "memory" / "note-003.md"
        edited.write_text(edited.read_text() + "note 3 fact 60: written while the index was rebuilt\n")
        found = Workspace(settings.agent(AGENT)).classify(edited)
        assert found is not None
        pipe.bus.emit("chunk", [changed_event(pipe.bus, AGENT, found, origin="watch")])  # what the watcher does
        wait_until(lambda: pending_plan(settings, AGENT), timeout=60, interval=0.01,
                   what=f"the rebuild job to start\n{pipe.logs()}")
        late = workspace / "memory" / "note-004.md"  # saved in the middle of the rebuild
        late.write_text(late.read_text() + "note 4 fact 60: saved during the rebuild, applied to both\n")
        late_found = Workspace(settings.agent(AGENT)).classify(late)
        assert late_found is not None
        pipe.bus.emit("chunk", [changed_event(pipe.bus, AGENT, late_found, origin="watch")])
        wait_until(lambda: live_fingerprint(settings, AGENT) == fingerprint(settings, AGENT), timeout=120,
                   what=f"the rebuilt index swapped in\n{pipe.logs()}")
        expected = fresh_rows(settings, AGENT, tmp_path / "fresh")  # the files as they are now, both edits in
        wait_converged(settings, AGENT, expected, since=time.monotonic(), timeout=60,
                       what="the rebuilt index (with both edits)", logs=pipe.logs())
        time.sleep(0.3)  # a few searches of the new index too
    finally:
        searcher.stop.set()
        searcher.join(timeout=10)
        pipe.stop()
    assert searcher.failures == []
    assert searcher.during_rebuild >= 20, (searcher.answered, searcher.during_rebuild)
    assert pending_plan(settings, AGENT) is None
    logs = pipe.logs()
    assert logs.count("rebuilt index swapped in") == 1, logs


def _rebuild(config: str) -> None:
    rebuild(load_settings(config), AGENT)


def test_two_processes_rebuilding_at_once_do_not_collide(workspace: Path, make_settings, tmp_path: Path) -> None:
    """Each rebuild has its own temp file and the lock; both finish, the index is whole."""
    write_corpus(workspace / "memory", files=60, lines=60)
    settings, config = make_settings(workspace)
    index_now(settings, AGENT)
    expected = fresh_rows(settings, AGENT, tmp_path / "fresh")
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=_rebuild, args=(str(config),)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
        assert p.exitcode == 0
    wait_converged(settings, AGENT, expected, since=time.monotonic(), timeout=5, what="the twice rebuilt index")
    leftovers = [p.name for p in settings.index_path(AGENT).parent.iterdir() if "rebuild-" in p.name]
    assert leftovers == [] and json.dumps(pending_plan(settings, AGENT)) == "null"


def test_an_index_older_than_its_log_is_adopted_into_it(workspace: Path, make_settings, tmp_path: Path) -> None:
    """An index built before the log existed (memoryd 0.1): its files are logged from the index
    itself, so a replay holds everything the index holds — with no provider call."""
    write_corpus(workspace / "memory", files=5, lines=40)
    settings, _ = make_settings(workspace)
    index_now(settings, AGENT)
    shutil.rmtree(settings.state_dir / "log")
    shutil.rmtree(settings.state_dir / "content")
    into = tmp_path / "replayed" / "memory" / f"{AGENT}.sqlite"
    result = replay(settings, AGENT, into=into)
    assert result["chunks_embedded"] == 0 and result["files"] == 5
    replayed = settings.model_copy(deep=True)
    replayed.memoryd.state_dir = str(tmp_path / "replayed")
    assert index_rows(replayed, AGENT) == index_rows(settings, AGENT)
