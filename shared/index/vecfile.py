"""The vector file: ``<agent>.vec`` beside ``<agent>.sqlite``, what the query side maps instead of loading.

SQLite (``chunks_vec``) stays the index of record with the exact float vectors; this file
is derived from it by the same writer, so a query process ``mmap``s it and answers its
first search without reading a vector row by row (O(1) in the index's size). Per vector
row (a chunk's window) it holds:

- ``reduced``: the vector projected on the index's top ``dims/REDUCTION`` principal directions
  (float32; 48 of MiniLM's 384) — what a search scans, with BLAS, at an eighth of the
  bytes of the float32 vectors;
- ``codes`` + ``scales``: the vector's difference from the index's mean vector as int8 with
  one float32 scale per row (max |x − mean| / 127) — what the scan's best candidates are
  re-scored with (centred, the codes spend their 8 bits on what tells vectors apart: all
  MiniLM vectors share a large common direction);
- ``rowids`` (``chunk_vectors.rowid``, increasing: rows are appended in commit order),
  ``chunks``, ``sources`` (a code into the header's list of source names) and
  ``deleted`` (the generation that deleted the row; 0 while it lives).

Layout: a 4 KiB header, the projection (``dims × reduced`` float32) and the mean, then segments of
``SEGMENT_ROWS`` rows, each with its columns contiguous, so growing the file is appending
a segment (``ftruncate``; unwritten pages stay holes). Rows are only ever appended and
tombstoned in place; compaction and refitting the projection write a new file that
replaces this one (``os.replace``): a reader keeps its mapping of the old inode.

Consistency with SQLite: the writer commits the SQLite transaction (generation G) first,
then writes the rows and tombstones, ``fdatasync``s, and only then publishes the new row
count and G in the header, under a sequence counter (odd while writing) so a reader never
takes a torn header. A reader never looks past the published row count, so it never sees
a half-written row; what the file does not hold yet (the writer between commit and
publish, or one that crashed there) it reads from SQLite — new rows by rowid, deletions
from ``vector_deletions`` (store.py) — and the writer catches up from the same two when it
next opens the index. ``uid`` ties the file to its index (``meta.vectors_uid``).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"MEMDVEC1"
VERSION = 2
HEADER_BYTES = 4096
#: Rows per segment: 64 Ki rows of MiniLM are 50 MiB; the file grows a segment at a time.
SEGMENT_ROWS = 65_536
#: The scan reads this share of the model's dimensions: 48 of 384, with the best 4,000
#: (``VECTOR_RESCORE``) re-scored, reach recall@10 0.996 against exact search on ~30k real MiniLM
#: vectors and 0.992 on 1M of their spectrum; 96 with 2,000 reached 0.996 / 0.995 at twice
#: the scan's bytes (a contiguous 48-d gemv at 1M rows: 17 ms here, 96-d: 32 ms).
#: Files written with another share keep it (the header holds their width).
REDUCTION = 8

_FIXED = struct.Struct("<8sIIII16s")  # magic, version, dims, reduced, segment rows, uid
_STATE = struct.Struct("<QQQQQI")  # seq, rows, generation, dead, fitted, sources length
STATE_AT = 64
_SOURCES_AT = 512
#: (name, dtype, values per row): a segment's columns, in file order.
_COLUMNS = (("reduced", np.float32, "reduced"), ("codes", np.int8, "dims"), ("scales", np.float32, 1),
            ("rowids", np.int64, 1), ("chunks", np.int64, 1), ("deleted", np.int64, 1),
            ("sources", np.int32, 1))


def vec_path(index_path: Path) -> Path:
    """``<agent>.vec`` for ``<agent>.sqlite`` (a rebuild's temp index gets its own)."""
    return index_path.with_suffix(".vec")


def reduced_dims(dims: int) -> int:
    return max(8, dims // REDUCTION)


def _align(n: int) -> int:
    return (n + 4095) // 4096 * 4096


@dataclass(frozen=True)
class Layout:
    dims: int
    reduced: int
    segment_rows: int

    def width(self, per_row: int | str) -> int:
        return per_row if isinstance(per_row, int) else getattr(self, per_row)

    @property
    def mean_start(self) -> int:
        return HEADER_BYTES + self.dims * self.reduced * 4

    @property
    def data_start(self) -> int:
        return _align(self.mean_start + self.dims * 4)

    @property
    def column_offsets(self) -> dict[str, int]:
        offsets, at = {}, 0
        for name, dtype, per_row in _COLUMNS:
            offsets[name] = at
            at += _align(self.segment_rows * self.width(per_row) * np.dtype(dtype).itemsize)
        offsets[""] = at
        return offsets

    @property
    def segment_bytes(self) -> int:
        return self.column_offsets[""]

    def file_bytes(self, rows: int) -> int:
        segments = max(1, -(-rows // self.segment_rows))
        return self.data_start + segments * self.segment_bytes

    def offset(self, column: str, row: int) -> int:
        """Byte offset of ``row``'s value in ``column``."""
        segment, at = divmod(row, self.segment_rows)
        name, dtype, per_row = next(c for c in _COLUMNS if c[0] == column)
        item = self.width(per_row) * np.dtype(dtype).itemsize
        return self.data_start + segment * self.segment_bytes + self.column_offsets[name] + at * item


@dataclass(frozen=True)
class State:
    """What the writer last published: rows ``[0, rows)`` hold every vector of ``generation``."""

    rows: int
    generation: int
    dead: int
    fitted: int  # rows when the projection was fitted
    sources: list[str]


class VecFile:
    """A mapping of one vector file: its header, projection and columns as numpy views."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            self.inode = (st.st_dev, st.st_ino)
            self._mm = mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        magic, version, dims, reduced, segment_rows, uid = _FIXED.unpack_from(self._mm, 0)
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"{path} is not a memoryd vector file of version {VERSION}")
        self.uid = uid.hex()
        self.layout = Layout(dims, reduced, segment_rows)
        self._map_fitted()
        self._segments = self._map_segments([])

    def _map_fitted(self) -> None:
        layout = self.layout
        self.projection = np.frombuffer(self._mm, np.float32, layout.dims * layout.reduced,
                                        HEADER_BYTES).reshape(layout.dims, layout.reduced)
        self.mean = np.frombuffer(self._mm, np.float32, layout.dims, layout.mean_start)

    def _map_segments(self, segments: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """``segments`` with the mapping's segments they lack appended (a new list is then swapped in
        whole: searches on other threads may be reading the old one)."""
        layout = self.layout
        count = (len(self._mm) - layout.data_start) // layout.segment_bytes
        offsets = layout.column_offsets
        for s in range(len(segments), count):
            base = layout.data_start + s * layout.segment_bytes
            columns = {}
            for name, dtype, per_row in _COLUMNS:
                width = layout.width(per_row)
                array = np.frombuffer(self._mm, dtype, layout.segment_rows * width, base + offsets[name])
                columns[name] = array.reshape(layout.segment_rows, width) if width > 1 else array
            segments.append(columns)
        return segments

    def grown(self) -> bool:
        """Remap if the file gained segments since it was mapped (the writer appended); → whether it did."""
        size = os.stat(self.path).st_size
        if size <= len(self._mm):
            return False
        fd = os.open(self.path, os.O_RDONLY)
        try:
            self._mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._map_fitted()
        self._segments = self._map_segments([])
        return True

    def state(self) -> State:
        """The published state; retried while the writer is between its two counter bumps."""
        for _ in range(10_000):
            seq, rows, generation, dead, fitted, length = _STATE.unpack_from(self._mm, STATE_AT)
            sources = bytes(self._mm[_SOURCES_AT:_SOURCES_AT + length])
            if seq % 2 == 0 and _STATE.unpack_from(self._mm, STATE_AT)[0] == seq:
                return State(rows, generation, dead, fitted, json.loads(sources or b"[]"))
            time.sleep(0.0001)
        raise TimeoutError(f"{self.path}: the writer did not finish publishing within a second")

    def column(self, name: str, start: int, stop: int) -> list[np.ndarray]:
        """``name``'s values of rows ``[start, stop)``, one view per segment they span."""
        rows = self.layout.segment_rows
        out = []
        while start < stop:
            segment, at = divmod(start, rows)
            take = min(stop - start, rows - at)
            out.append(self._segments[segment][name][at:at + take])
            start += take
        return out

    def segments(self, name: str, rows: int) -> list[np.ndarray]:
        """Whole-segment views of ``name`` covering rows ``[0, rows)``."""
        return self.column(name, 0, rows)

    def gather(self, name: str, rows: np.ndarray) -> np.ndarray:
        """``name``'s values of the given row numbers, in that order."""
        segment, at = np.divmod(rows, self.layout.segment_rows)
        first = self._segments[0][name]
        out = np.empty((len(rows), *first.shape[1:]), dtype=first.dtype)
        # the rows grouped by segment once (a boolean mask per segment read and wrote twice: 1.5× the time)
        order = np.argsort(segment, kind="stable")
        bounds = np.searchsorted(segment[order], np.arange(len(self._segments) + 1))
        for s, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            if lo < hi:
                pick = order[lo:hi]
                out[pick] = self._segments[s][name].take(at[pick], axis=0)
        return out

    def position(self, rowids: np.ndarray, rows: int) -> np.ndarray:
        """Row numbers of the given ``chunk_vectors`` rowids among the first ``rows`` (-1: not there)."""
        found = np.full(len(rowids), -1, dtype=np.int64)
        start = 0
        for part in self.column("rowids", 0, rows):
            at = np.searchsorted(part, rowids)
            hit = (at < len(part)) & (part[np.minimum(at, len(part) - 1)] == rowids)
            found[hit] = start + at[hit]
            start += len(part)
        return found

    def prefetch(self, name: str, rows: int) -> None:
        """Ask the kernel to read ``name``'s pages of rows ``[0, rows)`` ahead of the first scan."""
        for part in self.column(name, 0, rows):
            start = part.ctypes.data - np.frombuffer(self._mm, np.uint8, 1).ctypes.data
            begin = start // mmap.PAGESIZE * mmap.PAGESIZE
            self._mm.madvise(mmap.MADV_WILLNEED, begin, start + part.nbytes - begin)

    def max_rowid(self, rows: int) -> int:
        return int(self.column("rowids", rows - 1, rows)[0][0]) if rows else 0

    def close(self) -> None:
        self.projection = np.zeros((0, 0), np.float32)
        self.mean = np.zeros(0, np.float32)
        self._segments = []


def write_header(fd: int, layout: Layout, uid: str) -> None:
    os.pwrite(fd, _FIXED.pack(MAGIC, VERSION, layout.dims, layout.reduced, layout.segment_rows,
                              bytes.fromhex(uid)), 0)


def publish(fd: int, state: State, seq: int) -> int:
    """Write ``state`` into the header under the sequence counter; → the new counter (even)."""
    sources = json.dumps(state.sources).encode("utf-8")
    if len(sources) > HEADER_BYTES - _SOURCES_AT:
        raise ValueError(f"too many source names for the vector file header ({len(sources)} bytes)")
    os.pwrite(fd, struct.pack("<Q", seq + 1), STATE_AT)
    os.pwrite(fd, _STATE.pack(seq + 1, state.rows, state.generation, state.dead, state.fitted, len(sources)),
              STATE_AT)
    os.pwrite(fd, sources, _SOURCES_AT)
    os.pwrite(fd, struct.pack("<Q", seq + 2), STATE_AT)
    return seq + 2


def new_uid() -> str:
    return uuid.uuid4().hex


def fit(sample: np.ndarray, dims: int, reduced: int) -> tuple[np.ndarray, np.ndarray]:
    """(projection, mean) of ``sample``: the ``reduced`` directions that best keep its inner
    products (top right singular vectors, uncentred: scores are inner products) and its mean."""
    projection = np.zeros((dims, reduced), dtype=np.float32)
    mean = np.zeros(dims, dtype=np.float32)
    if len(sample):
        sample = sample.astype(np.float32)
        _, _, vt = np.linalg.svd(sample, full_matrices=False)
        take = min(reduced, len(vt))
        projection[:, :take] = vt[:take].T
        mean = sample.mean(axis=0).astype(np.float32)
    return projection, mean


def quantize(vectors: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes and the per-row scale with ``codes * scale + mean`` ≈ ``vectors``."""
    centred = vectors - mean
    scales = np.abs(centred).max(axis=1) / 127.0
    scales = np.where(scales > 0, scales, 1.0).astype(np.float32)
    codes = np.clip(np.rint(centred / scales[:, None]), -127, 127).astype(np.int8)
    return codes, scales


def dequantize(codes: np.ndarray, scales: np.ndarray, mean: np.ndarray) -> np.ndarray:
    return codes.astype(np.float32) * scales[:, None] + mean
