"""The in-memory vector matrix stays equal to the index (sqlite-vec) through adds, deletes and compaction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memoryd.services.query import vectors as query_vectors
from memoryd.services.query.vectors import VectorMatrix
from memoryd.shared import sqlitedb
from memoryd.shared.events import ChunkData
from memoryd.shared.store import IndexWriter

DIMS = 8


def chunk(n: int) -> ChunkData:
    return ChunkData(hash=f"h{n}", start_line=n, end_line=n, tokens=1, text=f"chunk {n}")


def unit(rng: np.random.Generator, windows: int = 1) -> np.ndarray:
    m = rng.standard_normal((windows, DIMS)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def write(writer: IndexWriter, path: str, source: str, numbers: list[int], rng: np.random.Generator) -> None:
    chunks = [chunk(n) for n in numbers]
    with writer.transaction():
        writer.upsert_file(path=path, source=source, sha256="x", size=1, mtime=0, seq=1, status="indexed")
        writer.replace_chunks(path, source, chunks, {c.hash: unit(rng, windows=1 + c.start_line % 3) for c in chunks})


def brute_force(index: Path, query: np.ndarray, k: int, source: str | None = None) -> list[int]:
    """The k best chunk ids by best window, straight from sqlite-vec's table."""
    conn = sqlitedb.connect(index, readonly=True)
    rows = conn.execute(
        "SELECT cv.chunk_id, c.source, v.embedding FROM chunk_vectors cv JOIN chunks c ON c.id = cv.chunk_id "
        "JOIN chunks_vec v ON v.rowid = cv.rowid"
    ).fetchall()
    conn.close()
    best: dict[int, float] = {}
    for cid, src, blob in rows:
        if source is None or src == source:
            score = float(np.frombuffer(blob, dtype=np.float32) @ query)
            best[cid] = max(best.get(cid, -2.0), score)
    return [cid for cid, _ in sorted(best.items(), key=lambda x: -x[1])[:k]]


def loaded(index: Path, matrix: VectorMatrix) -> VectorMatrix:
    conn = sqlitedb.connect(index, readonly=True)
    conn.execute("BEGIN")
    matrix.refresh(conn)
    conn.execute("ROLLBACK")
    conn.close()
    return matrix


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return tmp_path / "main.sqlite"


def test_matrix_follows_adds_deletes_and_sources(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query_vectors, "BLOCK", 4)  # several blocks even in a small index
    rng = np.random.default_rng(1)
    writer = IndexWriter(index)
    write(writer, "memory/a.md", "memory", list(range(1, 21)), rng)
    write(writer, "kb/b.md", "kb", list(range(21, 31)), rng)
    matrix = loaded(index, VectorMatrix(DIMS))
    queries = [unit(rng)[0] for _ in range(5)]

    def same() -> None:
        for q in queries:
            for source in (None, "memory", "kb"):
                assert [h.chunk_id for h in matrix.search(q, 5, source)] == brute_force(index, q, 5, source)

    same()
    write(writer, "memory/a.md", "memory", list(range(1, 15)) + [40, 41], rng)  # 6 chunks gone, 2 new
    loaded(index, matrix)
    same()
    assert matrix.dead > 0  # deleted rows are masked, not copied away on every write
    write(writer, "kb/b.md", "kb", [], rng)  # the whole kb file emptied: compaction kicks in
    loaded(index, matrix)
    same()
    assert matrix.dead == 0 and matrix.n == len(matrix)  # compacted once a quarter was dead
    assert matrix.search(queries[0], 5, "kb") == []
    (rows,) = sqlitedb.connect(index, readonly=True).execute("SELECT count(*) FROM chunk_vectors").fetchone()
    assert len(matrix) == rows
    writer.close()


def test_a_renamed_source_is_picked_up(index: Path) -> None:
    rng = np.random.default_rng(2)
    writer = IndexWriter(index)
    write(writer, "kb/b.md", "kb", [1, 2, 3], rng)
    matrix = loaded(index, VectorMatrix(DIMS))
    q = unit(rng)[0]
    write(writer, "kb/b.md", "docs", [1, 2, 3], rng)  # same chunks, new source name
    loaded(index, matrix)
    assert matrix.search(q, 5, "kb") == []
    assert sorted(h.chunk_id for h in matrix.search(q, 5, "docs")) == sorted(brute_force(index, q, 5))
    writer.close()


def test_a_chunk_scores_by_its_best_window(index: Path) -> None:
    writer = IndexWriter(index)
    target = np.eye(DIMS, dtype=np.float32)
    c = chunk(1)
    with writer.transaction():
        writer.replace_chunks("memory/a.md", "memory", [c], {c.hash: target[[3, 5, 6]]})
    matrix = loaded(index, VectorMatrix(DIMS))
    (hit,) = matrix.search(target[5], 3)
    assert hit.score == pytest.approx(1.0) and hit.rank == 1
    writer.close()
