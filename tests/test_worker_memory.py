"""Memory that comes back down: real workers, a real Redis, real SQLite indexes, a bulk index.

Without the settle duty (shared/runtime/settle.py) the same run ends with the indexer ~34 % and
the embedder ~17 % above where they started (measured: 110 -> 147 MB, 64 -> 75 MB); with it,
+7.5 % and +5 %."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memoryd.shared import defaults as d
from memoryd.shared.runtime.settle import Settler
from tests.pipeline_harness import Pipeline, wait_until

pytestmark = pytest.mark.integration
SETTLED = re.compile(r"idle \d+s after work: resident memory")
WORDS = ["harbor", "ledger", "quartz", "violet", "meadow", "copper", "lantern", "orbit", "saddle", "thistle",
         "walnut", "beacon", "cinder", "falcon", "glacier", "hollow", "juniper", "kettle", "marble", "nectar"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_settles_once_after_it_has_been_idle_long_enough() -> None:
    clock = Clock()
    settler = Settler(idle_seconds=10, clock=clock)
    assert not settler.check()  # no work yet: nothing to give back
    settler.started()
    clock.now += 60
    assert not settler.check()  # a job runs, however long
    settler.finished()
    clock.now += 9
    assert not settler.check()
    clock.now += 1
    assert settler.check() and settler.settled == 1
    clock.now += 60
    assert not settler.check()  # once per idle stretch
    settler.started()
    settler.finished()
    clock.now += 10
    assert settler.check() and settler.settled == 2


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def _write_notes(workspace: Path, first: int, count: int) -> None:
    for n in range(first, first + count):
        lines = [f"- line {k} of note {n}: " + " ".join(WORDS[(n * 7 + k * 3 + j) % len(WORDS)] for j in range(15))
                 + f" E-{n}-{k}" for k in range(30)]
        (workspace / "memory" / f"note-{n:04d}.md").write_text(f"# note {n}\n\n" + "\n".join(lines) + "\n")


def _settled(p: Pipeline, stage: str, times: int) -> bool:
    return len(SETTLED.findall((p.log_dir / f"{stage}.log").read_text(errors="replace"))) >= times


def test_indexer_and_embedder_memory_comes_back_after_a_bulk_index(tmp_path: Path, workspace: Path,
                                                                   redis_url: str, make_settings) -> None:
    settings, config = make_settings(workspace, redis=redis_url)  # the hash provider: the pipeline's own memory
    logs = tmp_path / "logs"
    logs.mkdir()
    p = Pipeline(config, redis_url, settings, logs)
    deadline = d.SETTLE_IDLE_SECONDS + 30
    try:
        p.start("chunk", "embed", "index")
        _write_notes(workspace, 0, 20)  # warm: the index made and written, once settled
        p.cli("index", "--agent", "main", "--wait")
        for stage in ("embed", "index"):
            wait_until(lambda s=stage: _settled(p, s, 1), timeout=deadline, what=f"the {stage} worker settling")
        start = {s: _rss_mb(p.procs[s].pid) for s in ("embed", "index")}
        _write_notes(workspace, 20, 600)  # the bulk index
        p.cli("index", "--agent", "main", "--wait")
        assert p.query("main", "SELECT count(DISTINCT path) FROM chunks WHERE path LIKE 'memory/note-%'") == [(620,)]
        for stage in ("embed", "index"):
            wait_until(lambda s=stage: _settled(p, s, 2), timeout=deadline, what=f"the {stage} worker settling again")
        end = {s: _rss_mb(p.procs[s].pid) for s in ("embed", "index")}
        for stage in ("embed", "index"):
            assert end[stage] <= 1.10 * start[stage], (stage, start, end, p.logs())
    finally:
        p.stop()


def test_a_worker_runs_blas_on_one_thread() -> None:
    import numpy as np  # noqa: F401 - loads the BLAS library threadpoolctl looks for
    from threadpoolctl import threadpool_info

    from memoryd.shared.runtime.settle import one_blas_thread

    blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert blas  # numpy's OpenBLAS is found: the limit has something to act on
    before = {lib["filepath"]: lib["num_threads"] for lib in blas}
    try:
        one_blas_thread()
        assert all(lib["num_threads"] == 1 for lib in threadpool_info() if lib["user_api"] == "blas")
    finally:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=max(before.values()), user_api="blas")  # the test process as it was
