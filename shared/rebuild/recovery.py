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

import json
import logging
import os
import time
import uuid
from typing import Any

from rq import Queue
from rq.job import Job
from rq.registry import StartedJobRegistry

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.events import FileChanged
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.index.chunking import read_file
from memoryd.shared.index.store import IndexReader
from memoryd.shared.log.checkpoints import compact, fold
from memoryd.shared.log.eventlog import EventLog, hydrate
from memoryd.shared.log.fold import Until
from memoryd.shared.rebuild import sidebyside as rebuild
from memoryd.shared.runtime.bus import LOG_EPOCH, Bus, queue_name

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


def lost_work(settings: Settings, agent: str, before: float | None = None) -> dict[str, list[dict[str, Any]]]:
    """The logged events the index has not got, by the job that takes them next; ``before``: only
    those appended by then (what was appended after a loss was seen went to the new Redis)."""
    state = fold(settings, agent, Until(at=before) if before is not None else None)
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


def queued_events(bus: Bus) -> set[str]:
    """The event ids in every queue of this installation, waiting, taken or started (after a loss:
    little). RQ 3 moves a job it takes to the queue's intermediate list, and only then into the
    started registry: a job between the two is neither queued nor started, and not lost."""
    prefix = queue_name(bus.namespace, "")  # "memoryd-<ns>-": this installation's queues only
    found: set[str] = set()
    for name in (k.decode().removeprefix(Queue.redis_queue_namespace_prefix)
                 for k in bus.conn.smembers(Queue.redis_queues_keys)):
        if not name.startswith(prefix):
            continue
        queue = Queue(name, connection=bus.conn)
        ids = [*queue.get_job_ids(), *queue.intermediate_queue.get_job_ids(),
               *StartedJobRegistry(queue=queue).get_job_ids(cleanup=False)]
        for job in Job.fetch_many(ids, connection=bus.conn):
            payloads = job.args[0] if job is not None and job.args and isinstance(job.args[0], list) else []
            found.update(json.loads(raw).get("event_id", "") for raw in payloads if isinstance(raw, str))
    return found


def redrive(settings: Settings, bus: Bus, agent: str, before: float | None = None) -> dict[str, int]:
    """Queue the agent's lost work again (see the module doc): what the log holds and the index
    lacks, less what a queue holds (an emit between its log append and its enqueue, a dead node's
    jobs moved to the shared lanes). → events queued per job."""
    work = lost_work(settings, agent, before)
    queued = queued_events(bus) if any(work.values()) else set()  # looked at after the fold: see above
    work = {job: [b for b in bodies if b.get("event_id") not in queued] for job, bodies in work.items()}
    stores = EventLog(settings)
    try:
        hydrated = {job: [hydrate(b, stores.content(agent), stores.vectors) for b in bodies]
                    for job, bodies in work.items()}
    finally:
        stores.close()
    # a file to chunk again is read again here, where its workspace is: the chunkers need none
    read = [read_file(e, settings) for e in hydrated.pop("chunk") if isinstance(e, FileChanged)]
    hydrated["chunk"] = [e for e in read if isinstance(e, FileChanged)]
    bus.emit("index", [e for e in read if not isinstance(e, FileChanged)], bulk=True)  # found gone or skipped now
    for job, events in hydrated.items():
        payloads = [e.model_dump_json() for e in events]
        for start in range(0, len(payloads), d.FILES_PER_CHUNK_JOB):  # index jobs: to this node, the owner
            bus.enqueue(job, payloads[start:start + d.FILES_PER_CHUNK_JOB], bulk=True,
                        node=bus.settings.node if job == "index" else None)
    if rebuild.pending_plan(settings, agent) is not None:
        rebuild.request(bus, agent)
    counts = {job: len(bodies) for job, bodies in work.items()}
    if any(counts.values()):
        log.warning("agent %s: re-driven from the log: %s", agent, counts)
    return counts


def reachable(settings: Settings, agent_id: str) -> str | None:
    """Why this node cannot serve ``agent_id`` (None: it can)."""
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"its data dir {settings.data_dir} cannot be made here ({exc.strerror})"
    if not os.access(settings.data_dir, os.W_OK):
        return f"its data dir {settings.data_dir} is not writable here"
    if not settings.agent(agent_id).workspace.is_dir() and settings.index_path(agent_id).exists():
        return f"its workspace {settings.agent(agent_id).workspace} is not here, and it has an index"
    return None


class Recovery:
    """The indexer's watch for a Redis that lost its data, and its log upkeep."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.seen: bytes | None = None
        self.compacted_at = 0.0

    def owned(self, settings: Settings, *, take: bool = False) -> list[str]:
        """The agents whose lease this node holds now; ``take``: taking the free ones it can serve
        first (after Redis lost its data the leases are gone too, and a node may run no watcher)."""
        if take:
            servable = [a for a in settings.agent_ids() if reachable(settings, a) is None]
            return [a for a, owner in self.bus.leases.hold_many(servable).items() if owner.node == settings.node]
        owners = self.bus.leases.owners(settings.agent_ids())
        return [a for a, owner in owners.items() if owner is not None and owner.node == settings.node]

    def check(self, settings: Settings) -> dict[str, dict[str, int]]:
        """Re-drive the agents this node owns, or can take, if Redis lost its data since the last
        check: its marker key is gone, or holds a value set since (an emit into the emptied Redis came
        first). Once per loss and node, whichever of its indexers sees it first (an agent another node
        takes is re-driven there: shared/rebuild/takeover.py). Seal checkpoints every LOG_COMPACT_SECONDS."""
        key = self.bus.key(LOG_EPOCH)
        # appended after this look, an event's job went into the Redis seen now (a watcher's first
        # emit into a fresh Redis races this look): it is not lost work
        looked = time.time()
        current = self.bus.conn.get(key)
        lost = current is None or (self.seen is not None and current != self.seen)
        if current is None:
            self.bus.conn.set(key, uuid.uuid4().hex, nx=True)
            current = self.bus.conn.get(key)
        self.seen = current
        redriven = {}
        claim = f"{key}:redriven:{current.decode() if current else ''}:{settings.node}"
        if lost and current is not None and self.bus.conn.set(claim, 1, nx=True, ex=d.REDRIVE_CLAIM_SECONDS):
            redriven = {agent: redrive(settings, self.bus, agent, looked) for agent in self.owned(settings, take=True)}
        if time.monotonic() - self.compacted_at >= d.LOG_COMPACT_SECONDS:
            self.compacted_at = time.monotonic()
            for agent in self.owned(settings):
                compact(settings, agent)
        return redriven
