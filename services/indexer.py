"""Indexer worker — the only writer of ``<state>/memory/<agent>.sqlite``.

Applies ``ChunksEmbedded``, ``FileDeleted``, ``FileSkipped`` and ``VectorsFilled``. A file's
chunks change in one transaction; an event older (by sequence number) than what the
index holds for that path is dropped as stale, so a late retry never overwrites a newer
version and a deleted file never comes back. Applying the same event twice changes
nothing: jobs are idempotent.

The index records its fingerprint (chunker, tokenizer, FTS tokenizer, embedder). When
the configured one differs, the index is rebuilt into a new file (cached vectors are
carried over) and swapped in atomically; the old file keeps serving until then.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from shared import providers
from shared.config import Settings
from shared.events import (
    ChunksEmbedded,
    FileDeleted,
    FileEvent,
    FileSkipped,
    IndexApplied,
    VectorsFilled,
    parse_event,
)
from shared.fts import FTS_TOKENIZER
from shared.store import META_EMBEDDER, META_FINGERPRINT, IndexWriter
from shared.worker import WorkerContext, context

log = logging.getLogger("memoryd.indexer")


def fingerprint(settings: Settings, agent_id: str) -> str:
    """What the index's contents depend on; a change means a rebuild."""
    from services.chunker import chunker_for

    search = settings.agent(agent_id).memory_search
    _, _, embedder = providers.describe(search)
    return f"{chunker_for(settings, agent_id).fingerprint}|fts:{FTS_TOKENIZER}|{embedder}"


def open_writer(settings: Settings, agent_id: str) -> IndexWriter:
    """The agent's index, rebuilt first if its fingerprint is not the configured one."""
    path = settings.index_path(agent_id)
    wanted = fingerprint(settings, agent_id)
    writer = IndexWriter(path)
    have = writer.meta(META_FINGERPRINT)
    if have is None:
        _, _, embedder = providers.describe(settings.agent(agent_id).memory_search)
        with writer.transaction():
            writer.set_meta(META_FINGERPRINT, wanted)
            writer.set_meta(META_EMBEDDER, embedder)
        return writer
    if have == wanted:
        return writer
    log.warning("agent %s: index fingerprint changed (%s → %s); rebuilding %s", agent_id, have, wanted, path)
    writer.close()
    rebuild(settings, agent_id)
    return IndexWriter(path)


def rebuild(settings: Settings, agent_id: str) -> dict[str, int]:
    """Build the agent's index afresh in a new file from its workspace and swap it in."""
    from shared.inline import index_into

    path = settings.index_path(agent_id)
    fresh = path.with_name(f"{path.name}.rebuild")
    for leftover in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        leftover.unlink(missing_ok=True)
    writer = IndexWriter(fresh)
    if path.exists():
        writer.conn.execute("ATTACH DATABASE ? AS old", (f"file:{path}?mode=ro",))
        writer.conn.execute("INSERT OR IGNORE INTO embedding_cache SELECT * FROM old.embedding_cache")
        writer.conn.execute("DETACH DATABASE old")
    _, _, embedder = providers.describe(settings.agent(agent_id).memory_search)
    with writer.transaction():
        writer.set_meta(META_FINGERPRINT, fingerprint(settings, agent_id))
        writer.set_meta(META_EMBEDDER, embedder)
    stats = index_into(settings, agent_id, writer)
    writer.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    writer.close()
    os.replace(fresh, path)
    for side in (Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        side.unlink(missing_ok=True)
    log.warning("agent %s: rebuilt index swapped in (%s)", agent_id, stats)
    return stats


def _stale(writer: IndexWriter, event: FileEvent) -> IndexApplied | None:
    row = writer.file(event.path)
    if row is not None and row.seq > event.seq:
        return IndexApplied(agent=event.agent, path=event.path, seq=event.seq, run=event.run, action="stale",
                            reason=f"index holds seq {row.seq} > {event.seq}")
    return None


def apply(writer: IndexWriter, event: FileEvent | VectorsFilled) -> IndexApplied | None:
    """Apply one event in one transaction; → what happened (None for VectorsFilled)."""
    if isinstance(event, VectorsFilled):
        if event.embedder != writer.meta(META_EMBEDDER):
            log.warning("agent %s: dropped vectors of %s; index uses %s",
                        event.agent, event.embedder, writer.meta(META_EMBEDDER))
            return None
        vectors = {v.hash: v.matrix() for v in event.vectors}
        with writer.transaction():
            writer.cache_put(event.embedder, event.vectors)
            writer.fill_vectors(vectors)
        return None
    with writer.transaction():
        stale = _stale(writer, event)
        if stale:
            return stale
        if isinstance(event, ChunksEmbedded):
            return _apply_chunks(writer, event)
        if isinstance(event, FileDeleted):
            row = writer.file(event.path)
            removed = writer.delete_file_chunks(event.path)
            writer.upsert_file(path=event.path, source=row.source if row else "memory", sha256="", size=0,
                               mtime=0.0, seq=event.seq, status="deleted")
            return IndexApplied(agent=event.agent, path=event.path, seq=event.seq, run=event.run,
                                action="deleted", chunks_removed=removed)
        if isinstance(event, FileSkipped):
            row = writer.file(event.path)
            writer.upsert_file(path=event.path, source=event.source, sha256=event.sha256, size=event.size,
                               mtime=event.mtime, seq=event.seq, status="skipped", error=event.reason,
                               chunks=row.chunks if row else 0)
            return IndexApplied(agent=event.agent, path=event.path, seq=event.seq, run=event.run,
                                action="skipped", sha256=event.sha256, reason=event.reason)
    raise TypeError(f"the indexer does not apply {event.type} events")


def _apply_chunks(writer: IndexWriter, event: ChunksEmbedded) -> IndexApplied:
    index_embedder = writer.meta(META_EMBEDDER)
    vectors = {v.hash: v.matrix() for v in event.vectors} if event.embedder == index_embedder else {}
    if event.vectors and not vectors:
        log.warning("agent %s: %s: vectors of %s dropped, index uses %s",
                    event.agent, event.path, event.embedder, index_embedder)
    writer.cache_put(event.embedder, event.vectors if vectors else [])
    added, removed = writer.replace_chunks(event.path, event.source, event.chunks, vectors)
    writer.upsert_file(path=event.path, source=event.source, sha256=event.sha256, size=event.size,
                       mtime=event.mtime, seq=event.seq, status="indexed", chunks=len(event.chunks))
    missing = writer.conn.execute(
        "SELECT count(*) FROM chunks WHERE path = ? AND has_vector = 0", (event.path,)
    ).fetchone()[0]
    return IndexApplied(agent=event.agent, path=event.path, seq=event.seq, run=event.run, action="replaced",
                        sha256=event.sha256, chunks=len(event.chunks), chunks_added=added,
                        chunks_removed=removed, vectors_missing=missing)


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
