"""One agent's index as the query service reads it: a read-only connection, refreshed per
committed generation, and its vectors mapped lazily (services/query/vectors.py).

Every read goes through :meth:`AgentIndex.snapshot`: one read transaction, so a search sees
one committed state and never blocks the indexer (WAL). Before it, two cheap checks: the
file's inode (a rebuild swaps in a new file: reopen) and ``meta.generation`` (bumped by
every committed write: refresh the document frequencies; the vectors follow on the next
search that wants them).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memoryd.services.query import keyword as query_keyword
from memoryd.services.query.ranking import ChunkRow
from memoryd.services.query.vectors import VectorIndex
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.index import sqlitedb
from memoryd.shared.index.indexvectors import read_meta
from memoryd.shared.index.store import META_DIMS, META_EMBEDDER, META_GENERATION, chunk_count
from memoryd.shared.log.eventlog import log_dir, segments


def missing_index(settings: Settings, agent_id: str) -> str:
    """What to do about an agent whose index file is gone: replay its event log when it has one
    (the log and the content store hold every chunk and vector: no provider call), else index."""
    index = f"no index at {settings.index_path(agent_id)} for agent {agent_id}"
    if segments(log_dir(settings, agent_id)):
        return (f"{index}; its event log is there: `memoryd replay --agent {agent_id}` rebuilds the index from it "
                f"in seconds, without calling the embedding provider (or run `memoryd index --agent {agent_id}`, "
                "or start the pipeline: `memoryd up`)")
    return f"{index}; start the pipeline (`memoryd up`) or run `memoryd index --agent {agent_id}`"


class AgentIndex:
    """One agent's index as the query service sees it. Use :meth:`snapshot` for every read;
    ``missing()`` is the message when the file is not there."""

    def __init__(self, path: Path, missing: Callable[[], str] | None = None) -> None:
        self.path = path
        self.missing = missing or (lambda: f"no index at {path}; start the pipeline (`memoryd up`) or run "
                                           "`memoryd index`")
        self.conn: Any = None
        self.identity: tuple[int, int] | None = None
        self.generation: str | None = None
        self.embedder: str | None = None
        self.vectors: VectorIndex | None = None
        #: The generation the vectors were last brought to: they follow lazily, on the first
        #: search that wants them, so a keyword-only search never maps the vector file.
        self.vectors_at: str | None = None
        self.keyword: query_keyword.KeywordSearcher | None = None
        self.lock = threading.Lock()

    @contextmanager
    def snapshot(self) -> Iterator[AgentIndex]:
        """Hold the index at its latest committed state for the duration of the block."""
        with self.lock:
            self._reopen_if_replaced()
            if self.vectors is not None:
                self.vectors.remap()  # before BEGIN: a new vector file never lags the snapshot
            self.conn.execute("BEGIN")
            try:
                self._refresh()
                yield self
            finally:
                self.conn.execute("ROLLBACK")

    def _reopen_if_replaced(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.close()
            raise IndexMissing(self.missing()) from None
        identity = (st.st_dev, st.st_ino)
        if identity != self.identity:
            self.close()
            self.conn = sqlitedb.connect(self.path, readonly=True)
            self.identity = identity
            self.keyword = query_keyword.KeywordSearcher(self.conn)

    def _refresh(self) -> None:
        generation = read_meta(self.conn, META_GENERATION)
        if generation == self.generation and self.keyword is not None:
            return
        self.embedder = read_meta(self.conn, META_EMBEDDER)
        if read_meta(self.conn, META_DIMS) is None and self.vectors is not None:
            self.vectors.close()
            self.vectors = None
        assert self.keyword is not None
        self.keyword.refresh(generation)
        self.generation = generation

    def vector_index(self) -> VectorIndex | None:
        """The index's vectors at this snapshot (call inside it); None when it has none."""
        if read_meta(self.conn, META_DIMS) is None:
            return None
        if self.vectors is None:
            self.vectors = VectorIndex(self.path)
        if self.vectors_at != self.generation or self.vectors.file is None:
            self.vectors.refresh(self.conn, int(self.generation or 0))
            self.vectors_at = self.generation
        return self.vectors

    def chunks(self, ids: list[int]) -> dict[int, ChunkRow]:
        """id → row of the chunks that still exist."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return self._rows(f"id IN ({marks})", ids)

    def around(self, path: str, start_line: int, end_line: int) -> dict[int, ChunkRow]:
        """id → row of the chunks of ``path`` holding a line of ``start_line − 1 .. end_line + 1``."""
        return self._rows("path = ? AND start_line <= ? AND end_line >= ?", (path, end_line + 1, start_line - 1))

    def _rows(self, where: str, params: Any) -> dict[int, ChunkRow]:
        """id → row of the chunks matching ``where`` (an SQL condition with ``params``)."""
        rows = self.conn.execute(
            f"SELECT id, path, source, start_line, end_line, text, tokens FROM chunks WHERE {where}", params)
        return {r[0]: ChunkRow(*r[1:]) for r in rows}

    def chunk_count(self) -> int:
        """Chunks in the index now, without loading its vectors."""
        with self.lock:
            self._reopen_if_replaced()
            return chunk_count(self.conn)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        self.identity = None
        self.generation = None
        if self.vectors is not None:
            self.vectors.close()
        self.vectors = None
        self.vectors_at = None
        self.keyword = None
