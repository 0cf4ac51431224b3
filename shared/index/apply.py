"""Folding file events into an index: the rules every writer of an index follows.

``apply`` is the one function that changes an index for an event (the indexer worker
calls it for every event; a rebuild and a replay call it too), so every path to an index
gives the same rows. ``fingerprint`` is what an index's contents depend on.

A file's chunks change in one transaction; an event older (by sequence number) than what
the index holds for that path is dropped as stale, so a late retry never overwrites a
newer version and a deleted file never comes back. Applying the same event twice changes
nothing.

``apply_text_first`` is the one write that is not an event's: a file's chunk texts as soon as
they are chunked, so the file is keyword-searchable while its vectors are being made.
"""

from __future__ import annotations

import logging

from memoryd.shared.config.settings import Settings
from memoryd.shared.embed import providers
from memoryd.shared.events import (
    ChunksEmbedded,
    FileChunked,
    FileDeleted,
    FileEvent,
    FileSkipped,
    IndexApplied,
    VectorsFilled,
)
from memoryd.shared.index.chunking import Chunker
from memoryd.shared.index.fts import FTS_TOKENIZER
from memoryd.shared.index.store import META_EMBEDDER, META_FINGERPRINT, IndexWriter

log = logging.getLogger("memoryd.indexing")


def fingerprint(settings: Settings, agent_id: str) -> str:
    """What the index's contents depend on; a change means a rebuild."""
    search = settings.agent(agent_id).memory_search
    _, _, embedder = providers.describe(search)
    return f"{Chunker.from_settings(settings, agent_id).fingerprint}|fts:{FTS_TOKENIZER}|{embedder}"


def open_writer(settings: Settings, agent_id: str) -> IndexWriter:
    """The agent's index; a new one gets the configured fingerprint. One whose fingerprint is
    not the configured one is returned as it is — it keeps answering and taking events while
    a rebuild job builds its successor side by side (``memoryd.shared.rebuild.sidebyside``); see
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


def apply_text_first(writer: IndexWriter, event: FileChunked) -> bool:
    """Store ``event``'s chunk texts, without vectors, ahead of its ``chunks.embedded``. → whether
    anything was written.

    Nothing is logged for it and the file's row keeps the sequence number (and hash) of the last
    logged version: the index holds "seq S" only once S's ``chunks.embedded`` is applied, so a
    recovery from the log still re-drives S's embedding if Redis loses it, a restarted watcher
    still sees the file as changed, and the ``chunks.embedded`` of S (with its vectors) is applied
    as usual — matched by hash, the rows stay and gain their vectors. Dropped when the index
    holds S or a newer version already (the vectors came first)."""
    with writer.transaction():
        row = writer.file(event.path)
        if row is not None and row.seq >= event.seq:
            return False
        writer.replace_chunks(event.path, event.source, event.chunks, {})
        if row is None:
            writer.upsert_file(path=event.path, source=event.source, sha256="", size=0, mtime=0.0, seq=0,
                               status="indexed", chunks=len(event.chunks))
        else:
            writer.conn.execute("UPDATE files SET status = 'indexed', error = NULL, chunks = ? WHERE path = ?",
                                (len(event.chunks), event.path))
    return True


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
