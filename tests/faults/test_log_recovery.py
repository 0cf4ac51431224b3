"""Recovery from the event log: Redis flushed, or killed and restarted empty, mid-pipeline.

No watcher runs and the reconcile period is the default 5 minutes, so nothing but the log
can bring the lost work back: the indexer notices its marker key gone and re-drives, from
the log, every event that never reached the index. The index must then equal a fresh
rebuild of the files within seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

from memoryd.shared.config.workspace import Workspace
from memoryd.shared.runtime.survey import changed_event
from tests.faults.support import FaultTimes, RedisProcess, fresh_rows, index_rows, wait_converged, write_corpus
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

AGENT = "main"
#: Seconds the index may take to equal a fresh rebuild once the lost work is visible.
RECOVERY_TIMEOUT = 45.0


def _emit_corpus(p: Pipeline, workspace: Path) -> int:
    """Every memory file as the watcher would emit it (logged first, then queued)."""
    found = list(Workspace(p.settings.agent(AGENT)).scan())
    events = [e for f in found if (e := changed_event(p.bus, AGENT, f, origin="watch"))]
    for start in range(0, len(events), 16):
        p.bus.emit("chunk", events[start:start + 16])
    return len(events)


def _queued_to_embed(p: Pipeline) -> int:
    """Files the chunker passed on to the (absent) embedder: the events in the embed lanes."""
    return sum(len(job.args[0]) for q in p.bus.lanes("embed") for job in q.jobs)


def test_flushall_after_the_chunker_loses_no_work(fault_pipeline: Pipeline, workspace: Path, tmp_path: Path,
                                                  fault_times: FaultTimes) -> None:
    p = fault_pipeline
    write_corpus(workspace / "memory")
    expected = fresh_rows(p.settings, AGENT, tmp_path / "fresh")
    p.start("index", "chunk")  # no embedder yet: the chunked files wait in the embed queue
    wait_until(lambda: p.conn.exists(p.bus.key("log-epoch")), timeout=30, what=f"the indexer's marker\n{p.logs()}")
    files = _emit_corpus(p, workspace)
    wait_until(lambda: _queued_to_embed(p) == files, timeout=60, what=f"every file chunked\n{p.logs()}")
    p.conn.flushall()  # the embed jobs are gone, and the agent's lease; only the log holds the changes
    flushed = time.monotonic()
    p.start("embed")
    seconds = wait_converged(p.settings, AGENT, expected, since=flushed, timeout=RECOVERY_TIMEOUT,
                             what="after FLUSHALL with 200 files chunked, none embedded", logs=p.logs())
    assert "re-driven from the log" in p.logs()
    fault_times.record("FLUSHALL after chunking 200 files (re-driven from the log, no watcher)", seconds)


def test_redis_killed_and_restarted_empty_mid_pipeline_loses_no_work(
        fault_pipeline: Pipeline, fault_redis: RedisProcess, workspace: Path, tmp_path: Path,
        fault_times: FaultTimes) -> None:
    p = fault_pipeline
    write_corpus(workspace / "memory")
    expected = fresh_rows(p.settings, AGENT, tmp_path / "fresh")
    p.start("chunk", "embed", "index")
    wait_until(lambda: p.conn.exists(p.bus.key("log-epoch")), timeout=30, what=f"the indexer's marker\n{p.logs()}")
    _emit_corpus(p, workspace)
    wait_until(lambda: len((index_rows(p.settings, AGENT) or expected).files) < len(expected.files)
               and index_rows(p.settings, AGENT) is not None, timeout=60, interval=0.01,
               what=f"the import under way\n{p.logs()}")
    fault_redis.kill()
    fault_redis.start()  # the same port, empty
    restarted = time.monotonic()
    seconds = wait_converged(p.settings, AGENT, expected, since=restarted, timeout=RECOVERY_TIMEOUT,
                             what="after redis-server was killed and restarted empty mid-import", logs=p.logs())
    assert "re-driven from the log" in p.logs()
    fault_times.record("Redis killed and restarted empty mid-import (re-driven from the log, no watcher)", seconds)
