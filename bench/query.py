"""memory_search latency at 10k and 100k chunks in one agent, beside a numpy brute-force scan, as JSON.

    python bench/query.py [--sizes 10000 100000] [--queries 200]

Builds one synthetic index per size with the real schema (``IndexWriter``'s migrations):
chunk texts of ~60 Zipf-distributed words (so FTS5 posting lists look like a real
corpus's), one 384-d float32 unit vector per chunk, ``meta.embedder`` = the local model's.
Then, in the same process:

- ``search``: ``QueryService.search`` end to end with a *new* question each time, so the
  local MiniLM query embedding is included; ``search_cached``: the same questions again
  (embedding from the LRU cache);
- ``embed``: the query embedding alone; ``vector_stage``: the service's in-memory matrix
  search alone; ``numpy_scan``: ``matrix @ q`` + ``argpartition`` over the same vectors;
  ``numpy_scan_columns``: the same on the transposed layout the service uses;
  ``sqlite_vec_knn``: vec0's exact KNN (a few queries, it is the slow path we avoid);
- ``load_seconds``: first search (matrix loaded from the index), ``refresh_seconds``: a
  search after 100 chunks were added (incremental refresh).

Each process keeps to one BLAS / ONNX thread. Takes ~2 minutes for both sizes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from memoryd.services.query.engine import QueryService  # noqa: E402
from memoryd.services.query.models import SearchRequest  # noqa: E402
from memoryd.services.query.vectors import single_blas_thread  # noqa: E402
from memoryd.shared import providers  # noqa: E402
from memoryd.shared.config import LocalSettings, load_settings  # noqa: E402
from memoryd.shared.fts import segment  # noqa: E402
from memoryd.shared.store import META_EMBEDDER, IndexWriter  # noqa: E402

DIMS = 384
VOCABULARY = 20_000
WORDS_PER_CHUNK = 60
CHUNKS_PER_FILE = 20
SEED = 7


def words(rng: np.random.Generator, n: int) -> list[str]:
    ranks = np.minimum(rng.zipf(1.1, n), VOCABULARY)
    return [f"w{r}" for r in ranks]


def build_index(path: Path, chunks: int, rng: np.random.Generator) -> None:
    writer = IndexWriter(path)
    writer.ensure_vec_table(DIMS)
    writer.set_meta(META_EMBEDDER, providers.local_embedder(LocalSettings()))
    with writer.transaction():
        add_chunks(writer, 0, chunks, rng)
    writer.close()


def add_chunks(writer: IndexWriter, first: int, count: int, rng: np.random.Generator) -> None:
    conn = writer.conn
    vectors = rng.standard_normal((count, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows, fts, links, vecs = [], [], [], []
    (base,) = conn.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()
    (vbase,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM chunk_vectors").fetchone()
    for i in range(count):
        n = first + i
        text = " ".join(words(rng, WORDS_PER_CHUNK))
        path = f"memory/note-{n // CHUNKS_PER_FILE:05d}.md"
        cid, vid = base + i + 1, vbase + i + 1
        line = 1 + (n % CHUNKS_PER_FILE) * 10
        rows.append((cid, path, "memory", line, line + 9, f"h{n}", WORDS_PER_CHUNK, text, 1, 0.0))
        fts.append((cid, segment(text)))
        links.append((vid, cid, 0))
        vecs.append((vid, vectors[i].tobytes()))
    paths = sorted({r[1] for r in rows})
    conn.executemany("INSERT OR IGNORE INTO files(path, source, hash, size, mtime, seq, status, chunks, indexed_at) "
                     "VALUES (?, 'memory', '', 0, 0, 0, 'indexed', 0, 0)", [(p,) for p in paths])
    conn.executemany("INSERT INTO chunks(id, path, source, start_line, end_line, hash, tokens, text, has_vector, "
                     "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    conn.executemany("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", fts)
    conn.executemany("INSERT INTO chunk_vectors(rowid, chunk_id, window) VALUES (?,?,?)", links)
    conn.executemany("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", vecs)


def questions(rng: random.Random, n: int) -> list[str]:
    """Content-word questions: 4 words of mid rarity (ranks 30–5000), as an agent would ask."""
    return [" ".join(f"w{rng.randint(30, 5000)}" for _ in range(4)) + f" q{i}" for i in range(n)]


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "n": len(samples)}


def timed(fn, items) -> list[float]:  # noqa: ANN001 - a bench helper
    out = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        out.append(time.perf_counter() - start)
    return out


def bench_size(size: int, n_queries: int, tmp: Path) -> dict:
    rng = np.random.default_rng(SEED)
    state = tmp / f"state-{size}"
    config = tmp / f"memoryd-{size}.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": "local"}},
                   "list": [{"id": "main", "workspace": str(tmp / "ws")}]},
        "memoryd": {"stateDir": str(state)}}), encoding="utf-8")
    settings = load_settings(config, state_dir=state)
    started = time.perf_counter()
    build_index(settings.index_path("main"), size, rng)
    built = time.perf_counter() - started

    service = QueryService(settings)
    qs = questions(random.Random(size), n_queries)
    provider = service._chain(settings.agent("main"))[0]
    provider.embed_query("warm up the model")

    start = time.perf_counter()
    service.search("main", SearchRequest(query="w100 w200 first search"))
    load = time.perf_counter() - start

    search = timed(lambda q: service.search("main", SearchRequest(query=q)), qs)
    cached = timed(lambda q: service.search("main", SearchRequest(query=q)), qs)
    embed = timed(provider.embed_query, [q + " again" for q in qs[:50]])

    index = service.index("main")
    columns = index.vectors.columns
    matrix = np.ascontiguousarray(columns.T)  # the same floats, one row per vector
    qvecs = [provider.embed_query(q) for q in qs[:50]]
    k = 6 * 4
    vector_stage = timed(lambda v: index.vectors.search(v, k), qvecs)

    def numpy_scan(v: np.ndarray) -> np.ndarray:
        scores = matrix @ v
        top = np.argpartition(-scores, k)[:k]
        return top[np.argsort(-scores[top])]

    def numpy_scan_columns(v: np.ndarray) -> np.ndarray:
        scores = v @ columns
        top = np.argpartition(-scores, k)[:k]
        return top[np.argsort(-scores[top])]

    numpy_times = timed(numpy_scan, qvecs)
    numpy_columns = timed(numpy_scan_columns, qvecs)
    with index.snapshot():
        knn = timed(lambda v: index.conn.execute(
            "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?", (v.tobytes(), k)).fetchall(),
            qvecs[:5])

    writer = IndexWriter(settings.index_path("main"))
    with writer.transaction():
        add_chunks(writer, size, 100, rng)
    writer.close()
    start = time.perf_counter()
    service.search("main", SearchRequest(query="w300 w400 after refresh"))
    refresh = time.perf_counter() - start
    service.close()
    return {
        "chunks": size, "dims": DIMS, "build_seconds": round(built, 1),
        "load_seconds": round(load, 3), "refresh_seconds": round(refresh, 3),
        "search": percentiles(search), "search_cached": percentiles(cached), "embed": percentiles(embed),
        "vector_stage": percentiles(vector_stage), "numpy_scan": percentiles(numpy_times),
        "numpy_scan_columns": percentiles(numpy_columns),
        "sqlite_vec_knn": percentiles(knn),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="chunks per run")
    parser.add_argument("--queries", type=int, default=200, help="questions per size")
    args = parser.parse_args()
    single_blas_thread()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [bench_size(size, args.queries, Path(tmp)) for size in args.sizes]
    print(json.dumps({"goal": {"p50_ms": 15, "p99_ms": 50, "vector_stage_vs_numpy": 2.0}, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
