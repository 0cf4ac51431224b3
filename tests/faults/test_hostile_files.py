"""Hostile files in a watched memory folder: a name that is not UTF-8 (and a folder named so), a
FIFO named ``x.md``, a folder 1,000 levels deep. Real watcher and workers.

The watcher starts over such a tree and keeps watching when another 1,000-deep folder is moved
in; no process dies or blocks; the index ends equal to a fresh rebuild of the same files — the
good files indexed, the bad names recorded as skipped with their reason (``memoryd status``
lists them) — and ``memoryd index`` over the same tree finishes too.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.faults.conftest import FaultTimes
from tests.faults.support import fresh_rows, live_pipeline, wait_converged, write_corpus
from tests.hostile import deep_tree, hostile_files
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

AGENT = "main"


def _alive(p: Pipeline) -> None:
    assert {name: proc.poll() for name, proc in p.procs.items()} == dict.fromkeys(p.procs), p.logs()


def test_hostile_files_do_not_stop_the_watcher_nor_memoryd_index(
        fault_pipeline: Pipeline, workspace: Path, tmp_path: Path, fault_times: FaultTimes) -> None:
    p = fault_pipeline
    memory = workspace / "memory"
    with hostile_files(memory):
        write_corpus(memory / "notes", files=20, lines=30)
        expected = fresh_rows(p.settings, AGENT, tmp_path / "fresh")
        assert ("memory/caf\\xe9.md", "") in expected.files  # the rebuild records the bad name as skipped
        started = time.monotonic()
        live_pipeline(p)  # the watcher starts over the hostile tree (watchdog walks all 1,000 levels)
        seconds = wait_converged(p.settings, AGENT, expected, since=started, what="watcher started over hostile "
                                 "files", logs=p.logs())
        _alive(p)
        status = p.cli("status", "--json").stdout
        assert "memory/caf\\\\xe9.md" in status and "not valid UTF-8" in status
        fault_times.record("watcher starts over hostile files (non-UTF-8 names, FIFO x.md, 1,000-deep folder)"
                           " + 20 files", seconds)

        deep_tree(tmp_path / "outside" / "deep2")
        started = time.monotonic()
        os.rename(tmp_path / "outside" / "deep2", memory / "deep2")  # watchdog walks it in its own thread
        expected = fresh_rows(p.settings, AGENT, tmp_path / "fresh2")
        seconds = wait_converged(p.settings, AGENT, expected, since=started, what="a deep folder moved in",
                                 logs=p.logs())
        (memory / "notes" / "after.md").write_text("Written after the deep folder: the watch still works.\n")
        wait_until(lambda: p.keyword(AGENT, "deep folder watch works"), timeout=30,
                   what=f"a file saved after the deep folder arrived to be indexed\n{p.logs()}")
        _alive(p)
        fault_times.record("a 1,000-deep folder moved into a watched workspace", seconds)

        started = time.monotonic()
        expected = fresh_rows(p.settings, AGENT, tmp_path / "fresh3")
        p.cli("index", "--agent", AGENT, "--json")  # exits 0 (no RecursionError, no hang on the FIFO)
        wait_converged(p.settings, AGENT, expected, since=started, what="after memoryd index", logs=p.logs())
        fault_times.record("memoryd index over the hostile tree", round(time.monotonic() - started, 2))
