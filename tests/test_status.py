"""`memoryd status --json` counts pending, started, scheduled and failed jobs per agent and
queue, and lists each agent's scheduled and failed jobs with their last error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from rq import SimpleWorker

from memoryd.shared.config.loader import load_settings
from memoryd.shared.events import FileChanged, FileDeleted
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.retries import note_error

pytestmark = pytest.mark.integration


def _changed(agent: str, root: Path, seq: int) -> FileChanged:
    return FileChanged(agent=agent, path="MEMORY.md", seq=seq, root=str(root), rel="MEMORY.md", sha256="0" * 64,
                       size=1, mtime=0.0)


def test_status_counts_jobs_per_agent_and_queue(tmp_path: Path, redis_url: str) -> None:
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": "hash"}},
                   "list": [{"id": "a", "workspace": str(tmp_path / "a")},
                            {"id": "b", "workspace": str(tmp_path / "b")}]},
        "memoryd": {"stateDir": str(tmp_path / "state"), "redisUrl": redis_url},
    }))
    settings = load_settings(config)
    conn = redis.Redis.from_url(redis_url)
    bus = Bus(conn, settings)
    no_retries = Bus(conn, settings.model_copy(update={"memoryd": settings.memoryd.model_copy(
        update={"job_retries": 0})}))
    # two jobs the indexer cannot run (a file.changed event belongs on the chunk queue): b's
    # has retries left and waits for one (no worker promotes it here), a's has none and fails
    bus.enqueue("index", [_changed("b", tmp_path / "b", 1).model_dump_json()], job_id="b-wrong-queue")
    no_retries.enqueue("index", [_changed("a", tmp_path / "a", 2).model_dump_json()], job_id="a-wrong-queue")
    SimpleWorker([bus.queues["index"]], connection=conn, exception_handlers=[note_error]).work(
        burst=True, logging_level="ERROR")
    bus.emit("index", [FileDeleted(agent="a", path="memory/x.md", seq=3)])
    bus.emit("index", [FileDeleted(agent="a", path="memory/y.md", seq=4)])
    bus.emit("chunk", [_changed("b", tmp_path / "b", 5)])

    out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "status", "--json"],
                         capture_output=True, text=True, check=True, timeout=120)
    status = json.loads(out.stdout)
    a, b = status["agents"]["a"], status["agents"]["b"]
    assert a["queues"]["index"] == {"pending": 2, "started": 0, "scheduled": 0, "failed": 1}
    assert b["queues"]["index"] == {"pending": 0, "started": 0, "scheduled": 1, "failed": 0}
    assert b["queues"]["chunk"] == {"pending": 1, "started": 0, "scheduled": 0, "failed": 0}
    assert a["queues"]["chunk"] == {"pending": 0, "started": 0, "scheduled": 0, "failed": 0}
    assert status["queues"]["index"] == {"pending": 2, "started": 0, "scheduled": 1, "failed": 1}

    [waiting] = b["scheduledJobs"]
    assert waiting["id"] == "b-wrong-queue" and waiting["stage"] == "index" and waiting["retriesLeft"] == 2
    assert waiting["retryAt"] > waiting["failedAt"] > 0
    [failed] = a["failedJobs"]
    assert failed["id"] == "a-wrong-queue" and failed["state"] == "failed"
    for job in (waiting, failed):  # the reason, whether or not this process had a memoryd context
        assert "file.changed" in job["error"] or "outside a memoryd worker" in job["error"], job
    assert a["scheduledJobs"] == [] and b["failedJobs"] == []
