"""The vector side of memory_search: the index's vector file, mapped, scanned, re-scored.

The indexer keeps ``<agent>.vec`` beside the index (shared/index/vecfile.py). The query service
``mmap``s it — O(1) in the index's size: the kernel pages it in as the first scan reads
it — and searches in three steps, each on fewer rows and more exact:

1. scan the reduced vectors (``dims/8`` float32 per row) with one BLAS ``gemv`` per segment
   on the search's own thread: an eighth of the bytes of the float32 vectors;
2. re-score the best ``d.VECTOR_RESCORE`` rows with their int8 codes (of the difference from the
   index's mean vector) and per-row scales: the cosine within ~0.002 of the float32 one, the
   top ten that of exact search (recall@10 on real MiniLM vectors: bench/query.py).

The exact float vectors stay in SQLite (``chunks_vec``), the index of record, but are not
read per search: a vec0 point read costs 0.1–3.5 ms here (it walks the 1.5 MB blob of its
1,024-vector chunk), so re-scoring even 24 candidates with them would cost more than the
whole search.

Keeping in step (``following``, once per new generation, in the read transaction of the
search that first sees it): a copy is brought forward, so the searches still reading the
previous generation keep theirs unchanged (an object searches read is never written again):
the file's published rows up to the snapshot's last rowid are visible; deletions since
the last refresh come from ``vector_deletions`` (so a write that deleted 2 rows costs 2
rows); rows the file does not hold yet (the writer between commit and publish) are read
from SQLite into a small exact "delta". A new file (compaction, rebuild) is mapped anew.

A chunk may have several window vectors; it is scored by its best window.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.shared import defaults as d
from memoryd.shared.index.indexvectors import META_DELETIONS_FLOOR, META_VECTORS_UID, index_rows, read_meta
from memoryd.shared.index.vecfile import VecFile, vec_path
from memoryd.shared.index.vecwriter import Rows


@dataclass(frozen=True)
class VectorHit:
    chunk_id: int
    score: float  # cosine similarity of the chunk's best window
    rank: int  # 1-based


class VectorIndex:
    """One index's vectors as a query process sees them: the mapped file plus what it lacks."""

    def __init__(self, index_path: Path) -> None:
        self.index_path = index_path
        self.path = vec_path(index_path)
        self.file: VecFile | None = None
        self._next: VecFile | None = None  # a new file mapped before the snapshot began (remap)
        self.reason: str | None = None  # why there are no vectors, when there are none
        self.rows = 0  # file rows visible in the current snapshot
        self.seen = 0  # generation whose deletions the mask holds
        self.alive = np.zeros(0, dtype=bool)
        self.sources: list[str] = []
        self.delta = Rows(np.zeros(0, np.int64), np.zeros(0, np.int64), [], np.zeros((0, 0), np.float32))

    @property
    def dims(self) -> int:
        return self.file.layout.dims if self.file is not None else 0

    def __len__(self) -> int:
        return int(self.alive[:self.rows].sum()) + len(self.delta)

    def following(self, conn: Any, generation: int) -> VectorIndex:
        """A copy of these vectors brought to ``generation`` (call inside the read transaction);
        this one stays as it is for the searches still reading it."""
        ahead = copy.copy(self)
        ahead.refresh(conn, generation)
        return ahead

    # --- keeping in step --------------------------------------------------------------------
    def remap(self) -> None:
        """Map a file that replaced the mapped one (a compaction) — call *before* the search's
        snapshot begins: the writer publishes a file after committing its generation, so a file
        mapped before the snapshot never holds less than the snapshot (a compaction drops the
        rows deleted up to its generation)."""
        if self.file is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) != self.file.inode and (self._next is None or self._next.inode !=
                                                           (st.st_dev, st.st_ino)):
            try:
                self._next = VecFile(self.path)
            except (FileNotFoundError, ValueError):
                self._next = None

    def refresh(self, conn: Any, generation: int) -> None:
        """Follow the index to ``generation`` (call inside the search's read transaction)."""
        uid = read_meta(conn, META_VECTORS_UID)
        if self._next is not None:
            return self._load(conn, generation, uid, self._next)
        try:
            inode = os.stat(self.path)
        except FileNotFoundError:
            return self._unavailable(f"no vector file at {self.path}; the indexer writes it when it next "
                                     "opens the index (`memoryd up` or `memoryd index`)")
        if self.file is None or self.file.inode != (inode.st_dev, inode.st_ino) or self.file.uid != uid:
            return self._load(conn, generation, uid)
        if generation != self.seen:
            floor = int(read_meta(conn, META_DELETIONS_FLOOR) or 0)
            if floor > self.seen:
                return self._load(conn, generation, uid)
            self._advance(conn, generation)

    def _unavailable(self, reason: str) -> None:
        self.file = None  # not closed: a search of an older generation may still read it
        self.reason, self.rows, self.alive = reason, 0, np.zeros(0, dtype=bool)
        self.delta = Rows(np.zeros(0, np.int64), np.zeros(0, np.int64), [], np.zeros((0, 0), np.float32))

    def _load(self, conn: Any, generation: int, uid: str | None, file: VecFile | None = None) -> None:
        self._next = None
        self.file = None  # not closed (see _unavailable); unmapped once no search holds its arrays
        try:
            file = file or VecFile(self.path)
        except (FileNotFoundError, ValueError) as exc:
            return self._unavailable(f"vector file {self.path} unreadable ({exc}); the indexer rewrites it")
        if file.uid != uid:
            file.close()
            return self._unavailable(f"vector file {self.path} belongs to another index; the indexer rebuilds it "
                                     "when it next opens this one")
        if file.state().generation > generation and file.state().fitted:
            # Mapped after the snapshot began and rewritten since: it may lack rows deleted after
            # the snapshot. Only a first load can meet this (later ones map before: remap).
            file.close()
            return self._unavailable("the vector file was rewritten while this search began; the next search "
                                     "uses it")
        self.file, self.reason, self.rows, self.alive = file, None, 0, np.zeros(0, dtype=bool)
        self.seen = generation
        self._extend(conn, generation)  # tombstones up to the snapshot, and logged deletions of its rows
        file.prefetch("reduced", self.rows)

    def _advance(self, conn: Any, generation: int) -> None:
        previous = self.seen
        self.seen = generation
        self._extend(conn, generation)
        self._delete(conn, previous, generation)

    def _extend(self, conn: Any, generation: int) -> None:
        """Make the file's rows up to the snapshot's last rowid visible, and the rest the delta."""
        assert self.file is not None
        self.file.grown()
        state = self.file.state()
        self.sources = state.sources
        (last,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM chunk_vectors").fetchone()
        rows = sum(int(np.searchsorted(part, last, side="right")) for part in self.file.column("rowids", 0, state.rows))
        if rows > self.rows:
            deleted = np.concatenate(self.file.column("deleted", self.rows, rows))
            fresh = (deleted == 0) | (deleted > generation)
            first, end = self.file.max_rowid(self.rows), self.file.max_rowid(rows)
            gone = [v for (v,) in conn.execute("SELECT vector FROM vector_deletions WHERE vector > ? AND vector <= ? "
                                               "AND generation <= ?", (first, end, generation))]
            self.alive = np.concatenate([self.alive[:self.rows], fresh])
            self.rows = rows
            self._mark_dead(np.asarray(gone, dtype=np.int64))
        through = self.file.max_rowid(self.rows)
        blocks = list(index_rows(conn, through, self.file.layout.dims)) if last > through else []
        self.delta = Rows(np.concatenate([b.rowids for b in blocks]) if blocks else np.zeros(0, np.int64),
                          np.concatenate([b.chunks for b in blocks]) if blocks else np.zeros(0, np.int64),
                          [s for b in blocks for s in b.sources],
                          np.concatenate([b.vectors for b in blocks]) if blocks else
                          np.zeros((0, self.file.layout.dims), np.float32))

    def _delete(self, conn: Any, after: int, through: int) -> None:
        gone = [v for (v,) in conn.execute("SELECT vector FROM vector_deletions WHERE generation > ? "
                                           "AND generation <= ?", (after, through))]
        self._mark_dead(np.asarray(gone, dtype=np.int64))

    def _mark_dead(self, rowids: np.ndarray) -> None:
        if len(rowids) and self.file is not None:
            at = self.file.position(rowids, self.rows)
            self.alive = self.alive.copy()  # the previous generation's searches may be reading it
            self.alive[at[at >= 0]] = False

    # --- search -----------------------------------------------------------------------------
    def search(self, query: np.ndarray, k: int, source: str | None = None) -> list[VectorHit]:
        """The ``k`` best chunks by their best window, optionally of one source only."""
        if self.file is None or k <= 0:
            return []
        query = np.ascontiguousarray(query, dtype=np.float32)
        rows = self._candidates(query, source)
        approx = self._rescored(rows, query) if len(rows) else np.empty(0, np.float32)
        chunks = np.concatenate([self.file.gather("chunks", rows), self.delta.chunks])
        scores = np.concatenate([approx, self._delta_scores(query, source)])
        hits: list[VectorHit] = []
        seen: set[int] = set()
        for i in np.argsort(-scores, kind="stable"):
            cid = int(chunks[i])
            if not np.isfinite(scores[i]) or len(hits) == k:
                break
            if cid not in seen:  # windows in score order: a chunk's first is its best
                seen.add(cid)
                hits.append(VectorHit(cid, float(scores[i]), len(hits) + 1))
        return hits

    def scores(self, query: np.ndarray, rowids: np.ndarray) -> np.ndarray:
        """The cosines of the vector rows ``rowids`` (``chunk_vectors.rowid``) as a search scores them
        (int8 re-score; the delta exactly); NaN for a row this snapshot does not hold."""
        query = np.ascontiguousarray(query, dtype=np.float32)
        out = np.full(len(rowids), np.nan, dtype=np.float32)
        if self.file is not None and self.rows and len(rowids):
            at = self.file.position(rowids, self.rows)
            held = at >= 0
            held[held] = self.alive[at[held]]
            if held.any():
                out[held] = self._rescored(at[held], query)
        if len(self.delta):
            exact = self._delta_scores(query, None)
            where = {int(r): i for i, r in enumerate(self.delta.rowids)}
            for j, rowid in enumerate(rowids):
                if (i := where.get(int(rowid))) is not None:
                    out[j] = exact[i]
        return out

    def _rescored(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """The cosines of file rows ``rows`` from their int8 codes (of the difference from the mean) and scales."""
        assert self.file is not None
        codes = self.file.gather("codes", rows).astype(np.float32)
        return (codes @ query) * self.file.gather("scales", rows) + float(self.file.mean @ query)

    def _candidates(self, query: np.ndarray, source: str | None) -> np.ndarray:
        """File rows worth re-scoring: live, of ``source``, the ``d.VECTOR_RESCORE`` best by the reduced scan."""
        assert self.file is not None
        keep = self.alive[:self.rows].copy()
        if source is not None:
            code = self.sources.index(source) if source in self.sources else -1
            keep &= np.concatenate(self.file.column("sources", 0, self.rows) or [np.zeros(0, np.int32)]) == code
        if int(keep.sum()) <= d.VECTOR_RESCORE:
            return np.flatnonzero(keep)
        scores = self._scan(query @ self.file.projection)
        scores[~keep] = -np.inf
        return _top(scores, d.VECTOR_RESCORE)

    def _scan(self, reduced_query: np.ndarray) -> np.ndarray:
        """``reduced @ query`` over the visible rows, segment by segment, on this thread (numpy
        releases the GIL inside BLAS, which stays on one thread)."""
        assert self.file is not None
        parts = self.file.column("reduced", 0, self.rows)
        scores = np.empty(self.rows, dtype=np.float32)
        at = 0
        for part in parts:
            np.matmul(part, reduced_query, out=scores[at:at + len(part)])
            at += len(part)
        return scores

    def _delta_scores(self, query: np.ndarray, source: str | None) -> np.ndarray:
        scores = self.delta.vectors @ query if len(self.delta) else np.zeros(0, np.float32)
        if source is not None and len(scores):
            scores[np.asarray(self.delta.sources) != source] = -np.inf
        return scores.astype(np.float32)


def _top(scores: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` highest finite scores (fewer if fewer are finite), unordered.

    A threshold from a strided sample, then one comparison pass, then ``argpartition`` of what
    passed: ~1 ms at 1M rows, where ``argpartition`` of the whole array takes ~15 ms."""
    step = max(1, len(scores) // (8 * m))
    sample = scores[::step]
    rank = min(len(sample), int(1.5 * m / step) + 8)
    threshold = np.partition(sample, len(sample) - rank)[len(sample) - rank]
    found = np.flatnonzero(scores >= threshold)
    if len(found) < m:  # the sample was unlucky: the exact way
        found = np.argpartition(-scores, m)[:m]
    elif len(found) > m:  # each row kept costs its int8 re-score: keep exactly m
        found = found[np.argpartition(-scores[found], m)[:m]]
    return found[np.isfinite(scores[found])]


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
