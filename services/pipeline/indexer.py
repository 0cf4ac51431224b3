"""Indexer worker — the only writer of ``<state>/memory/<agent>.sqlite``.

Applies ``ChunksEmbedded``, ``FileDeleted``, ``FileSkipped`` and ``VectorsFilled`` through
``memoryd.shared.index.apply.apply``; a live edit's ``FileChunked`` comes first (:func:`text_job`,
texts only: keyword-searchable before the embedder answers) (stale events dropped by sequence number, one
transaction per file, idempotent). The index records its fingerprint (chunker,
tokenizer, FTS tokenizer, embedder); when the configured one differs, the indexer keeps
applying to it and queues a rebuild job (``memoryd.services.pipeline.rebuild``, by name),
which builds the new index side by side from the log and swaps it in: events are applied
under the agent's swap lock (shared), so none lands in the old file after its last fold.

Each indexer process also watches for a Redis that lost its data and re-drives the lost
work from the log (``memoryd.shared.rebuild.recovery``), and seals the log's checkpoints.
"""

from __future__ import annotations

import logging

import redis

from memoryd.shared import defaults as d
from memoryd.shared.events import (
    ChunksEmbedded,
    FileChunked,
    FileDeleted,
    FileSkipped,
    IndexApplied,
    VectorsFilled,
    parse_event,
)
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.index.apply import apply, apply_text_first, open_writer, outdated
from memoryd.shared.index.store import IndexWriter
from memoryd.shared.rebuild.recovery import Recovery
from memoryd.shared.rebuild.sidebyside import request, swap_lock
from memoryd.shared.runtime import runs
from memoryd.shared.runtime.worker import Periodic, WorkerContext, context

log = logging.getLogger("memoryd.indexer")


def _writer(ctx: WorkerContext, agent: str) -> IndexWriter:
    """This process's writer of the agent's index, reopened if another process swapped the file."""
    key = f"writer:{agent}"
    writer: IndexWriter = ctx.memo(key, lambda: _open(ctx, agent))
    if writer.replaced():
        writer.close()
        writer = ctx.cache[key] = _open(ctx, agent)
    return writer


def _open(ctx: WorkerContext, agent: str) -> IndexWriter:
    writer = open_writer(ctx.settings, agent)
    if outdated(writer, ctx.settings, agent) and ctx.redis_bus is not None:
        request(ctx.bus, agent)  # built side by side; this one answers and takes events meanwhile
    return writer


def _apply(ctx: WorkerContext,
           event: ChunksEmbedded | FileDeleted | FileSkipped | VectorsFilled) -> IndexApplied | None:
    with swap_lock(ctx.settings, event.agent).held(exclusive=False):
        return apply(_writer(ctx, event.agent), event)


def _finish(ctx: WorkerContext, agents: set[str], applied: list[IndexApplied]) -> None:
    for agent in agents:
        ctx.bus.note_missing_vectors(agent, _writer(ctx, agent).missing_vectors())
    for a in applied:
        runs.count(ctx.bus, a.run, files_done=1, chunks=a.chunks, files_skipped=int(a.action == "skipped"),
                      files_deleted=int(a.action == "deleted"))
    ctx.bus.log(applied)


def index_job(events: list[str]) -> int:
    """RQ job: apply a batch of file events to their agents' indexes."""
    ctx = context()
    applied: list[IndexApplied] = []
    agents: set[str] = set()
    for raw in events:
        event = parse_event(raw)
        if not isinstance(event, ChunksEmbedded | FileDeleted | FileSkipped):
            raise TypeError(f"index_job got a {event.type} event")
        ctx.ensure_agent(event.agent)
        agents.add(event.agent)
        result = _apply(ctx, event)
        if result is not None:
            applied.append(result)
    _finish(ctx, agents, applied)
    actions: dict[str, int] = {}
    for a in applied:
        actions[a.action] = actions.get(a.action, 0) + 1
    log.info("applied %d events (%s; %d chunks) to agents %s", len(events),
             ", ".join(f"{n} {action}" for action, n in sorted(actions.items())) or "nothing new",
             sum(a.chunks for a in applied), ", ".join(sorted(agents)))
    return len(applied)


def text_job(events: list[str]) -> int:
    """RQ job: a live edit's chunk texts, ahead of their vectors (``apply_text_first``: not logged,
    not counted in a run; the file's ``chunks.embedded`` follows). → files written."""
    ctx = context()
    written = 0
    for raw in events:
        event = parse_event(raw)
        if not isinstance(event, FileChunked):
            raise TypeError(f"text_job got a {event.type} event")
        ctx.ensure_agent(event.agent)
        with swap_lock(ctx.settings, event.agent).held(exclusive=False):
            written += apply_text_first(_writer(ctx, event.agent), event)
    log.info("stored the texts of %d of %d chunked files ahead of their vectors", written, len(events))
    return written


def fill_job(events: list[str]) -> int:
    """RQ job: attach backfilled vectors."""
    ctx = context()
    agents: set[str] = set()
    for raw in events:
        event = parse_event(raw)
        if not isinstance(event, VectorsFilled):
            raise TypeError(f"fill_job got a {event.type} event")
        ctx.ensure_agent(event.agent)
        agents.add(event.agent)
        _apply(ctx, event)
    _finish(ctx, agents, [])
    return len(events)


def recovery_scheduler(ctx: WorkerContext) -> Periodic:
    """In each indexer process: every second, re-drive from the log what a Redis that lost its
    data dropped (at once at start: a Redis restarted while no indexer ran is found too)."""
    recovery = Recovery(ctx.bus)
    return Periodic("log-recovery", d.LOG_RECOVERY_SECONDS, lambda: recovery.check(ctx.settings),
                    errors=(redis.RedisError, OSError, MemorydError), immediately=True)
