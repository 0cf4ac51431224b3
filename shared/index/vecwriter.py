"""The index writer's side of its vector file (shared/index/vecfile.py describes the file).

``store.IndexWriter`` owns one :class:`VecWriter` per index and calls :meth:`VecWriter.apply`
after each commit with the rows the transaction added and the rowids it deleted. The
file is rewritten — live rows only, projection refitted — when deleted rows pass
``d.VEC_COMPACT_SHARE`` of it, or when it has doubled since the projection was fitted (the
directions of 1,000 notes are not those of 100,000). Both are O(rows) but amortised:
each row is rewritten a bounded number of times.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memoryd.shared import defaults as d
from memoryd.shared.index.vecfile import (
    HEADER_BYTES,
    SEGMENT_ROWS,
    STATE_AT,
    Layout,
    State,
    VecFile,
    dequantize,
    fit,
    new_uid,
    publish,
    quantize,
    reduced_dims,
    write_header,
)

log = logging.getLogger("memoryd.vecfile")



@dataclass
class Rows:
    """Vector rows in rowid order: ``chunk_vectors.rowid``, chunk id, source name, float32 vector."""

    rowids: np.ndarray
    chunks: np.ndarray
    sources: list[str]
    vectors: np.ndarray

    def __len__(self) -> int:
        return len(self.rowids)


class VecWriter:
    """Appends, tombstones and publishes; rewrites the file when it should."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR)
        self.view = VecFile(path)
        self.layout = self.view.layout
        self.uid = self.view.uid
        self.state = self.view.state()
        self.seq = struct.unpack_from("<Q", os.pread(self.fd, 8, STATE_AT))[0]

    def close(self) -> None:
        self.view.close()
        os.close(self.fd)

    # --- a whole file ---------------------------------------------------------------------
    @classmethod
    def build(cls, path: Path, dims: int, blocks: Iterable[Rows], generation: int,
              sources: list[str] | None = None, sample: np.ndarray | None = None,
              uid: str | None = None, mean: np.ndarray | None = None) -> VecWriter:
        """Write a new file from ``blocks`` (in rowid order) under a temp name, then swap it in.

        The projection is fitted on ``sample`` when given (a rewrite passes rows spread over
        the whole file), else on the first ``d.VEC_FIT_SAMPLE`` rows. A rewrite keeps the file's
        ``uid`` (it still belongs to the same index) and its ``mean`` once it has one: codes
        re-quantised around the same mean come out identical, so rewrites never add error."""
        layout = Layout(dims, reduced_dims(dims), SEGMENT_ROWS)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_header(fd, layout, uid or new_uid())
            names = list(sources or [])
            fitted = None if sample is None else _keep_mean(fit(sample, dims, layout.reduced), mean)
            held: list[Rows] = []
            rows = 0
            for block in blocks:
                todo = [block]
                if fitted is None:
                    held.append(block)
                    if sum(len(b) for b in held) < d.VEC_FIT_SAMPLE:
                        continue
                    fitted = _keep_mean(_fit(held, layout), mean)
                    todo, held = held, []
                for rows_ in todo:
                    rows = _write(fd, layout, rows, rows_, fitted, names)
            if fitted is None:
                fitted = _keep_mean(_fit(held, layout), mean)
            for early in held:
                rows = _write(fd, layout, rows, early, fitted, names)
            os.pwrite(fd, fitted[0].tobytes(), HEADER_BYTES)
            os.pwrite(fd, fitted[1].tobytes(), layout.mean_start)
            os.ftruncate(fd, max(os.fstat(fd).st_size, layout.file_bytes(rows)))
            publish(fd, State(rows, generation, 0, rows, names), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return cls(path)

    def live_blocks(self) -> Iterator[Rows]:
        """The file's live rows, dequantised, in blocks (what a rewrite writes)."""
        rows = self.state.rows
        names = self.state.sources
        for start in range(0, rows, d.VEC_BLOCK_ROWS):
            stop = min(rows, start + d.VEC_BLOCK_ROWS)
            keep = np.concatenate(self.view.column("deleted", start, stop)) == 0
            if not keep.any():
                continue
            codes = np.concatenate(self.view.column("codes", start, stop))[keep]
            scales = np.concatenate(self.view.column("scales", start, stop))[keep]
            codes_of = np.concatenate(self.view.column("sources", start, stop))[keep]
            yield Rows(np.concatenate(self.view.column("rowids", start, stop))[keep],
                       np.concatenate(self.view.column("chunks", start, stop))[keep],
                       [names[c] for c in codes_of], dequantize(codes, scales, self.view.mean))

    def _sample(self) -> np.ndarray:
        """Up to ``VEC_FIT_SAMPLE`` live rows spread evenly over the file, dequantised."""
        live = np.flatnonzero(np.concatenate(self.view.segments("deleted", self.state.rows)) == 0)
        spread = np.linspace(0, len(live) - 1, min(len(live), d.VEC_FIT_SAMPLE)).astype(np.int64)
        pick = live[spread] if len(live) else live
        return dequantize(self.view.gather("codes", pick), self.view.gather("scales", pick), self.view.mean)

    def rewrite(self) -> VecWriter:
        """Compact and refit: a new file of the live rows; → its writer (this one is closed)."""
        fresh = VecWriter.build(self.path, self.layout.dims, self.live_blocks(), self.state.generation,
                                self.state.sources, sample=self._sample(), uid=self.uid,
                                mean=self.view.mean.copy() if self.view.mean.any() else None)
        log.info("%s: rewritten, %d live rows of %d", self.path, fresh.state.rows, self.state.rows)
        self.close()
        return fresh

    # --- one commit -----------------------------------------------------------------------
    def apply(self, generation: int, added: Rows | None, deleted: np.ndarray) -> VecWriter:
        """Append ``added``, tombstone ``deleted`` (rowids), publish ``generation``; → the writer
        to use next (a new one if the file was rewritten)."""
        rows, dead = self.state.rows, self.state.dead
        names = list(self.state.sources)
        if added is not None and len(added):
            os.ftruncate(self.fd, max(os.fstat(self.fd).st_size, self.layout.file_bytes(rows + len(added))))
            rows = _write(self.fd, self.layout, rows, added, (self.view.projection, self.view.mean), names)
        if len(deleted):
            self.view.grown()
            at = self.view.position(np.asarray(deleted, dtype=np.int64), rows)
            stamp = np.int64(generation).tobytes()
            for row in at[at >= 0]:
                os.pwrite(self.fd, stamp, self.layout.offset("deleted", int(row)))
            dead += int((at >= 0).sum())
        os.fdatasync(self.fd)  # rows and tombstones are on disk before the header counts them
        self.state = State(rows, generation, dead, self.state.fitted, names)
        self.seq = publish(self.fd, self.state, self.seq)
        self.view.grown()
        grown = rows >= d.VEC_REFIT_GROWTH * self.state.fitted
        if rows >= d.VEC_REWRITE_FLOOR and (dead > d.VEC_COMPACT_SHARE * rows or grown):
            return self.rewrite()
        return self


def _keep_mean(fitted: tuple[np.ndarray, np.ndarray], mean: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    return fitted if mean is None else (fitted[0], mean)


def _fit(held: list[Rows], layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    sample = np.concatenate([b.vectors for b in held])[:d.VEC_FIT_SAMPLE] if held else np.zeros((0, layout.dims))
    return fit(sample, layout.dims, layout.reduced)


def _write(fd: int, layout: Layout, start: int, block: Rows, fitted: tuple[np.ndarray, np.ndarray],
           names: list[str]) -> int:
    """Write ``block`` as rows ``start…`` with the file's (projection, mean); source names get
    codes in ``names``. → rows after it."""
    projection, mean = fitted
    vectors = np.ascontiguousarray(block.vectors, dtype=np.float32)
    codes, scales = quantize(vectors, mean)
    index = {name: i for i, name in enumerate(names)}
    for name in block.sources:
        if name not in index:
            index[name] = len(names)
            names.append(name)
    columns = {
        "reduced": (vectors @ projection).astype(np.float32),
        "codes": codes, "scales": scales,
        "rowids": np.asarray(block.rowids, dtype=np.int64), "chunks": np.asarray(block.chunks, dtype=np.int64),
        "deleted": np.zeros(len(block), dtype=np.int64),
        "sources": np.fromiter((index[s] for s in block.sources), dtype=np.int32, count=len(block)),
    }
    done = 0
    while done < len(block):
        row = start + done
        take = min(len(block) - done, layout.segment_rows - row % layout.segment_rows)
        for name, values in columns.items():
            os.pwrite(fd, np.ascontiguousarray(values[done:done + take]).tobytes(), layout.offset(name, row))
        done += take
    return start + len(block)
