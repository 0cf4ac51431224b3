"""The bookkeeping of ``memoryd index`` runs and the bus's job table, as unit tests on fakeredis
(no server needed: plain hashes and counters; the runs against a real Redis and real workers are in
tests/test_index_cli.py)."""

from __future__ import annotations

import time
from pathlib import Path

import fakeredis
import pytest

from memoryd.shared import defaults as d
from memoryd.shared.runtime import runs
from memoryd.shared.runtime.bus import JOBS, Bus, register_jobs


@pytest.fixture
def bus(workspace: Path, make_settings) -> Bus:
    settings, _ = make_settings(workspace)
    return Bus(fakeredis.FakeRedis(), settings)


def test_a_run_counts_what_the_stages_report_and_ends_when_its_files_are_done(bus: Bus) -> None:
    runs.start(bus, "r1", "main", files=3)
    runs.count(bus, "r1", chunks_found=5)
    runs.count(bus, "r1", files_done=2, chunks_embedded=3, chunks_cached=1)
    runs.count(bus, None, files_done=9)  # work of no run (an edit) counts nowhere
    [run] = runs.active(bus)
    assert (run["run"], run["agent"], run["files"], run["files_done"], run["chunks"], run["chunks_embedded"]) == (
        "r1", "main", 3, 2, 5, 4)
    runs.count(bus, "r1", files_done=1)
    assert runs.active(bus) == []
    assert bus.conn.hget(bus.key("runs"), "r1") is None  # a done run is forgotten


def test_a_run_older_than_its_ttl_is_forgotten_and_its_counters_expire(bus: Bus) -> None:
    runs.start(bus, "old", "main", files=1)
    runs.count(bus, "old", chunks_found=1)
    assert 0 < bus.conn.ttl(bus.key("run", "old")) <= d.INDEX_RUN_TTL_SECONDS
    bus.conn.hset(bus.key("runs"), "old", f'{{"agent": "main", "files": 1, "started": {time.time() - 2 * 86400}}}')
    assert runs.active(bus) == []


def test_a_job_no_service_registered_is_refused_with_what_to_do(bus: Bus) -> None:
    with pytest.raises(LookupError, match="no service registered the job 'nonesuch'"):
        bus.enqueue("nonesuch")
    assert JOBS["chunk"] == "memoryd.services.pipeline.chunker.chunk_job"  # the pipeline registered its own


def test_a_job_is_registered_only_on_a_known_stage() -> None:
    with pytest.raises(ValueError, match="unknown stage 'chunks'"):
        register_jobs({"x": ("chunks", "m.f")})


def test_a_claimed_run_covers_its_agent_until_it_is_done_or_forgotten(bus: Bus) -> None:
    runs.claim(bus, "r2", "fresh")
    assert runs.covering(bus, "fresh") and not runs.covering(bus, "main")
    assert runs.active(bus) == []  # still queuing: no file count to show yet
    runs.start(bus, "r2", "fresh", files=1)
    assert runs.covering(bus, "fresh")
    runs.count(bus, "r2", files_done=1)
    assert not runs.covering(bus, "fresh")
    runs.claim(bus, "r3", "fresh")
    runs.forget(bus, "r3")  # it failed before it queued anything
    assert not runs.covering(bus, "fresh")
