"""The index writer keeps its vector file (shared/index/vecfile.py) in step with SQLite.

Per transaction (``store.IndexWriter.transaction``): :meth:`VectorSync.begin` learns the
generation being written; the writer reports every vector row it adds and deletes (a
deletion is also logged in ``vector_deletions`` with the generation, in the same
transaction); after ``COMMIT``, :meth:`VectorSync.commit` appends, tombstones and publishes
the generation. A rolled-back transaction leaves the file as it was.

When the index is opened the file is checked: missing, of another index (``meta.vectors_uid``
differs: a rebuilt index swapped in without it) or of other dimensions, it is built from
SQLite; behind (a writer that died between a commit and its publish, or whose write failed)
it catches up — rows above its last rowid from ``chunk_vectors``, deletions from the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.shared import defaults as d
from memoryd.shared.index.vecfile import vec_path
from memoryd.shared.index.vecwriter import Rows, VecWriter

log = logging.getLogger("memoryd.vecfile")

META_VECTORS_UID = "vectors_uid"
#: Deletions logged at or below this generation have been pruned (the file holds them).
META_DELETIONS_FLOOR = "vector_deletions_floor"


def read_meta(conn: Any, key: str) -> str | None:
    """The index's ``meta`` value of ``key`` (None when unset): every reader of the index asks this."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def _set_meta(conn: Any, key: str, value: str) -> None:
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))


def index_rows(conn: Any, after: int, dims: int, through: int | None = None) -> Iterator[Rows]:
    """The index's vector rows with rowid > ``after`` (and ≤ ``through``), in rowid order, in blocks.

    Vectors are read by rowid: ~25 µs each, the same per row as a scan of vec0 (whose
    ``rowid IN (…)`` scans the whole table), so building a file of 1M rows takes ~25 s — once,
    when an index without one is first opened."""
    bound = "" if through is None else f" AND cv.rowid <= {int(through)}"
    link = conn.execute(f"SELECT cv.rowid, cv.chunk_id, c.source FROM chunk_vectors cv JOIN chunks c "
                        f"ON c.id = cv.chunk_id WHERE cv.rowid > ?{bound} ORDER BY cv.rowid", (after,))
    while True:
        meta = link.fetchmany(d.VEC_BLOCK_ROWS)
        if not meta:
            return
        blobs = {}
        for rowid, _, _ in meta:
            row = conn.execute("SELECT embedding FROM chunks_vec WHERE rowid = ?", (rowid,)).fetchone()
            if row is not None:
                blobs[rowid] = row[0]
        meta = [r for r in meta if r[0] in blobs]
        if meta:
            vectors = np.frombuffer(b"".join(blobs[r[0]] for r in meta), dtype=np.float32).reshape(len(meta), dims)
            yield Rows(np.fromiter((r[0] for r in meta), np.int64, len(meta)),
                       np.fromiter((r[1] for r in meta), np.int64, len(meta)), [r[2] for r in meta], vectors)


class VectorSync:
    """One index writer's vector file: what the open transaction changed, published after it commits."""

    def __init__(self, index_path: Path, conn: Any) -> None:
        self.path = vec_path(index_path)
        self.conn = conn
        self.writer: VecWriter | None = None
        self.generation = 0
        self.added: list[tuple[int, int, str, np.ndarray]] = []
        self.deleted: list[int] = []

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    # --- opening --------------------------------------------------------------------------
    def open(self) -> None:
        """Make the file hold what the committed index holds (outside any transaction)."""
        dims = read_meta(self.conn, "dims")
        if dims is None:
            return  # no vectors yet: the file is created with the first
        self.close()
        try:
            writer: VecWriter | None = VecWriter(self.path)
        except (FileNotFoundError, ValueError):
            writer = None
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            generation = int(read_meta(self.conn, "generation") or 0)
            floor = int(read_meta(self.conn, META_DELETIONS_FLOOR) or 0)
            if (writer is None or writer.uid != read_meta(self.conn, META_VECTORS_UID)
                    or writer.layout.dims != int(dims) or writer.state.generation < floor):
                if writer is not None:
                    writer.close()
                writer = self._build(int(dims), generation + 1)
            elif writer.state.generation < generation:
                last = writer.view.max_rowid(writer.state.rows)
                added = list(index_rows(self.conn, last, int(dims)))
                gone = [v for (v,) in self.conn.execute(
                    "SELECT vector FROM vector_deletions WHERE generation > ?", (writer.state.generation,))]
                log.warning("%s: catching up from generation %d to %d", self.path, writer.state.generation, generation)
                writer = writer.apply(generation, _concat(added) if added else None, np.asarray(gone, np.int64))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.writer = writer

    def _build(self, dims: int, generation: int) -> VecWriter:
        """A new file of every vector row, tied to this index at ``generation`` (inside BEGIN IMMEDIATE)."""
        writer = VecWriter.build(self.path, dims, index_rows(self.conn, 0, dims), generation)
        _set_meta(self.conn, META_VECTORS_UID, writer.uid)
        _set_meta(self.conn, "generation", str(generation))
        self.conn.execute("DELETE FROM vector_deletions WHERE generation <= ?", (generation,))
        _set_meta(self.conn, META_DELETIONS_FLOOR, str(generation))
        log.info("%s: built with %d rows", self.path, writer.state.rows)
        return writer

    # --- one transaction ------------------------------------------------------------------
    def begin(self, generation: int) -> None:
        self.generation = generation
        self.added, self.deleted = [], []
        if generation % d.VECTOR_PRUNE_EVERY == 0 and self.writer is not None:
            floor = min(self.writer.state.generation, generation - d.VECTOR_KEEP_GENERATIONS)
            if floor > 0:
                self.conn.execute("DELETE FROM vector_deletions WHERE generation <= ?", (floor,))
                _set_meta(self.conn, META_DELETIONS_FLOOR, str(floor))

    def add(self, rowid: int, chunk_id: int, source: str, vector: np.ndarray) -> None:
        if self.writer is None and read_meta(self.conn, META_VECTORS_UID) is None:
            # the index's first vector: an empty file now, tied to the index in this transaction
            self.writer = VecWriter.build(self.path, len(vector), [], self.generation - 1)
            _set_meta(self.conn, META_VECTORS_UID, self.writer.uid)
        self.added.append((rowid, chunk_id, source, vector))

    def delete(self, rowids: list[int]) -> None:
        self.conn.executemany("INSERT INTO vector_deletions(generation, vector) VALUES (?, ?)",
                              [(self.generation, v) for v in rowids])
        self.deleted.extend(rowids)

    def commit(self) -> None:
        """After COMMIT: append, tombstone, publish. A failure leaves the file behind; readers read
        the difference from SQLite, and the next commit (or the next open) catches it up."""
        try:
            if self.writer is None:
                if self.added or self.deleted:
                    self.open()
                return
            rows = None
            if self.added:
                rowids, chunks, sources, vectors = zip(*self.added, strict=True)
                rows = Rows(np.asarray(rowids, np.int64), np.asarray(chunks, np.int64), list(sources),
                            np.stack(vectors).astype(np.float32))
            self.writer = self.writer.apply(self.generation, rows, np.asarray(self.deleted, dtype=np.int64))
        except OSError as exc:
            log.error("%s: could not publish generation %d (%s); caught up at the next commit",
                      self.path, self.generation, exc)
            self.close()
        finally:
            self.added, self.deleted = [], []

    def rollback(self) -> None:
        self.added, self.deleted = [], []


def _concat(blocks: list[Rows]) -> Rows:
    return Rows(np.concatenate([b.rowids for b in blocks]), np.concatenate([b.chunks for b in blocks]),
                [s for b in blocks for s in b.sources], np.concatenate([b.vectors for b in blocks]))
