"""The pipeline's stage functions run in one process, without Redis.

For rebuilding an index into a new file (the indexer, on a fingerprint change) and for
tests that need an index without workers. The functions are the very ones the chunker,
embedder and indexer workers run, so the result is the same index.
"""

from __future__ import annotations

import time

from services.chunker import chunk_file
from services.embedder import embed_files
from services.indexer import apply, open_writer
from shared.config import Settings
from shared.events import FileChanged, FileChunked, FileDeleted
from shared.store import IndexWriter
from shared.worker import WorkerContext
from shared.workspace import Workspace

#: Files chunked and embedded together: one provider call per batch.
BATCH_FILES = 32


def index_into(settings: Settings, agent_id: str, writer: IndexWriter) -> dict[str, int]:
    """Make ``writer``'s index hold exactly the agent's memory files on disk now."""
    ctx = WorkerContext(settings=settings)
    ws = Workspace(settings.agent(agent_id))
    seq = int(time.time() * 1_000_000)
    stats = {"files": 0, "chunks": 0, "chunks_embedded": 0, "chunks_cached": 0, "files_skipped": 0,
             "files_deleted": 0}
    on_disk = list(ws.scan())
    batch: list[FileChunked] = []

    def flush() -> None:
        for embedded in embed_files(ctx, batch):
            result = apply(writer, embedded)
            stats["chunks"] += result.chunks if result else 0
            stats["chunks_embedded"] += embedded.embedded
            stats["chunks_cached"] += embedded.cached
        batch.clear()

    for found in on_disk:
        event = FileChanged(agent=agent_id, path=found.path, seq=seq, root=str(found.root), rel=found.rel,
                            source=found.source, sha256="", size=0, mtime=0.0, origin="inline")
        result = chunk_file(event, settings)
        stats["files"] += 1
        if isinstance(result, FileChunked):
            batch.append(result)
            if len(batch) >= BATCH_FILES:
                flush()
        else:
            stats["files_skipped" if result.type == "file.skipped" else "files_deleted"] += 1
            apply(writer, result)
    flush()
    present = {f.path for f in on_disk}
    for path in set(writer.live_hashes()) - present:
        apply(writer, FileDeleted(agent=agent_id, path=path, seq=seq, origin="inline"))
        stats["files_deleted"] += 1
    return stats


def index_now(settings: Settings, agent_id: str) -> dict[str, int]:
    """Bring the agent's index at ``settings.index_path(agent_id)`` up to date, in this process."""
    writer = open_writer(settings, agent_id)
    try:
        return index_into(settings, agent_id, writer)
    finally:
        writer.close()
