"""``kill -9`` of each pipeline stage in the middle of an import of 200 files: once the
stage is started again, the index equals a fresh rebuild of the same files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rq.registry import StartedJobRegistry

from tests.faults.support import FaultTimes, copy_files, staged_import, wait_converged
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

AGENT = "main"


@pytest.mark.parametrize("stage", ["chunk", "embed", "index"])
def test_kill9_of_a_worker_busy_mid_import(stage: str, fault_pipeline: Pipeline, workspace: Path, tmp_path: Path,
                                           fault_times: FaultTimes) -> None:
    p = fault_pipeline
    staged, expected = staged_import(p, tmp_path)
    started = [StartedJobRegistry(queue=q) for q in p.bus.lanes(stage)]
    copy_files(staged / "memory", workspace / "memory")
    wait_until(lambda: any(r.count for r in started), timeout=60, interval=0.002,
               what=f"a {stage} job in progress")
    p.kill9(stage)
    killed_at = time.monotonic()
    p.start(stage)
    seconds = wait_converged(p.settings, AGENT, expected, since=killed_at, what=f"after kill -9 of the {stage} worker",
                             logs=p.logs())
    fault_times.record(f"kill -9 {stage} worker mid-import (200 files)", seconds)


def test_kill9_of_the_watcher_mid_import(fault_pipeline: Pipeline, workspace: Path, tmp_path: Path,
                                        fault_times: FaultTimes) -> None:
    """Half the files arrive before the kill (some still in its debounce table), half while it is dead."""
    p = fault_pipeline
    staged, expected = staged_import(p, tmp_path)
    copy_files(staged / "memory", workspace / "memory", stop=100)
    wait_until(lambda: p.events(AGENT, "file.changed"), timeout=30, what="the watcher's first emit")
    p.kill9("watcher")
    killed_at = time.monotonic()
    copy_files(staged / "memory", workspace / "memory", start=100)
    p.start("watcher")
    seconds = wait_converged(p.settings, AGENT, expected, since=killed_at, what="after kill -9 of the watcher",
                             logs=p.logs())
    fault_times.record("kill -9 watcher mid-import (200 files)", seconds)
