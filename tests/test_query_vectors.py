"""The vector file and its readers stay equal to the index (sqlite-vec) through adds, deletes,
compaction, a crash between commit and publish, and a writer working while a reader reads."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from memoryd.services.query.vectors import VectorIndex
from memoryd.shared import defaults as d
from memoryd.shared.events import ChunkData
from memoryd.shared.index import sqlitedb, vecwriter
from memoryd.shared.index.store import IndexWriter
from memoryd.shared.index.vecfile import VecFile, dequantize, vec_path

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


def exact_scores(index: Path, query: np.ndarray, source: str | None = None) -> dict[int, float]:
    """Every live chunk's best-window cosine, straight from sqlite-vec's table."""
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
    return best


def brute_force(index: Path, query: np.ndarray, k: int, source: str | None = None) -> list[int]:
    """The k best chunk ids by best window, exactly."""
    return [cid for cid, _ in sorted(exact_scores(index, query, source).items(), key=lambda x: -x[1])[:k]]


#: int8 codes put a cosine within this of the exact one (per-row scale: max |x| / 127).
QUANTISATION = 0.01


def same_as_exact(index: Path, hits: list, query: np.ndarray, k: int, source: str | None = None) -> None:
    """The search returned live chunks of ``source``, the k best up to quantisation: each rank's
    exact score is the exact k-best's at that rank, and each reported score is its chunk's."""
    exact = exact_scores(index, query, source)
    best = sorted(exact.values(), reverse=True)[:k]
    assert len(hits) == len(best)
    for hit, expected in zip(hits, best, strict=True):
        assert hit.chunk_id in exact
        assert abs(exact[hit.chunk_id] - expected) <= QUANTISATION
        assert abs(hit.score - exact[hit.chunk_id]) <= QUANTISATION


def visible(vectors: VectorIndex) -> set[int]:
    """The chunk_vectors rowids the reader would search."""
    assert vectors.file is not None
    rowids = np.concatenate(vectors.file.column("rowids", 0, vectors.rows) or [np.zeros(0, np.int64)])
    return set(rowids[vectors.alive[:vectors.rows]].tolist()) | set(vectors.delta.rowids.tolist())


def refreshed(index: Path, vectors: VectorIndex, check: bool = True) -> VectorIndex:
    """Refresh inside one read transaction; with ``check``, the rows it sees are the snapshot's."""
    vectors.remap()  # as the engine does, before the snapshot begins
    conn = sqlitedb.connect(index, readonly=True)
    conn.execute("BEGIN")
    (generation,) = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    vectors.refresh(conn, int(generation))
    if check and vectors.file is None and "rewritten while" in (vectors.reason or ""):
        check = False  # a first load raced a compaction: this search answers without vectors
    if check:
        assert visible(vectors) == {r for (r,) in conn.execute("SELECT rowid FROM chunk_vectors")}
    conn.execute("ROLLBACK")
    conn.close()
    return vectors


def file_matches_index(index: Path) -> None:
    """The published file holds every live vector row of the index, tombstones the rest, and its
    int8 codes are the exact vectors within quantisation error."""
    vec = VecFile(vec_path(index))
    state = vec.state()
    conn = sqlitedb.connect(index, readonly=True)
    exact = dict(conn.execute("SELECT rowid, embedding FROM chunks_vec").fetchall())
    links = dict(conn.execute("SELECT rowid, chunk_id FROM chunk_vectors").fetchall())
    assert int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]) == state.generation
    conn.close()
    rowids = np.concatenate(vec.column("rowids", 0, state.rows))
    live = np.concatenate(vec.column("deleted", 0, state.rows)) == 0
    assert (np.diff(rowids) > 0).all()  # appended in rowid order
    assert set(rowids[live].tolist()) == set(links)
    assert int((~live).sum()) == state.dead
    rows = np.flatnonzero(live)
    chunks = vec.gather("chunks", rows)
    codes = dequantize(vec.gather("codes", rows), vec.gather("scales", rows), vec.mean)
    for rowid, cid, approx in zip(rowids[rows].tolist(), chunks.tolist(), codes, strict=True):
        assert links[rowid] == cid
        assert np.abs(np.frombuffer(exact[rowid], dtype=np.float32) - approx).max() < 0.01
    vec.close()


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return tmp_path / "main.sqlite"


@pytest.mark.parametrize("rescore", [12, 2000])  # the reduced scan + re-scoring, and re-scoring alone
def test_search_follows_adds_deletes_and_sources(index: Path, monkeypatch: pytest.MonkeyPatch, rescore: int) -> None:
    monkeypatch.setattr(d, "VECTOR_RESCORE", rescore)
    monkeypatch.setattr(d, "VEC_REWRITE_FLOOR", min(rescore, d.VEC_REWRITE_FLOOR))  # fitted before scanned
    rng = np.random.default_rng(1)
    writer = IndexWriter(index)
    write(writer, "memory/a.md", "memory", list(range(1, 21)), rng)
    write(writer, "kb/b.md", "kb", list(range(21, 31)), rng)
    vectors = refreshed(index, VectorIndex(index))
    queries = [unit(rng)[0] for _ in range(5)]

    def same() -> None:
        for q in queries:
            for source in (None, "memory", "kb"):
                same_as_exact(index, vectors.search(q, 3, source), q, 3, source)

    same()
    write(writer, "memory/a.md", "memory", list(range(1, 15)) + [40, 41], rng)  # 6 chunks gone, 2 new
    refreshed(index, vectors)
    same()
    file_matches_index(index)
    write(writer, "kb/b.md", "kb", [], rng)
    refreshed(index, vectors)
    same()
    assert vectors.search(queries[0], 5, "kb") == []
    writer.close()


def test_compaction_writes_a_new_file_that_readers_map_anew(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d, "VEC_REWRITE_FLOOR", 8)
    rng = np.random.default_rng(3)
    writer = IndexWriter(index)
    write(writer, "memory/a.md", "memory", list(range(1, 41)), rng)
    vectors = refreshed(index, VectorIndex(index))
    first = vectors.file.inode if vectors.file else None
    write(writer, "memory/a.md", "memory", list(range(1, 11)), rng)  # three quarters deleted
    state = VecFile(vec_path(index)).state()
    assert state.dead == 0 and state.rows == sum(1 + n % 3 for n in range(1, 11))  # compacted
    file_matches_index(index)
    refreshed(index, vectors)
    assert vectors.file is not None and vectors.file.inode != first
    q = unit(rng)[0]
    same_as_exact(index, vectors.search(q, 4), q, 4)
    writer.close()


def test_refresh_reads_only_what_changed(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    writer = IndexWriter(index)
    write(writer, "memory/big.md", "memory", list(range(1, 301)), rng)
    write(writer, "memory/small.md", "memory", [1000, 1001], rng)
    vectors = refreshed(index, VectorIndex(index))
    alive_before = vectors.alive.copy()
    read: list[tuple[str, int, int]] = []
    original = VecFile.column

    def spy(self: VecFile, name: str, start: int, stop: int) -> list[np.ndarray]:
        read.append((name, start, stop))
        return original(self, name, start, stop)

    monkeypatch.setattr(VecFile, "column", spy)
    write(writer, "memory/small.md", "memory", [1000, 1002], rng)  # one chunk gone, one new
    statements: list[str] = []
    conn = sqlitedb.connect(index, readonly=True)
    conn.set_trace_callback(statements.append)
    conn.execute("BEGIN")
    vectors.refresh(conn, int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]))
    conn.execute("ROLLBACK")
    conn.close()
    monkeypatch.undo()
    new_rows = 1 + 1002 % 3
    # rows read from the file: the rowid column to find the snapshot's end, then only the new rows
    assert [(n, stop - start) for n, start, stop in read if n != "rowids"] == [("deleted", new_rows)]
    assert not any("GROUP BY" in s or "count(" in s for s in statements)
    assert len(vectors.alive) == len(alive_before) + new_rows
    assert int((alive_before & ~vectors.alive[:len(alive_before)]).sum()) == 1 + 1001 % 3  # the deleted windows
    refreshed(index, vectors)  # and what it sees is the snapshot's
    writer.close()


def test_a_crash_between_commit_and_publish_is_read_from_sqlite_then_caught_up(
        index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    writer = IndexWriter(index)
    write(writer, "memory/a.md", "memory", list(range(1, 11)), rng)
    vectors = refreshed(index, VectorIndex(index))

    def crash(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vecwriter.VecWriter, "apply", crash)
    write(writer, "memory/a.md", "memory", list(range(3, 14)), rng)  # committed, never published
    write(writer, "memory/b.md", "memory", [50], rng)
    monkeypatch.undo()
    assert VecFile(vec_path(index)).state().generation < 3
    refreshed(index, vectors)  # the reader reads the difference from SQLite
    assert len(vectors.delta) > 0
    q = unit(rng)[0]
    same_as_exact(index, vectors.search(q, 5), q, 5)
    writer.close()
    writer = IndexWriter(index)  # the next writer catches the file up
    file_matches_index(index)
    write(writer, "memory/b.md", "memory", [50, 51], rng)
    refreshed(index, vectors)  # the next generation reads them from the file
    assert len(vectors.delta) == 0
    writer.close()
    same_as_exact(index, vectors.search(q, 5), q, 5)


def test_a_reader_during_writes_sees_exactly_each_snapshot(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d, "VEC_REWRITE_FLOOR", 64)  # compactions happen while the reader reads
    rng = np.random.default_rng(6)
    writer = IndexWriter(index)
    write(writer, "memory/a.md", "memory", list(range(1, 30)), rng)
    done = threading.Event()
    failures: list[BaseException] = []

    def writing() -> None:
        own = np.random.default_rng(7)
        try:
            for i in range(60):
                start = int(own.integers(1, 40))
                write(writer, f"memory/{i % 3}.md", "memory", list(range(start, start + int(own.integers(0, 25)))), own)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writing)
    thread.start()
    vectors = VectorIndex(index)
    checks = 0
    while not done.is_set() or checks < 5:
        refreshed(index, vectors)  # asserts the visible rows are the snapshot's
        checks += 1
    thread.join()
    assert not failures, failures
    file_matches_index(index)
    writer.close()


def test_a_renamed_source_is_picked_up(index: Path) -> None:
    rng = np.random.default_rng(2)
    writer = IndexWriter(index)
    write(writer, "kb/b.md", "kb", [1, 2, 3], rng)
    vectors = refreshed(index, VectorIndex(index))
    q = unit(rng)[0]
    write(writer, "kb/b.md", "docs", [1, 2, 3], rng)  # same chunks, new source name
    refreshed(index, vectors)
    assert vectors.search(q, 5, "kb") == []
    assert sorted(h.chunk_id for h in vectors.search(q, 5, "docs")) == sorted(brute_force(index, q, 5))
    writer.close()


def test_a_chunk_scores_by_its_best_window(index: Path) -> None:
    writer = IndexWriter(index)
    target = np.eye(DIMS, dtype=np.float32)
    c = chunk(1)
    with writer.transaction():
        writer.replace_chunks("memory/a.md", "memory", [c], {c.hash: target[[3, 5, 6]]})
    vectors = refreshed(index, VectorIndex(index))
    (hit,) = vectors.search(target[5], 3)
    assert hit.score == pytest.approx(1.0) and hit.rank == 1
    writer.close()


def test_gather_reads_rows_in_the_order_asked_across_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vecwriter, "SEGMENT_ROWS", 16)
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((100, 32)).astype(np.float32)
    ids = np.arange(1, 101)
    rows_in = vecwriter.Rows(ids, ids * 10, ["memory"] * 100, vectors)
    writer = vecwriter.VecWriter.build(tmp_path / "v.vec", 32, [rows_in], 1)
    writer.close()
    vec = VecFile(tmp_path / "v.vec")
    assert vec.layout.segment_rows == 16 and len(vec.column("chunks", 0, 100)) == 7
    rows = rng.permutation(100)[:60]  # every segment, in no order, the last one part-filled
    for name in ("chunks", "codes", "scales"):
        whole = np.concatenate(vec.column(name, 0, 100))
        assert np.array_equal(vec.gather(name, rows), whole[rows]), name
    assert np.array_equal(vec.gather("chunks", rows), (rows + 1) * 10)
    assert vec.gather("codes", np.zeros(0, np.int64)).shape == (0, 32)
    vec.close()
