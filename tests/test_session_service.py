"""``memoryd worker session`` as a real process: the scheduler's first tick and the jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import redis

from memoryd.services.session.policy import Thresholds
from memoryd.services.session.service import NewMessage
from memoryd.services.session.transcript import Message, Transcript
from memoryd.shared.index.chunking import count_tokens
from memoryd.shared.runtime.bus import Bus
from tests.session_support import sessions, words
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[1]
RULE = "Never delete mail without asking me first."
SMALL = {"contextWindow": 3000, "session": {"mode": "daily", "atHour": 4},
         "compaction": {"reserveTokensFloor": 1000, "keepRecentTokens": 100,
                        "memoryFlush": {"softThresholdTokens": 500}}}


def _eventually(check: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    wait_until(check, timeout=limit, interval=0.1, what=f"the session worker getting to: {what}")


def test_thresholds_follow_the_formula_and_per_agent_overrides(workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace)
    assert Thresholds.of(settings.agent("main")) == Thresholds(flush=176_000, compact=180_000)
    small, _ = make_settings(workspace, extra={"agents": {"defaults": SMALL}})
    assert Thresholds.of(small.agent("main")) == Thresholds(flush=1500, compact=2000)


def test_the_worker_process_resets_stale_sessions_and_runs_flush_and_compaction(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, config = make_settings(workspace, redis=redis_url,
                                     extra={"agents": {"defaults": {**SMALL, "memorySearch": {"provider": "hash"}}}})
    stale_at = datetime.now().astimezone() - timedelta(days=2)
    Transcript.of(workspace, "stale").append(Message(ts=stale_at.isoformat(), role="user",
                                                     content="We decided on Postgres.", tokens=6))
    worker = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "worker", "session",
                               "--config", str(config)],
                              cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        s = sessions(settings, redis_url)
        _eventually(lambda: s.show("main", "stale")["resets"] == 1, "the daily reset at its first tick")
        _eventually(lambda: any((workspace / "memory").glob("*-*-*-*.md")), "the session-memory note")
        [note] = (workspace / "memory").glob("*-*-*-*.md")
        assert "We decided on Postgres." in note.read_text(encoding="utf-8")

        first = s.append("main", "live", NewMessage(role="user", content=RULE))
        crossed = s.append("main", "live", NewMessage(role="assistant", content=words(2000 - first["tokens"])))
        assert crossed["flushRequested"] and crossed["compactionRequested"]
        _eventually(lambda: s.show("main", "live")["compactionCount"] == 1, "the compaction")
        shown = s.show("main", "live")
        assert shown["memoryFlushCompactionCount"] == 0 and shown["tokens"] < 1500
        today = datetime.now().astimezone().date().isoformat()
        assert f"- {RULE}" in (workspace / "memory" / f"{today}.md").read_text(encoding="utf-8")
        assert count_tokens(s.context("main", "live").summary or "") > 0
    finally:
        worker.terminate()
        output = worker.communicate(timeout=30)[0].decode(errors="replace")
    assert "Traceback" not in output, output


def test_concurrent_appends_across_the_boundary_request_one_flush_and_one_compaction(
        workspace: Path, make_settings, redis_url: str) -> None:
    window = {"contextWindow": 30_000, "compaction": {"reserveTokensFloor": 2_000,
                                                     "memoryFlush": {"softThresholdTokens": 1_000}}}
    settings, _ = make_settings(workspace, redis=redis_url, extra={"agents": {"defaults": window}})
    s = sessions(settings, redis_url)
    text = words(500)

    def host(n: int) -> list[dict]:
        return [s.append("main", "shared", NewMessage(role="user", content=text)) for _ in range(8)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [r for batch in pool.map(host, range(8)) for r in batch]
    assert sorted(r["tokens"] for r in results) == [500 * i for i in range(1, 65)]  # no append lost
    assert sum(r["flushRequested"] for r in results) == 1
    assert sum(r["compactionRequested"] for r in results) == 1
    flushes = [e for e in Transcript.of(workspace, "shared").read() if e.type == "flush_requested"]
    assert len(flushes) == 1 and flushes[0].tokens == 27_000  # exactly at 30,000 − 2,000 − 1,000
    queued = Bus(redis.Redis.from_url(redis_url), settings).queues["session"].jobs
    assert sorted(j.func_name.rsplit(".", 1)[1] for j in queued) == ["compact_job", "flush_job"]
