"""Jobs queued by memoryd 0.1 under the old top-level names (``services.indexer.index_job``) are
moved to today's names when a worker starts, or failed with the fix; a real worker then runs them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from rq.registry import FailedJobRegistry

from memoryd.shared.events import FileChanged
from memoryd.shared.index.store import IndexReader
from memoryd.shared.runtime.bus import JOBS, Bus
from memoryd.shared.runtime.worker import migrate_legacy_jobs, run_worker, set_context

pytestmark = pytest.mark.integration


def test_old_job_names_are_moved_and_then_run(workspace: Path, make_settings, redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url)
    (workspace / "MEMORY.md").write_text("The boiler code is B-7781.\n")
    conn = redis.Redis.from_url(redis_url)
    event = FileChanged(agent="main", path="MEMORY.md", seq=int(time.time() * 1e6), root=str(workspace),
                        rel="MEMORY.md", source="memory", sha256="", size=0, mtime=0.0, origin="index")
    chunk_queue = Bus(conn, settings).queues["chunk"]
    old = chunk_queue.enqueue("services.chunker.chunk_job", [event.model_dump_json()], job_id="old-chunk")
    unknown = chunk_queue.enqueue("services.gone.job", [], job_id="old-unknown")

    ctx = set_context(settings, conn)
    assert migrate_legacy_jobs(chunk_queue, ctx.bus) == 2
    assert chunk_queue.get_job_ids() == [old.id]
    assert chunk_queue.fetch_job(old.id).func_name == JOBS["chunk"]
    failed = FailedJobRegistry(queue=chunk_queue)
    assert failed.get_job_ids() == [unknown.id]
    assert "memoryd index" in chunk_queue.fetch_job(unknown.id).latest_result().exc_string

    # the moved job runs for real, and its event goes on through the pipeline
    for stage in ("chunk", "embed", "index"):
        run_worker(stage, settings, conn, burst=True)
    reader = IndexReader(settings.index_path("main"))
    try:
        assert list(reader.live_hashes()) == ["MEMORY.md"]
    finally:
        reader.close()
