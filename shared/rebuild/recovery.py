"""Recovery from the log: work Redis lost is driven again from what the log holds.

Every event is logged before it is queued, so after Redis restarts empty (or is flushed)
mid-pipeline the log holds everything whose job was lost. The indexer notices within a
second: the first emit into an empty Redis sets a marker key (``memoryd:<namespace>:log-epoch``)
to a new value; when the key is gone or its value changed, the first indexer to see it
compares each agent's folded log with its index and queues, without logging them again,
the events that never reached the index:

- an index-stage event (``chunks.embedded``, ``file.deleted``, ``file.skipped``) newer than
  the index's row of that path goes back to the indexer, texts and vectors read back by
  hash — no chunking, no embedding;
- a ``file.chunked`` with nothing newer goes back to the embedder (its vectors are likely
  in the vector store already), a ``file.changed`` back to the chunker;
- a rebuild that was under way is queued again (it resumes from its temp file).

The same thread seals checkpoints and applies retention every minute (checkpoints.py).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.index.store import IndexReader
from memoryd.shared.log.checkpoints import compact, fold
from memoryd.shared.log.eventlog import EventLog, hydrate
from memoryd.shared.rebuild import sidebyside as rebuild
from memoryd.shared.runtime.bus import LOG_EPOCH, Bus

log = logging.getLogger("memoryd.recovery")


def _held(settings: Settings, agent: str) -> dict[str, int]:
    """path → sequence number the agent's index holds (tombstones included)."""
    try:
        reader = IndexReader(settings.index_path(agent))
    except IndexMissing:
        return {}
    try:
        return {row.path: row.seq for row in reader.files()}
    finally:
        reader.close()


def lost_work(settings: Settings, agent: str) -> dict[str, list[dict[str, Any]]]:
    """The logged events the index has not got, by the job that takes them next."""
    state = fold(settings, agent)
    held = _held(settings, agent)
    work: dict[str, list[dict[str, Any]]] = {"index": [], "embed": [], "chunk": []}
    for path, decided in sorted(state.files.items()):
        have = held.get(path, -1)
        if have >= decided.seq:
            continue
        if decided.status == "skipped" and decided.chunks and have < decided.chunks["seq"]:
            work["index"].append(decided.chunks)  # the version that stays indexed, then the skip
        work["index"].append(decided.event)
    for path, body in sorted(state.inflight.items()):
        if held.get(path, -1) < body["seq"]:
            work["embed" if body["type"] == "file.chunked" else "chunk"].append(body)
    return work


def redrive(settings: Settings, bus: Bus, agent: str) -> dict[str, int]:
    """Queue the agent's lost work again (see the module doc). → events queued per job."""
    work = lost_work(settings, agent)
    stores = EventLog(settings)
    try:
        for job, bodies in work.items():
            payloads = [hydrate(b, stores.content(agent), stores.vectors).model_dump_json() for b in bodies]
            for start in range(0, len(payloads), d.FILES_PER_CHUNK_JOB):
                bus.enqueue(job, payloads[start:start + d.FILES_PER_CHUNK_JOB], bulk=True)
    finally:
        stores.close()
    if rebuild.pending_plan(settings, agent) is not None:
        rebuild.request(bus, agent)
    counts = {job: len(bodies) for job, bodies in work.items()}
    if any(counts.values()):
        log.warning("agent %s: re-driven from the log after Redis lost its queues: %s", agent, counts)
    return counts


class Recovery:
    """The indexer's watch for a Redis that lost its data, and its log upkeep."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.seen: bytes | None = None
        self.compacted_at = 0.0

    def check(self, settings: Settings) -> dict[str, dict[str, int]]:
        """Re-drive every agent if Redis lost its data since the last check: its marker key is
        gone, or holds a value set since (an emit into the emptied Redis came first). Once per
        loss, whichever indexer sees it first. Seal checkpoints every LOG_COMPACT_SECONDS."""
        key = self.bus.key(LOG_EPOCH)
        current = self.bus.conn.get(key)
        lost = current is None or (self.seen is not None and current != self.seen)
        if current is None:
            self.bus.conn.set(key, uuid.uuid4().hex, nx=True)
            current = self.bus.conn.get(key)
        self.seen = current
        redriven = {}
        if lost and current is not None and self.bus.conn.set(f"{key}:redriven:{current.decode()}", 1, nx=True,
                                                              ex=d.REDRIVE_CLAIM_SECONDS):
            redriven = {agent: redrive(settings, self.bus, agent) for agent in settings.agent_ids()}
        if time.monotonic() - self.compacted_at >= d.LOG_COMPACT_SECONDS:
            self.compacted_at = time.monotonic()
            for agent in settings.agent_ids():
                compact(settings, agent)
        return redriven
