"""A run of ``memoryd index``: the files it queued, and the counters the stages bump for it.

``memoryd index`` starts a run (:func:`start`) when it queues an agent's files; the chunker,
embedder and indexer add to its counters as they go (:func:`count`), the CLI's progress bar
reads them (:func:`counts`), and ``memoryd status`` lists the runs not done yet (:func:`active`).
A run and its counters are forgotten after ``INDEX_RUN_TTL_SECONDS``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.runtime.bus import Bus


def start(bus: Bus, run: str, agent: str, files: int) -> None:
    """Record a run that queued ``files`` files of ``agent``."""
    bus.conn.hset(bus.key("runs"), run, json.dumps({"agent": agent, "files": files, "started": time.time()}))


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
    out = []
    for run, raw in bus.conn.hgetall(bus.key("runs")).items():
        meta = json.loads(raw)
        have = counts(bus, run.decode())
        if time.time() - meta["started"] > d.INDEX_RUN_TTL_SECONDS or have.get("files_done", 0) >= meta["files"]:
            bus.conn.hdel(bus.key("runs"), run)
            continue
        out.append({"run": run.decode(), "agent": meta["agent"], "files": meta["files"],
                    "files_done": have.get("files_done", 0), "chunks": have.get("chunks_found", 0),
                    "chunks_embedded": have.get("chunks_embedded", 0) + have.get("chunks_cached", 0),
                    "started": meta["started"]})
    return out
