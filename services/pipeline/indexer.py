"""Indexer worker — the only writer of ``<state>/memory/<agent>.sqlite``.

Applies ``ChunksEmbedded``, ``FileDeleted``, ``FileSkipped`` and ``VectorsFilled`` through
``memoryd.shared.indexing.apply`` (stale events dropped by sequence number, one
transaction per file, idempotent). The index records its fingerprint (chunker,
tokenizer, FTS tokenizer, embedder); when the configured one differs, the index is
rebuilt into a new file (cached vectors carried over) and swapped in atomically.
"""

from __future__ import annotations

import logging

from memoryd.shared.events import ChunksEmbedded, FileDeleted, FileSkipped, IndexApplied, VectorsFilled, parse_event
from memoryd.shared.indexing import apply, open_writer
from memoryd.shared.store import IndexWriter
from memoryd.shared.worker import WorkerContext, context

log = logging.getLogger("memoryd.indexer")


def _writer(ctx: WorkerContext, agent: str) -> IndexWriter:
    """This process's writer of the agent's index, reopened if another process swapped the file."""
    key = f"writer:{agent}"
    writer: IndexWriter = ctx.memo(key, lambda: open_writer(ctx.settings, agent))
    if writer.replaced():
        writer.close()
        writer = ctx.cache[key] = open_writer(ctx.settings, agent)
    return writer


def _finish(ctx: WorkerContext, agents: set[str], applied: list[IndexApplied]) -> None:
    for agent in agents:
        ctx.bus.note_missing_vectors(agent, _writer(ctx, agent).missing_vectors())
    for a in applied:
        ctx.bus.count(a.run, files_done=1, chunks=a.chunks, files_skipped=int(a.action == "skipped"),
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
        result = apply(_writer(ctx, event.agent), event)
        if result is not None:
            applied.append(result)
    _finish(ctx, agents, applied)
    return len(applied)


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
        apply(_writer(ctx, event.agent), event)
    _finish(ctx, agents, [])
    return len(events)
    actions: dict[str, int] = {}
    for a in applied:
        actions[a.action] = actions.get(a.action, 0) + 1
    log.info("applied %d events (%s; %d chunks) to agents %s", len(events),
             ", ".join(f"{n} {action}" for action, n in sorted(actions.items())) or "nothing new",
             sum(a.chunks for a in applied), ", ".join(sorted(agents)))
