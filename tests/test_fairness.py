"""Fairness: one agent's bulk import never starves another agent's edit. Workers take the edit
lane before the bulk lane, a job's follow-up work stays in its lane, and the watcher puts an
agent's flood of files on the bulk lane. (The 10,000-file figure is bench/agents.py's.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from rq.job import Job

from memoryd.services.pipeline.watcher import AgentWatch, Watcher
from memoryd.shared import defaults as d
from memoryd.shared.events import FileChanged
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.worker import run_worker
from tests.agents_support import two_agents
from tests.pipeline_harness import Pipeline, wait_until

pytestmark = pytest.mark.integration


def _file(agent: str, root: Path, name: str, seq: int) -> FileChanged:
    return FileChanged(agent=agent, path=f"memory/{name}", seq=seq, root=str(root / "memory"), rel=name,
                       sha256="", size=0, mtime=0.0, origin="index")


def test_workers_take_the_edit_lane_first_and_work_stays_in_its_lane(tmp_path: Path, redis_url: str) -> None:
    settings, _ = two_agents(tmp_path, redis=redis_url)
    a, b = tmp_path / "a", tmp_path / "b"
    for i in range(40 * d.FILES_PER_CHUNK_JOB):
        (a / "memory" / f"bulk-{i:04d}.md").write_text(f"bulk note {i}\n")
    conn = redis.Redis.from_url(redis_url)
    bus = Bus(conn, settings)
    files = [_file("a", a, f"bulk-{i:04d}.md", i + 1) for i in range(40 * d.FILES_PER_CHUNK_JOB)]
    for start in range(0, len(files), d.FILES_PER_CHUNK_JOB):  # queued first: 40 bulk jobs
        bus.emit("chunk", files[start:start + d.FILES_PER_CHUNK_JOB], bulk=True)
    bus.emit("chunk", [_file("b", b, "2026-03-01.md", 10**9)])  # then one edit
    bulk_ids, [edit_id] = bus.bulk["chunk"].get_job_ids(), bus.queues["chunk"].get_job_ids()

    run_worker("chunk", settings, conn, burst=True)
    ended = {job.id: job.ended_at for job in Job.fetch_many([*bulk_ids, edit_id], connection=conn)}
    assert all(ended[edit_id] < ended[j] for j in bulk_ids)  # the edit went first, though queued last
    assert (bus.queues["embed"].count, bus.bulk["embed"].count) == (1, 40)  # each job's output in its lane
    own = bus.node_lanes(settings.node)  # the agents' owner's index lanes: this node took them as it logged
    assert (own[0].count, own[1].count) == (1, 0)  # the edit's text rows, at once
    run_worker("embed", settings, conn, burst=True)
    assert (own[0].count, own[1].count) == (2, 40)  # then its vectors


def test_the_watcher_puts_an_agents_flood_on_the_bulk_lane(tmp_path: Path, redis_url: str) -> None:
    settings, _ = two_agents(tmp_path, redis=redis_url)
    a = tmp_path / "a"
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    watch = AgentWatch(settings, "a", bus)
    flood = [a / "memory" / f"copied-{i:03d}.md" for i in range(50)]
    for path in flood:
        path.write_text(f"copied {path.name}\n")
    started = time.monotonic()
    for path in flood:  # as the debounce loop settles a copied folder
        watch.settle(path)
    refilled = (time.monotonic() - started) * d.EDIT_LANE_FILES_PER_SECOND
    watch.flush()
    edits = [len(j.args[0]) for j in bus.queues["chunk"].jobs]
    budget = int(d.EDIT_LANE_FILES_PER_SECOND)
    assert set(edits) == {1} and budget <= len(edits) <= budget + refilled + 1  # one job per edited file
    bulk = [len(j.args[0]) for j in bus.bulk["chunk"].jobs]
    assert sum(bulk) == 50 - len(edits) and bulk[0] == d.FILES_PER_CHUNK_JOB  # the rest, batched
    time.sleep(1.0)  # the budget refills: a person's next edit takes the edit lane again
    (a / "MEMORY.md").write_text("a person's edit\n")
    watch.settle(a / "MEMORY.md")
    assert bus.queues["chunk"].count == len(edits) + 1


def test_an_edit_is_searchable_while_another_agents_import_is_under_way(tmp_path: Path, redis_url: str) -> None:
    """Real processes: 3,000 files land in a's workspace; b's one-line edit made after the
    import started is indexed while a's import still has work queued."""
    settings, config = two_agents(tmp_path, redis=redis_url)
    p = Pipeline(config, redis_url, settings, tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    try:
        p.start()
        wait_until(lambda: p.conn.hget(p.bus.key("reconciled"), "b"), timeout=60, what="the first reconcile")
        for i in range(3000):
            (a / "memory" / f"import-{i:04d}.md").write_text(f"imported note {i}: the archive of 2019\n")
        wait_until(lambda: p.bus.bulk["chunk"].count + p.bus.bulk["embed"].count > 20, timeout=60,
                   what="a's import queued on the bulk lane")
        with open(b / "memory" / "2026-03-01.md", "a") as handle:
            handle.write("b decided: the kingfisher release ships on Monday\n")
        wait_until(lambda: p.keyword("b", "kingfisher"), timeout=60, what="b's edit indexed")
        pending = sum(q.count for stage in ("chunk", "embed", "index") for q in [p.bus.bulk[stage]])
        indexed = p.query("a", "SELECT count(*) FROM files WHERE status = 'indexed'")[0][0]
        assert pending > 0 and indexed < 3000, (pending, indexed)  # a's import was still under way
        wait_until(lambda: p.query("a", "SELECT count(*) FROM files WHERE status = 'indexed'")[0][0] == 3002,
                   timeout=240, what="a's import finished")
    finally:
        p.stop()


def test_reconciling_a_big_agent_does_not_hold_up_anothers_edit(tmp_path: Path, redis_url: str) -> None:
    settings, _ = two_agents(tmp_path, redis=redis_url)
    a, b = tmp_path / "a", tmp_path / "b"
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    watcher = Watcher(settings, bus)
    watcher.keep()  # its node takes both agents
    watcher.tick()  # the first reconciles
    first = set(bus.bulk["chunk"].get_job_ids())
    for i in range(20 * d.FILES_PER_CHUNK_JOB):
        (a / "memory" / f"import-{i:04d}.md").write_text(f"imported {i}\n")
    (b / "MEMORY.md").write_text("b's edit\n")
    watcher.watches["b"].pending[b / "MEMORY.md"] = time.monotonic()  # settled, as inotify + debounce would
    watcher.watches["a"].reconcile_wanted.set()  # a folder of a's came: a full reconcile
    watcher.tick()
    [edit] = bus.queues["chunk"].jobs
    bulk = sorted(job.enqueued_at for job in bus.bulk["chunk"].jobs if job.id not in first)
    assert len(bulk) >= 20 and edit.enqueued_at < bulk[0]  # b's edit went out before a's first batch
