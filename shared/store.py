"""The agent's SQLite index: schema (numbered migrations), the writer, read-only readers.

Only the indexer writes (``IndexWriter``); every other stage opens the file read-only
(``IndexReader``). The schema is SPEC §4: ``files``, ``chunks``, ``chunks_vec`` (sqlite-vec
``vec0``), ``chunks_fts`` (FTS5), ``embedding_cache``, ``meta``, plus ``chunk_vectors``,
which maps each vector row to its chunk: a chunk longer than the model's window has one
vector per window and is scored by its best one.
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

from memoryd.shared import sqlitedb
from memoryd.shared.events import ChunkData, VectorData
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.fts import segment

MIGRATIONS: list[str] = [
    # 1: the schema of SPEC §4.
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE files (
        path TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        hash TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime REAL NOT NULL,
        seq INTEGER NOT NULL,
        status TEXT NOT NULL,          -- indexed | skipped | deleted (a tombstone keeps its seq)
        error TEXT,
        chunks INTEGER NOT NULL DEFAULT 0,
        indexed_at REAL NOT NULL
    );
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        path TEXT NOT NULL,
        source TEXT NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        hash TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        text TEXT NOT NULL,
        has_vector INTEGER NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL
    );
    CREATE INDEX chunks_by_path ON chunks(path);
    CREATE INDEX chunks_by_hash ON chunks(hash);
    CREATE INDEX chunks_missing_vector ON chunks(has_vector) WHERE has_vector = 0;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(text, tokenize = 'unicode61 remove_diacritics 2');
    CREATE TABLE chunk_vectors (
        rowid INTEGER PRIMARY KEY AUTOINCREMENT,
        chunk_id INTEGER NOT NULL,
        window INTEGER NOT NULL
    );
    CREATE INDEX chunk_vectors_by_chunk ON chunk_vectors(chunk_id);
    CREATE TABLE embedding_cache (
        embedder TEXT NOT NULL,
        hash TEXT NOT NULL,
        windows INTEGER NOT NULL,
        dims INTEGER NOT NULL,
        vector BLOB NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (embedder, hash)
    );
    """,
]

#: meta keys
META_FINGERPRINT = "fingerprint"
META_EMBEDDER = "embedder"
META_DIMS = "dims"
META_GENERATION = "generation"


@dataclass(frozen=True)
class FileRow:
    path: str
    source: str
    hash: str
    seq: int
    status: str
    error: str | None
    chunks: int


def _migrate(conn: Any) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _create(path: Path) -> None:
    """A new index appears whole: built under a temp name, migrated, then renamed into place,
    so a reader never opens a file without its tables."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    conn = sqlitedb.connect(tmp)
    try:
        _migrate(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for side in ("-wal", "-shm"):
        Path(f"{tmp}{side}").unlink(missing_ok=True)
    if path.exists():  # another writer won the race: use its file
        tmp.unlink()
    else:
        os.replace(tmp, path)


class _Queries:
    conn: Any

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

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

    def cache_get(self, embedder: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        wanted = list(dict.fromkeys(hashes))
        for start in range(0, len(wanted), 500):
            batch = wanted[start:start + 500]
            marks = ",".join("?" * len(batch))
            for h, windows, dims, blob in self.conn.execute(
                f"SELECT hash, windows, dims, vector FROM embedding_cache WHERE embedder = ? AND hash IN ({marks})",
                (embedder, *batch),
            ):
                found[h] = np.frombuffer(blob, dtype=np.float32).reshape(windows, dims)
        return found

    def counts(self) -> dict[str, int]:
        q = self.conn.execute
        return {
            "files": q("SELECT count(*) FROM files WHERE status = 'indexed'").fetchone()[0],
            "files_skipped": q("SELECT count(*) FROM files WHERE status = 'skipped'").fetchone()[0],
            "chunks": q("SELECT count(*) FROM chunks").fetchone()[0],
            "chunks_without_vectors": self.missing_vectors(),
            "cache_entries": q("SELECT count(*) FROM embedding_cache").fetchone()[0],
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
            _create(self.path)
        self.conn = sqlitedb.connect(self.path)
        self.inode = os.stat(self.path).st_ino
        #: The time written into rows; a replay sets it to each event's log time, so replaying
        #: the same log twice writes the same bytes.
        self.clock: Callable[[], float] = time.time
        _migrate(self.conn)

    def replaced(self) -> bool:
        """Whether the file at ``path`` is no longer the one this writer has open (a rebuild swapped it)."""
        try:
            return os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            return True

    def close(self) -> None:
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
        """Make ``path``'s chunks exactly ``chunks``; identical ones are kept. → (added, removed)."""
        existing = self.conn.execute(
            "SELECT id, hash, start_line, end_line, has_vector FROM chunks WHERE path = ?", (path,)
        ).fetchall()
        by_key: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
        for cid, h, s, e, hv in existing:
            by_key.setdefault((h, s, e), []).append((cid, hv))
        keep: list[tuple[int, str, int]] = []
        new: list[ChunkData] = []
        for chunk in chunks:
            slot = by_key.get((chunk.hash, chunk.start_line, chunk.end_line))
            if slot:
                cid, hv = slot.pop()
                keep.append((cid, chunk.hash, hv))
            else:
                new.append(chunk)
        gone = [cid for slots in by_key.values() for cid, _ in slots]
        self._delete_chunks(gone)
        now = self.clock()
        for chunk in new:
            cur = self.conn.execute(
                "INSERT INTO chunks(path, source, start_line, end_line, hash, tokens, text, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (path, source, chunk.start_line, chunk.end_line, chunk.hash, chunk.tokens, chunk.text, now),
            )
            cid = cur.lastrowid
            self.conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", (cid, segment(chunk.text)))
            self._attach_vector(cid, vectors.get(chunk.hash))
        for cid, h, has_vector in keep:
            if not has_vector:
                self._attach_vector(cid, vectors.get(h))
        if source:
            self.conn.execute("UPDATE chunks SET source = ? WHERE path = ? AND source != ?", (source, path, source))
        return len(new), len(gone)

    def _attach_vector(self, chunk_id: int, matrix: np.ndarray | None) -> None:
        if matrix is None:
            return
        self.ensure_vec_table(matrix.shape[1])
        for window, row in enumerate(matrix):
            cur = self.conn.execute("INSERT INTO chunk_vectors(chunk_id, window) VALUES (?, ?)", (chunk_id, window))
            self.conn.execute(
                "INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)",
                (cur.lastrowid, np.ascontiguousarray(row, dtype=np.float32).tobytes()),
            )
        self.conn.execute("UPDATE chunks SET has_vector = 1 WHERE id = ?", (chunk_id,))

    def _delete_chunks(self, ids: Sequence[int]) -> None:
        for cid in ids:
            for (vid,) in self.conn.execute("SELECT rowid FROM chunk_vectors WHERE chunk_id = ?", (cid,)).fetchall():
                self.conn.execute("DELETE FROM chunks_vec WHERE rowid = ?", (vid,))
            self.conn.execute("DELETE FROM chunk_vectors WHERE chunk_id = ?", (cid,))
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
            ids = self.conn.execute("SELECT id FROM chunks WHERE hash = ? AND has_vector = 0", (h,)).fetchall()
            for (cid,) in ids:
                self._attach_vector(cid, matrix)
                filled += 1
        return filled

    def cache_put(self, embedder: str, vectors: Iterable[VectorData]) -> None:
        now = self.clock()
        self.conn.executemany(
            "INSERT OR IGNORE INTO embedding_cache(embedder, hash, windows, dims, vector, created_at) "
            "VALUES (?,?,?,?,?,?)",
            [(embedder, v.hash, v.windows, v.dims, v.matrix().tobytes(), now) for v in vectors],
        )


class _Transaction:
    """``with writer.transaction():`` — BEGIN IMMEDIATE … COMMIT, generation bumped, or ROLLBACK."""

    def __init__(self, writer: IndexWriter) -> None:
        self.writer = writer

    def __enter__(self) -> IndexWriter:
        self.writer.conn.execute("BEGIN IMMEDIATE")
        return self.writer

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.writer._bump_generation()
            self.writer.conn.execute("COMMIT")
        else:
            self.writer.conn.execute("ROLLBACK")
