"""`memoryd status --json` counts pending, started and failed jobs per agent and queue."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from rq import SimpleWorker

from memoryd.shared.bus import Bus
from memoryd.shared.config import load_settings
from memoryd.shared.events import FileChanged, FileDeleted

pytestmark = pytest.mark.integration


def test_status_counts_jobs_per_agent_and_queue(tmp_path: Path, redis_url: str) -> None:
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": "hash"}},
                   "list": [{"id": "a", "workspace": str(tmp_path / "a")},
                            {"id": "b", "workspace": str(tmp_path / "b")}]},
        "memoryd": {"stateDir": str(tmp_path / "state"), "redisUrl": redis_url, "jobRetries": 0},
    }))
    settings = load_settings(config)
    conn = redis.Redis.from_url(redis_url)
    bus = Bus(conn, settings)
    # b's index job fails: a worker with no memoryd context cannot run it
    bus.emit("index", [FileDeleted(agent="b", path="memory/x.md", seq=1)])
    SimpleWorker([bus.queues["index"]], connection=conn).work(burst=True, logging_level="ERROR")
    bus.emit("index", [FileDeleted(agent="a", path="memory/x.md", seq=2)])
    bus.emit("index", [FileDeleted(agent="a", path="memory/y.md", seq=3)])
    bus.emit("chunk", [FileChanged(agent="b", path="MEMORY.md", seq=4, root=str(tmp_path / "b"), rel="MEMORY.md",
                                   sha256="0" * 64, size=1, mtime=0.0)])

    out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "status", "--json"],
                         capture_output=True, text=True, check=True, timeout=120)
    status = json.loads(out.stdout)
    a, b = status["agents"]["a"]["queues"], status["agents"]["b"]["queues"]
    assert a["index"] == {"pending": 2, "started": 0, "failed": 0}
    assert b["index"] == {"pending": 0, "started": 0, "failed": 1}
    assert b["chunk"] == {"pending": 1, "started": 0, "failed": 0}
    assert a["chunk"] == {"pending": 0, "started": 0, "failed": 0}
    assert status["queues"]["index"] == {"pending": 2, "started": 0, "failed": 1}
