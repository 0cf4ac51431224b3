"""The vector side of memory_search: an in-memory float32 matrix per agent, kept in step with the index.

sqlite-vec stays the index of record, but its exact ``vec0`` KNN scans 100k × 384-d in
~65 ms here, while one numpy matrix-vector product over the same floats takes 5–14 ms.
So the query service holds each agent's vectors as one contiguous matrix and refreshes
it when the index's ``meta.generation`` changes: rows above the last seen
``chunk_vectors.rowid`` (AUTOINCREMENT, so new rows always have higher ids) are read and
appended; rows whose ids are gone are masked, then compacted away. A rebuilt index (a new file) is
loaded anew.

The matrix is stored transposed (``dims × n``, C-contiguous): ``q @ columns`` streams
memory in the order OpenBLAS's gemv reads it and measured 2× faster here than
``rows @ q`` on the same floats (6 vs 11 ms at 100k × 384, one thread).

A chunk may have several window vectors; it is scored by its best window.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Deletions are found by comparing row counts per block of this many rowids with the index,
#: then reading only the blocks that differ: ~5 ms at 100k rows instead of ~50 ms for all ids.
BLOCK = 4096
#: Up to this many new rows are read by rowid (~30 µs each); more, by one scan of vec0 (~50 ms).
POINT_READS = 2000
#: Deleted rows are masked until they are this share of the matrix, then it is compacted.
COMPACT_SHARE = 0.25
#: Matrices with at least this many rows are scanned in two halves on two threads: below it
#: the scan takes under a millisecond and a thread hand-off would cost more than it saves.
SPLIT_ROWS = 20_000
#: Capacity grows by this factor, so appending is amortised O(1) and never copies per write.
GROWTH = 1.5


@dataclass(frozen=True)
class VectorHit:
    chunk_id: int
    score: float  # cosine similarity of the chunk's best window
    rank: int  # 1-based


class VectorMatrix:
    """All window vectors of one index: column ``i`` is window ``rowids[i]`` of chunk ``chunk_ids[i]``.

    Arrays have spare capacity; only the first ``n`` entries are live. A deleted row stays
    in place, masked by ``alive``, until compaction.
    """

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.n = 0
        self.dead = 0
        self._buf = np.zeros((dims, 0), dtype=np.float32)
        self._rowids = np.zeros(0, dtype=np.int64)
        self._chunk_ids = np.zeros(0, dtype=np.int64)
        self._sources = np.zeros(0, dtype=np.int32)
        self._alive = np.zeros(0, dtype=bool)
        self._source_codes: dict[str, int] = {}
        self._file_sources: list[str] | None = None

    def __len__(self) -> int:
        return self.n - self.dead

    @property
    def columns(self) -> np.ndarray:
        return self._buf[:, :self.n]

    @property
    def rowids(self) -> np.ndarray:
        return self._rowids[:self.n]

    # --- keeping in step with the index ------------------------------------------------
    def refresh(self, conn: Any) -> None:
        """Bring the matrix in line with the committed index (call inside one read transaction)."""
        last = int(self._rowids[self.n - 1]) if self.n else 0
        self._drop_deleted(conn, last)
        fresh = conn.execute(
            "SELECT cv.rowid, cv.chunk_id, c.source FROM chunk_vectors cv JOIN chunks c ON c.id = cv.chunk_id "
            "WHERE cv.rowid > ? ORDER BY cv.rowid", (last,)
        ).fetchall()
        if fresh:
            self._append(conn, fresh)
        # A source renamed in place (an extraPath's) shows as a change in the set of sources: when
        # its first file moves and when its last one has. New rows carry their source already.
        file_sources = [r[0] for r in conn.execute("SELECT DISTINCT source FROM files ORDER BY source")]
        if self._file_sources is not None and file_sources != self._file_sources and last:
            self._reread_sources(conn)
        self._file_sources = file_sources
        if self.dead > COMPACT_SHARE * max(self.n, 1):
            self._compact()

    def _drop_deleted(self, conn: Any, last: int) -> None:
        if not self.n:
            return
        live = self._alive[:self.n]
        rowids = self._rowids[:self.n]
        mine = np.bincount(rowids[live] // BLOCK)
        theirs = dict(conn.execute(
            "SELECT rowid / ?, count(*) FROM chunk_vectors WHERE rowid <= ? GROUP BY 1", (BLOCK, last)
        ).fetchall())
        for block in range(len(mine)):
            if mine[block] == theirs.get(block, 0):
                continue
            alive = np.fromiter((r for (r,) in conn.execute(
                "SELECT rowid FROM chunk_vectors WHERE rowid >= ? AND rowid < ?", (block * BLOCK, (block + 1) * BLOCK)
            )), dtype=np.int64)
            gone = live & (rowids // BLOCK == block) & ~np.isin(rowids, alive)
            self._alive[:self.n][gone] = False
            self.dead += int(gone.sum())

    def _append(self, conn: Any, fresh: list[tuple[int, int, str]]) -> None:
        if len(fresh) <= POINT_READS:
            blobs = {}
            for rowid, _, _ in fresh:
                row = conn.execute("SELECT embedding FROM chunks_vec WHERE rowid = ?", (rowid,)).fetchone()
                if row is not None:
                    blobs[rowid] = row[0]
        else:
            wanted = {r[0] for r in fresh}
            scan = conn.execute("SELECT rowid, embedding FROM chunks_vec WHERE rowid >= ?", (fresh[0][0],))
            blobs = {rowid: blob for rowid, blob in scan if rowid in wanted}
        rows = [r for r in fresh if r[0] in blobs]
        if not rows:
            return
        m = len(rows)
        self._reserve(self.n + m)
        block = np.frombuffer(b"".join(blobs[r[0]] for r in rows), dtype=np.float32).reshape(m, self.dims)
        end = self.n + m
        self._buf[:, self.n:end] = block.T
        self._rowids[self.n:end] = [r[0] for r in rows]
        self._chunk_ids[self.n:end] = [r[1] for r in rows]
        codes = self._source_codes
        self._sources[self.n:end] = [codes.setdefault(r[2], len(codes)) for r in rows]
        self._alive[self.n:end] = True
        self.n = end

    def _reserve(self, size: int) -> None:
        if size <= self._buf.shape[1]:
            return
        # Untouched capacity costs no memory: np.zeros pages are mapped on first write.
        capacity = max(int(size * GROWTH), 1024)
        buf = np.zeros((self.dims, capacity), dtype=np.float32)
        buf[:, :self.n] = self._buf[:, :self.n]
        self._buf = buf
        for name, dtype in (("_rowids", np.int64), ("_chunk_ids", np.int64), ("_sources", np.int32),
                            ("_alive", bool)):
            grown = np.zeros(capacity, dtype=dtype)
            grown[:self.n] = getattr(self, name)[:self.n]
            setattr(self, name, grown)

    def _reread_sources(self, conn: Any) -> None:
        current = dict(conn.execute(
            "SELECT cv.rowid, c.source FROM chunk_vectors cv JOIN chunks c ON c.id = cv.chunk_id"
        ).fetchall())
        codes = self._source_codes
        for i in range(self.n):
            source = current.get(int(self._rowids[i]))
            if source is not None:
                self._sources[i] = codes.setdefault(source, len(codes))

    def _compact(self) -> None:
        keep = self._alive[:self.n]
        m = int(keep.sum())
        self._buf[:, :m] = self._buf[:, :self.n][:, keep]
        for name in ("_rowids", "_chunk_ids", "_sources"):
            array = getattr(self, name)
            array[:m] = array[:self.n][keep]
        self._alive[:m] = True
        self._alive[m:self.n] = False
        self.n, self.dead = m, 0

    # --- search ----------------------------------------------------------------------
    def _scores(self, query: np.ndarray) -> np.ndarray:
        """``query @ columns``; a big matrix is scanned in two halves on two threads.

        The scan is memory-bound and numpy releases the GIL inside BLAS, so two halves on
        the machine's two cores take ~60% of one whole scan; BLAS itself stays on one
        thread, so nothing spin-waits when the workers need the cores.
        """
        columns = self.columns
        if self.n < SPLIT_ROWS:
            return query @ columns
        scores = np.empty(self.n, dtype=np.float32)
        half = self.n // 2
        other = _scan_pool().submit(np.matmul, query, columns[:, half:], out=scores[half:])
        np.matmul(query, columns[:, :half], out=scores[:half])
        other.result()
        return scores

    def search(self, query: np.ndarray, k: int, source: str | None = None) -> list[VectorHit]:
        """The ``k`` best chunks by their best window, optionally of one source only."""
        if not len(self) or k <= 0:
            return []
        scores = self._scores(query.astype(np.float32, copy=False))
        if self.dead:
            scores[~self._alive[:self.n]] = -np.inf
        if source is not None:
            code = self._source_codes.get(source)
            if code is None:
                return []
            scores[self._sources[:self.n] != code] = -np.inf
        chunk_ids = self._chunk_ids[:self.n]
        width = min(len(scores), k * 4)
        while True:
            top = np.argpartition(-scores, width - 1)[:width] if width < len(scores) else np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            seen: set[int] = set()
            hits: list[VectorHit] = []
            for i in top:
                if not np.isfinite(scores[i]):
                    return hits
                cid = int(chunk_ids[i])
                if cid in seen:
                    continue
                seen.add(cid)
                hits.append(VectorHit(cid, float(scores[i]), len(hits) + 1))
                if len(hits) == k:
                    return hits
            if width >= len(scores):
                return hits
            width = min(len(scores), width * 4)


@functools.cache
def _scan_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="memoryd-scan")


@functools.cache
def single_blas_thread() -> bool:
    """Limit numpy's OpenBLAS to one thread (2 cores are shared with the workers). → whether it worked.

    ``OPENBLAS_NUM_THREADS`` only counts before numpy is imported, which in a CLI is too
    late, so the library's own setter is called through ctypes when it can be found.
    """
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "libscipy_openblas*")
    for path in glob.glob(libs):
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads"):
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(1)
                return True
    return False
