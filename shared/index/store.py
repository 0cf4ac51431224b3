"""The agent's SQLite index: the writer and read-only readers (its schema: shared/index/schema.py).

Only the indexer writes (``IndexWriter``); every other stage opens the file read-only
(``IndexReader``). The schema is SPEC §4: ``files``, ``chunks``, ``chunks_vec`` (sqlite-vec
``vec0``), ``chunks_fts`` (FTS5), ``meta``, plus ``chunk_vectors``, which maps each vector
row to its chunk (a chunk longer than the model's window has one vector per window and is
scored by its best one), and ``vector_deletions`` (what the vector file's readers catch up
on, shared/index/indexvectors.py). SPEC's ``embedding_cache`` is no longer per index: one per
model serves every agent (``content.VectorStore``; migration 3 moved the rows there).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.shared.embed.windowlines import window_lines
from memoryd.shared.events import ChunkData
from memoryd.shared.exceptions import Fenced, IndexMissing
from memoryd.shared.index import schema, sqlitedb
from memoryd.shared.index.fts import segment
from memoryd.shared.index.indexvectors import VectorSync, read_meta

#: meta keys
META_FINGERPRINT = "fingerprint"
META_EMBEDDER = "embedder"
META_DIMS = "dims"
META_GENERATION = "generation"
META_CHUNKS = "chunks"  # kept by triggers (shared/index/schema.py, migration 4)
META_FENCE = "fence"  # the newest fencing token a write came with (shared/runtime/lease.py)


def chunk_count(conn: Any) -> int:
    """Chunks in the index: kept in ``meta`` by schema migration 4's triggers (a ``count(*)``
    reads every row: 8 ms at 1M chunks), counted on an index not migrated yet."""
    kept = read_meta(conn, META_CHUNKS)
    return int(kept) if kept is not None else int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])


@dataclass(frozen=True)
class FileRow:
    path: str
    source: str
    hash: str
    seq: int
    status: str
    error: str | None
    chunks: int


class _Queries:
    conn: Any

    def meta(self, key: str) -> str | None:
        return read_meta(self.conn, key)

    def file(self, path: str) -> FileRow | None:
        row = self.conn.execute(
            "SELECT path, source, hash, seq, status, error, chunks FROM files WHERE path = ?", (path,)
        ).fetchone()
        return FileRow(*row) if row else None

    def files(self) -> list[FileRow]:
        rows = self.conn.execute(
            "SELECT path, source, hash, seq, status, error, chunks FROM files ORDER BY path"
        ).fetchall()
        return [FileRow(*r) for r in rows]

    def live_hashes(self) -> dict[str, str]:
        """path → sha256 of every file the index holds a version of (indexed or skipped)."""
        rows = self.conn.execute("SELECT path, hash FROM files WHERE status != 'deleted'").fetchall()
        return dict(rows)

    def max_seq(self) -> int:
        (seq,) = self.conn.execute("SELECT coalesce(max(seq), 0) FROM files").fetchone()
        return int(seq)

    def stored_vectors(self, embedder: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Chunk hash → its window vectors as this index holds them (``chunks_vec``), if they are
        ``embedder``'s: what an index can give back without the shared cache."""
        if self.meta(META_EMBEDDER) != embedder or self.meta(META_DIMS) is None:
            return {}  # another model's vectors, or none yet (no chunks_vec table)
        windows: dict[str, dict[int, list[bytes]]] = {}
        wanted = list(dict.fromkeys(hashes))
        for start in range(0, len(wanted), 500):
            batch = wanted[start:start + 500]
            marks = ",".join("?" * len(batch))
            for h, cid, blob in self.conn.execute(
                f"SELECT c.hash, c.id, v.embedding FROM chunks c JOIN chunk_vectors cv ON cv.chunk_id = c.id "
                f"JOIN chunks_vec v ON v.rowid = cv.rowid WHERE c.hash IN ({marks}) ORDER BY c.id, cv.window",
                batch,
            ):
                windows.setdefault(h, {}).setdefault(cid, []).append(blob)
        found = {}
        for h, by_chunk in windows.items():
            blobs = next(iter(by_chunk.values()))  # chunks with the same text have the same vectors
            found[h] = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)
        return found

    def counts(self) -> dict[str, int]:
        q = self.conn.execute
        return {
            "files": q("SELECT count(*) FROM files WHERE status = 'indexed'").fetchone()[0],
            "files_skipped": q("SELECT count(*) FROM files WHERE status = 'skipped'").fetchone()[0],
            "chunks": chunk_count(self.conn),
            "chunks_without_vectors": self.missing_vectors(),
        }

    def missing_vectors(self) -> int:
        """How many chunks are indexed without a vector (the partial index of has_vector = 0)."""
        return self.conn.execute("SELECT count(*) FROM chunks WHERE has_vector = 0").fetchone()[0]

    def chunks_missing_vectors(self, limit: int) -> list[tuple[str, str]]:
        """(hash, text) of chunks indexed without a vector, oldest first."""
        return self.conn.execute(
            "SELECT hash, min(text) FROM chunks WHERE has_vector = 0 GROUP BY hash ORDER BY min(id) LIMIT ?",
            (limit,),
        ).fetchall()

    def skipped(self) -> list[dict[str, str]]:
        rows = self.conn.execute("SELECT path, error FROM files WHERE status = 'skipped' ORDER BY path")
        return [{"path": p, "reason": e} for p, e in rows]


class IndexReader(_Queries):
    """A read-only view. It never writes and never blocks the indexer (WAL readers)."""

    def __init__(self, path: Path) -> None:
        if not Path(path).exists():
            raise IndexMissing(f"no index at {path}; start the pipeline (`memoryd up`) or run `memoryd index`")
        self.path = Path(path)
        self.conn = sqlitedb.connect(path, readonly=True)

    def close(self) -> None:
        self.conn.close()


class IndexWriter(_Queries):
    """The only writer of one agent's index. Every change is one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            schema.create(self.path)
        self.conn = sqlitedb.connect(self.path)
        self.inode = os.stat(self.path).st_ino
        #: The time written into rows; a replay sets it to each event's log time, so replaying
        #: the same log twice writes the same bytes.
        self.clock: Callable[[], float] = time.time
        #: The fencing token this writer's transactions carry (the agent's lease; None: unfenced,
        #: e.g. a replay into a file of its own). A transaction under an older token than the
        #: index has seen is refused (Fenced); a newer one is recorded.
        self.fence: int | None = None
        schema.migrate(self.conn, self.path)
        #: The vector file the query side maps (shared/index/indexvectors.py), kept in step with each commit.
        self.vectors = VectorSync(self.path, self.conn)
        self.vectors.open()

    def replaced(self) -> bool:
        """Whether the file at ``path`` is no longer the one this writer has open (a rebuild swapped it)."""
        try:
            return os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            return True

    def close(self) -> None:
        self.vectors.close()
        self.conn.close()

    # --- identity ---------------------------------------------------------------------
    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def ensure_vec_table(self, dims: int) -> None:
        have = self.meta(META_DIMS)
        if have is not None:
            if int(have) != dims:
                raise ValueError(f"index {self.path} holds {have}-d vectors, got {dims}-d")
            return
        self.conn.execute(
            f"CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding float[{dims}] distance_metric=cosine)"
        )
        self.set_meta(META_DIMS, str(dims))

    def _check_fence(self) -> None:
        """Inside the transaction: refuse it if the index has seen a newer token; record a newer one."""
        if self.fence is None:
            return
        seen = int(self.meta(META_FENCE) or 0)
        if self.fence < seen:
            raise Fenced(self.path.stem, f"the index {self.path}", self.fence, seen)
        if self.fence > seen:
            self.set_meta(META_FENCE, str(self.fence))

    def _bump_generation(self) -> None:
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
            (META_GENERATION,),
        )

    # --- writes -----------------------------------------------------------------------
    def transaction(self) -> _Transaction | contextlib.nullcontext[IndexWriter]:
        """One transaction; inside an open one (a replay writes a batch of files in one) it joins it."""
        return contextlib.nullcontext(self) if self.conn.in_transaction else _Transaction(self)

    def upsert_file(self, *, path: str, source: str, sha256: str, size: int, mtime: float, seq: int,
                    status: str, error: str | None = None, chunks: int = 0) -> None:
        self.conn.execute(
            "INSERT INTO files(path, source, hash, size, mtime, seq, status, error, chunks, indexed_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET source=excluded.source, "
            "hash=excluded.hash, size=excluded.size, mtime=excluded.mtime, seq=excluded.seq, "
            "status=excluded.status, error=excluded.error, chunks=excluded.chunks, indexed_at=excluded.indexed_at",
            (path, source, sha256, size, mtime, seq, status, error, chunks, self.clock()),
        )

    def replace_chunks(self, path: str, source: str, chunks: Sequence[ChunkData],
                       vectors: dict[str, np.ndarray]) -> tuple[int, int]:
        """Make ``path``'s chunks exactly ``chunks``. → (added, removed).

        Rows are matched by content hash, not by lines: a chunk whose text is unchanged keeps
        its row, its FTS entry and its vectors, and only its line numbers are updated when an
        edit above it moved it; only chunks whose text changed are deleted and inserted."""
        existing = self.conn.execute(
            "SELECT id, hash, start_line, end_line, has_vector, source FROM chunks WHERE path = ?", (path,)
        ).fetchall()
        by_hash: dict[str, list[tuple[int, int, int, int, str]]] = {}
        for cid, h, s, e, hv, src in existing:
            by_hash.setdefault(h, []).append((cid, s, e, hv, src))
        keep: list[tuple[int, str, int, str]] = []
        new: list[ChunkData] = []
        moved: list[tuple[int, int, int]] = []
        for chunk in chunks:
            slot = by_hash.get(chunk.hash)
            if not slot:
                new.append(chunk)
                continue
            lines = (chunk.start_line, chunk.end_line)
            cid, s, e, hv, src = slot.pop(next((i for i, r in enumerate(slot) if r[1:3] == lines), -1))
            if (s, e) != lines:
                moved.append((chunk.start_line, chunk.end_line, cid))
            keep.append((cid, chunk.hash, hv, src))
        gone = [r[0] for slots in by_hash.values() for r in slots]
        self._delete_chunks(gone)
        self.conn.executemany("UPDATE chunks SET start_line = ?, end_line = ? WHERE id = ?", moved)
        now = self.clock()
        for chunk in new:
            cur = self.conn.execute(
                "INSERT INTO chunks(path, source, start_line, end_line, hash, tokens, text, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (path, source, chunk.start_line, chunk.end_line, chunk.hash, chunk.tokens, chunk.text, now),
            )
            cid = cur.lastrowid
            self.conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", (cid, segment(chunk.text)))
            self._attach_vector(cid, source, vectors.get(chunk.hash))
        for cid, h, has_vector, old_source in keep:
            if source and old_source != source:  # an extraPath renamed: the vector file keys rows by source
                self.conn.execute("UPDATE chunks SET source = ? WHERE id = ?", (source, cid))
                if has_vector:
                    self._attach_vector(cid, source, self._detach_vectors(cid))
                    continue
            if not has_vector:
                self._attach_vector(cid, source or old_source, vectors.get(h))
        return len(new), len(gone)

    def _attach_vector(self, chunk_id: int, source: str, matrix: np.ndarray | None) -> None:
        if matrix is None:
            return
        self.ensure_vec_table(matrix.shape[1])
        (text,) = self.conn.execute("SELECT text FROM chunks WHERE id = ?", (chunk_id,)).fetchone()
        lines = window_lines(self.meta(META_EMBEDDER) or "", text, len(matrix)) or [(None, None)] * len(matrix)
        for window, (row, (first, last)) in enumerate(zip(matrix, lines, strict=True)):
            vid = self.conn.execute("INSERT INTO chunk_vectors(chunk_id, window, first_line, last_line) "
                                    "VALUES (?, ?, ?, ?)", (chunk_id, window, first, last)).lastrowid
            vector = np.ascontiguousarray(row, dtype=np.float32)
            self.conn.execute("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", (vid, vector.tobytes()))
            self.vectors.add(vid, chunk_id, source, vector)
        self.conn.execute("UPDATE chunks SET has_vector = 1 WHERE id = ?", (chunk_id,))

    def _detach_vectors(self, chunk_id: int) -> np.ndarray:
        """Delete the chunk's vector rows; → their vectors, in window order."""
        rows = self.conn.execute(
            "SELECT cv.rowid, v.embedding FROM chunk_vectors cv JOIN chunks_vec v ON v.rowid = cv.rowid "
            "WHERE cv.chunk_id = ? ORDER BY cv.window", (chunk_id,)).fetchall()
        self._delete_vectors(chunk_id)
        return np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)

    def _delete_vectors(self, chunk_id: int) -> None:
        vids = [vid for (vid,) in self.conn.execute("SELECT rowid FROM chunk_vectors WHERE chunk_id = ?", (chunk_id,))]
        for vid in vids:
            self.conn.execute("DELETE FROM chunks_vec WHERE rowid = ?", (vid,))
        self.conn.execute("DELETE FROM chunk_vectors WHERE chunk_id = ?", (chunk_id,))
        if vids:
            self.vectors.delete(vids)

    def _delete_chunks(self, ids: Sequence[int]) -> None:
        for cid in ids:
            self._delete_vectors(cid)
            self.conn.execute("DELETE FROM chunks_fts WHERE rowid = ?", (cid,))
            self.conn.execute("DELETE FROM chunks WHERE id = ?", (cid,))

    def delete_file_chunks(self, path: str) -> int:
        ids = [r[0] for r in self.conn.execute("SELECT id FROM chunks WHERE path = ?", (path,)).fetchall()]
        self._delete_chunks(ids)
        return len(ids)

    def fill_vectors(self, vectors: dict[str, np.ndarray]) -> int:
        """Attach vectors to every chunk still missing one whose hash is given. → chunks filled."""
        filled = 0
        for h, matrix in vectors.items():
            ids = self.conn.execute("SELECT id, source FROM chunks WHERE hash = ? AND has_vector = 0", (h,)).fetchall()
            for cid, source in ids:
                self._attach_vector(cid, source, matrix)
                filled += 1
        return filled


class _Transaction:
    """``with writer.transaction():`` — BEGIN IMMEDIATE … COMMIT, generation bumped, or ROLLBACK."""

    def __init__(self, writer: IndexWriter) -> None:
        self.writer = writer

    def __enter__(self) -> IndexWriter:
        self.writer.conn.execute("BEGIN IMMEDIATE")
        try:
            self.writer._check_fence()
        except Fenced:
            self.writer.conn.execute("ROLLBACK")
            raise
        self.writer.vectors.begin(int(self.writer.meta(META_GENERATION) or 0) + 1)
        return self.writer

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.writer._bump_generation()
            self.writer.conn.execute("COMMIT")
            self.writer.vectors.commit()
        else:
            self.writer.conn.execute("ROLLBACK")
            self.writer.vectors.rollback()
