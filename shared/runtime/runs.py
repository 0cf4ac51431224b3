"""A run of ``memoryd index``: the files it queued, and the counters the stages bump for it.

``memoryd index`` claims a run for its agent (:func:`claim`) before it registers the agent or
surveys its workspace, and starts it (:func:`start`) once it has queued the files; the chunker,
embedder and indexer add to its counters as they go (:func:`count`), the CLI's progress bar
reads them (:func:`counts`), and ``memoryd status`` lists the runs not done yet (:func:`active`).
A run and its counters are forgotten after ``INDEX_RUN_TTL_SECONDS``. While a run covers an agent
(:func:`covering`), the watcher does not reconcile that agent: the run queues every file, and a
reconcile at the same time would queue them all a second time (bench/agents.py's import left 552
such jobs in the bulk queues after it had finished).
"""

from __future__ import annotations

import json
import time
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.runtime.bus import Bus


def claim(bus: Bus, run: str, agent: str) -> None:
    """Record a run of ``agent`` that is queuing its files (how many is not known yet)."""
    bus.conn.hset(bus.key("runs"), run, json.dumps({"agent": agent, "files": None, "started": time.time()}))


def start(bus: Bus, run: str, agent: str, files: int) -> None:
    """Record a run that queued ``files`` files of ``agent``."""
    bus.conn.hset(bus.key("runs"), run, json.dumps({"agent": agent, "files": files, "started": time.time()}))


def forget(bus: Bus, run: str) -> None:
    """Drop a run that queued nothing (it failed before it could)."""
    bus.conn.hdel(bus.key("runs"), run)


def covering(bus: Bus, agent: str) -> bool:
    """Whether a run that is claimed or not done yet covers ``agent``'s files."""
    return any(r["agent"] == agent for r in _live(bus, queuing=True))


def count(bus: Bus, run: str | None, **fields: int) -> None:
    """Add to the run's counters (nothing for work that is no run's: an edit, a reconcile)."""
    if not run:
        return
    pipe = bus.conn.pipeline(transaction=False)
    for name, value in fields.items():
        if value:
            pipe.hincrby(bus.key("run", run), name, value)
    pipe.expire(bus.key("run", run), d.INDEX_RUN_TTL_SECONDS)
    pipe.execute()


def counts(bus: Bus, run: str) -> dict[str, int]:
    raw = bus.conn.hgetall(bus.key("run", run))
    return {k.decode(): int(v) for k, v in raw.items()}


def active(bus: Bus) -> list[dict[str, Any]]:
    """The runs not done yet, with their counts; done runs and runs past the TTL are dropped."""
    return _live(bus, queuing=False)


def _live(bus: Bus, *, queuing: bool) -> list[dict[str, Any]]:
    """The runs not done yet (with ``queuing``, also those still queuing their files)."""
    out = []
    for run, raw in bus.conn.hgetall(bus.key("runs")).items():
        meta = json.loads(raw)
        have = counts(bus, run.decode())
        expired = time.time() - meta["started"] > d.INDEX_RUN_TTL_SECONDS
        if expired or (meta["files"] is not None and have.get("files_done", 0) >= meta["files"]):
            bus.conn.hdel(bus.key("runs"), run)
            continue
        if meta["files"] is None and not queuing:
            continue
        out.append({"run": run.decode(), "agent": meta["agent"], "files": meta["files"],
                    "files_done": have.get("files_done", 0), "chunks": have.get("chunks_found", 0),
                    "chunks_embedded": have.get("chunks_embedded", 0) + have.get("chunks_cached", 0),
                    "started": meta["started"]})
    return out
