"""Folding file events into an index: the rules every writer of an index follows.

``apply`` is the one function that changes an index for an event (the indexer worker
calls it for every event; a rebuild and a replay call it too), so every path to an index
gives the same rows. ``index_into`` runs the whole pipeline — read, chunk, embed, apply —
in one process without Redis, logging what it applies like the stages do: for tests and
benchmarks that need an index without workers.

A file's chunks change in one transaction; an event older (by sequence number) than what
the index holds for that path is dropped as stale, so a late retry never overwrites a
newer version and a deleted file never comes back. Applying the same event twice changes
nothing.
"""

from __future__ import annotations

import logging
import os
import stat
import time

from memoryd.shared import defaults as d
from memoryd.shared import providers
from memoryd.shared.bus import Bus
from memoryd.shared.chunking import Chunker, chunk_file
from memoryd.shared.config import Settings
from memoryd.shared.embedding import embed_files
from memoryd.shared.eventlog import EventLog
from memoryd.shared.events import (
    ChunksEmbedded,
    FileChanged,
    FileChunked,
    FileDeleted,
    FileEvent,
    FileSkipped,
    IndexApplied,
    VectorsFilled,
)
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.fts import FTS_TOKENIZER
from memoryd.shared.store import META_EMBEDDER, META_FINGERPRINT, IndexReader, IndexWriter
from memoryd.shared.worker import WorkerContext
from memoryd.shared.workspace import MemoryFile, Skipped, Workspace, file_sha256

log = logging.getLogger("memoryd.indexing")


def fingerprint(settings: Settings, agent_id: str) -> str:
    """What the index's contents depend on; a change means a rebuild."""
    search = settings.agent(agent_id).memory_search
    _, _, embedder = providers.describe(search)
    return f"{Chunker.from_settings(settings, agent_id).fingerprint}|fts:{FTS_TOKENIZER}|{embedder}"


def open_writer(settings: Settings, agent_id: str) -> IndexWriter:
    """The agent's index; a new one gets the configured fingerprint. One whose fingerprint is
    not the configured one is returned as it is — it keeps answering and taking events while
    a rebuild job builds its successor side by side (``memoryd.shared.rebuild``); see
    :func:`outdated`."""
    writer = IndexWriter(settings.index_path(agent_id))
    if writer.meta(META_FINGERPRINT) is None:
        _, _, embedder = providers.describe(settings.agent(agent_id).memory_search)
        with writer.transaction():
            writer.set_meta(META_FINGERPRINT, fingerprint(settings, agent_id))
            writer.set_meta(META_EMBEDDER, embedder)
    return writer


def outdated(writer: IndexWriter, settings: Settings, agent_id: str) -> bool:
    """Whether the index was built with other settings than the configured ones (rebuild it)."""
    have, wanted = writer.meta(META_FINGERPRINT), fingerprint(settings, agent_id)
    if have != wanted:
        log.warning("agent %s: index fingerprint %s is not the configured %s", agent_id, have, wanted)
    return have != wanted


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
    added, removed = writer.replace_chunks(event.path, event.source, event.chunks, vectors)
    writer.upsert_file(path=event.path, source=event.source, sha256=event.sha256, size=event.size,
                       mtime=event.mtime, seq=event.seq, status="indexed", chunks=len(event.chunks))
    missing = writer.conn.execute(
        "SELECT count(*) FROM chunks WHERE path = ? AND has_vector = 0", (event.path,)
    ).fetchone()[0]
    return IndexApplied(agent=event.agent, path=event.path, seq=event.seq, run=event.run, action="replaced",
                        sha256=event.sha256, chunks=len(event.chunks), chunks_added=added,
                        chunks_removed=removed, vectors_missing=missing)


def index_into(settings: Settings, agent_id: str, writer: IndexWriter) -> dict[str, int]:
    """Make ``writer``'s index hold exactly the agent's memory files on disk now (and log it)."""
    ctx = WorkerContext(settings=settings)
    record = EventLog(settings)
    ws = Workspace(settings.agent(agent_id))
    seq = int(time.time() * 1_000_000)
    stats = {"files": 0, "chunks": 0, "chunks_embedded": 0, "chunks_cached": 0, "files_skipped": 0,
             "files_deleted": 0}
    survey = ws.survey()
    on_disk = survey.files
    batch: list[FileChunked] = []

    def flush() -> None:
        done = embed_files(ctx, batch)
        record.append(done)
        for embedded in done:
            result = apply(writer, embedded)
            stats["chunks"] += result.chunks if result else 0
            stats["chunks_embedded"] += embedded.embedded
            stats["chunks_cached"] += embedded.cached
        batch.clear()

    changes = [FileChanged(agent=agent_id, path=found.path, seq=seq, root=str(found.root), rel=found.rel,
                           source=found.source, sha256="", size=0, mtime=0.0, origin="inline") for found in on_disk]
    record.append(changes)
    for event in changes:
        result = chunk_file(event, settings)
        stats["files"] += 1
        if isinstance(result, FileChunked):
            batch.append(result)
            if len(batch) >= d.FOLD_BATCH_FILES:
                flush()
        else:
            stats["files_skipped" if result.type == "file.skipped" else "files_deleted"] += 1
            record.append([result])
            apply(writer, result)
    flush()
    skipped = [skipped_event(agent_id, s, seq) for s in survey.skipped]
    record.append(skipped)
    for event in skipped:
        apply(writer, event)
        stats["files_skipped"] += 1
    present = {f.path for f in on_disk} | {s.path for s in survey.skipped}
    gone = [FileDeleted(agent=agent_id, path=path, seq=seq, origin="inline")
            for path in sorted(set(writer.live_hashes()) - present)]
    record.append(gone)
    for event in gone:
        apply(writer, event)
        stats["files_deleted"] += 1
    record.close()
    return stats


def index_now(settings: Settings, agent_id: str) -> dict[str, int]:
    """Bring the agent's index at ``settings.index_path(agent_id)`` up to date, in this process
    (rebuilt from its log first if it was built with other settings)."""
    writer = open_writer(settings, agent_id)
    if outdated(writer, settings, agent_id):
        writer.close()
        from memoryd.shared.rebuild import rebuild  # rebuild folds the log through apply(), defined here

        rebuild(settings, agent_id)
        writer = open_writer(settings, agent_id)
    try:
        return index_into(settings, agent_id, writer)
    finally:
        writer.close()


# --- what the index holds against what is on disk ------------------------------------
def indexed_hashes(settings: Settings, agent_id: str) -> dict[str, str]:
    try:
        reader = IndexReader(settings.index_path(agent_id))
    except IndexMissing:
        return {}
    try:
        return reader.live_hashes()
    finally:
        reader.close()


def skipped_event(agent_id: str, skipped: Skipped, seq: int, run: str | None = None) -> FileSkipped:
    """The index entry for what a workspace survey skipped (a name that is not UTF-8, a folder too
    deep): ``memoryd status`` lists it with the reason. Its sha256 is "", so a reconcile that finds
    it recorded already emits nothing."""
    return FileSkipped(agent=agent_id, path=skipped.path, seq=seq, run=run, source=skipped.source, sha256="",
                       size=0, mtime=0.0, reason=skipped.reason)


def changed_event(bus: Bus, agent_id: str, found: MemoryFile, *, origin: str,
                  run: str | None = None) -> FileChanged | None:
    """A FileChanged for ``found`` as it is on disk now; None if it vanished or is no file."""
    try:
        st = os.lstat(found.absolute)
        if not stat.S_ISREG(st.st_mode):
            return None
        sha = file_sha256(found.absolute)
    except OSError:
        return None
    return FileChanged(agent=agent_id, path=found.path, seq=bus.next_seq(agent_id), run=run, root=str(found.root),
                       rel=found.rel, source=found.source, sha256=sha, size=st.st_size, mtime=st.st_mtime,
                       origin=origin)
