"""The vector side of memory_search: an in-memory float32 matrix per agent, kept in step with the index.

sqlite-vec stays the index of record, but its exact ``vec0`` KNN scans 100k × 384-d in
~65 ms here, while one numpy matrix-vector product over the same floats takes 5–14 ms.
So the query service holds each agent's vectors as one contiguous matrix and refreshes
it when the index's ``meta.generation`` changes: rows above the last seen
``chunk_vectors.rowid`` (AUTOINCREMENT, so new rows always have higher ids) are read and
appended; rows whose ids are gone are dropped. A rebuilt index (a new file) is loaded anew.

A chunk may have several window vectors; it is scored by its best window.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class VectorHit:
    chunk_id: int
    score: float  # cosine similarity of the chunk's best window
    rank: int  # 1-based


class VectorMatrix:
    """All window vectors of one index: ``matrix[i]`` is window ``rowids[i]`` of chunk ``chunk_ids[i]``."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.rowids = np.zeros(0, dtype=np.int64)
        self.chunk_ids = np.zeros(0, dtype=np.int64)
        self.sources = np.zeros(0, dtype=np.int32)
        self.matrix = np.zeros((0, dims), dtype=np.float32)
        self._source_codes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.rowids)

    def refresh(self, conn: Any) -> None:
        """Bring the matrix in line with the committed index (one read transaction)."""
        current = conn.execute(
            "SELECT cv.rowid, cv.chunk_id, c.source FROM chunk_vectors cv JOIN chunks c ON c.id = cv.chunk_id "
            "ORDER BY cv.rowid"
        ).fetchall()
        ids = np.fromiter((r[0] for r in current), dtype=np.int64, count=len(current))
        keep = np.isin(self.rowids, ids, assume_unique=True)
        if not keep.all():
            self.rowids, self.matrix = self.rowids[keep], self.matrix[keep]
        last = int(self.rowids[-1]) if len(self.rowids) else 0
        fresh = [r[0] for r in current if r[0] > last]
        if fresh:
            self._append(conn, fresh)
        # Chunk ids and sources are re-read for every row: a source can change in place.
        codes = self._source_codes
        chunk_ids = np.fromiter((r[1] for r in current), dtype=np.int64, count=len(current))
        sources = np.fromiter((codes.setdefault(r[2], len(codes)) for r in current), dtype=np.int32,
                              count=len(current))
        where = np.searchsorted(ids, self.rowids)
        self.chunk_ids, self.sources = chunk_ids[where], sources[where]

    def _append(self, conn: Any, fresh: list[int]) -> None:
        wanted = set(fresh)
        rowids: list[int] = []
        blobs: list[bytes] = []
        # vec0 answers a rowid range by scanning its chunks in order: no per-row lookups.
        for rowid, blob in conn.execute("SELECT rowid, embedding FROM chunks_vec WHERE rowid >= ?", (fresh[0],)):
            if rowid in wanted:
                rowids.append(rowid)
                blobs.append(blob)
        if not rowids:
            return
        order = np.argsort(np.asarray(rowids, dtype=np.int64), kind="stable")
        block = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(-1, self.dims)[order]
        self.matrix = np.ascontiguousarray(np.vstack([self.matrix, block]))
        self.rowids = np.concatenate([self.rowids, np.asarray(rowids, dtype=np.int64)[order]])

    def search(self, query: np.ndarray, k: int, source: str | None = None) -> list[VectorHit]:
        """The ``k`` best chunks by their best window, optionally of one source only."""
        if not len(self) or k <= 0:
            return []
        scores = self.matrix @ query.astype(np.float32, copy=False)
        if source is not None:
            code = self._source_codes.get(source)
            if code is None:
                return []
            scores = np.where(self.sources == code, scores, -np.inf)
        hits: list[VectorHit] = []
        width = min(len(scores), k * 4)
        while True:
            top = np.argpartition(-scores, width - 1)[:width] if width < len(scores) else np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            seen: set[int] = set()
            hits = []
            for i in top:
                if not np.isfinite(scores[i]):
                    break
                cid = int(self.chunk_ids[i])
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
