"""memory_search at 10k, 100k and 1M chunks in one agent: cold start, memory, latency, refresh, recall — as JSON.

    python bench/query.py [--sizes 10000 100000 1000000] [--queries 200] [--cache /tmp/memoryd-bench]

Per size, an index of N chunks (built once and kept under ``--cache``; 1M takes 1.5–5 minutes
and 3 GB): the real schema (``IndexWriter``'s migrations) filled in bulk — chunk texts of
~60 Zipf-distributed words, one 384-d vector each drawn from a Gaussian with the mean and
covariance of real MiniLM vectors (so the spectrum the compressed scan relies on is
MiniLM's, not the flat one of random vectors) — and its vector file. Then:

- ``cold_start_s``: ``memoryd search "…" --json`` as a new process (no server): process
  start → first answer, the query embedding and the model load included (median of 3);
- a probe process (``--probe``): ``search`` p50/p99 with a new question each time (the
  local MiniLM query embedding included), ``rss_mb`` after them (current and peak), and
  ``refresh_ms``: the snapshot's refresh after a write of 2 chunks (2 added, 2 deleted),
  median of 5, beside ``search_after_write`` — the whole first search after each write;
- ``cli_vs_http``: with ``memoryd serve`` running on the state dir, ``memoryd search --json``
  from a shell (the ``memoryd`` console script) against the same request over HTTP (medians);
- ``concurrency``: requests/s, p50 and p99 of 1 and of 8 client loops at once against a
  ``memoryd serve`` on 127.0.0.1, a new question per request (bench/concurrency.py);
- ``recall_at_10``: the service's vector search (reduced scan → int8 → exact re-score)
  against exact float search over the same vectors, for 100 real questions' vectors;
  ``numpy``: ``rows @ q`` over the float32 vectors, and over the reduced ones, in this
  process: the baseline the probe's numbers compare to.

``real_recall``: the same recall on ~29k real MiniLM vectors of real text
(bench/realvectors.py: the repo's docs and fixture notes, Python's docstrings) — the
figure that decides whether the compressed scan may be the default.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import concurrency  # noqa: E402
import realvectors  # noqa: E402

from memoryd.services.query.vectors import VectorIndex, single_blas_thread  # noqa: E402
from memoryd.shared.config.settings import LocalSettings  # noqa: E402
from memoryd.shared.embed import providers  # noqa: E402
from memoryd.shared.events import ChunkData  # noqa: E402
from memoryd.shared.index import sqlitedb  # noqa: E402
from memoryd.shared.index.fts import segment  # noqa: E402
from memoryd.shared.index.indexvectors import META_VECTORS_UID  # noqa: E402
from memoryd.shared.index.store import META_EMBEDDER, META_GENERATION, IndexWriter  # noqa: E402
from memoryd.shared.index.vecfile import vec_path  # noqa: E402
from memoryd.shared.index.vecwriter import Rows, VecWriter  # noqa: E402

DIMS = 384
VOCABULARY = 20_000
WORDS_PER_CHUNK = 60
CHUNKS_PER_FILE = 20
BLOCK = 50_000
SEED = 7
#: Bump when the generated index changes, so a cached one is rebuilt.
FORMAT = 7
GOALS = {"concurrency_rps_8_over_1@100k": 1.7, "concurrency_p99_8_over_p50_1@100k": 6,
         "cold_start_s@1M": 3, "rss_mb@1M": 2048, "p50_ms@1M": 60, "p50_ms@100k": 15, "refresh_ms@1M": 5,
         "cli_minus_http_ms": 100, "real_recall_at_10": 0.99}


def say(message: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


class Spectrum:
    """Vectors drawn from a Gaussian fitted to real MiniLM vectors, then normalised. Kept beside
    the cache's indexes (``spectrum.npz``), so their vectors can be drawn again exactly."""

    def __init__(self, real: np.ndarray, cache: Path) -> None:
        path = cache / f"spectrum-v{FORMAT}.npz"
        if path.exists():
            stored = np.load(path)
            self.mean, self.root = stored["mean"], stored["root"]
            return
        self.mean = real.mean(axis=0).astype(np.float32)
        values, basis = np.linalg.eigh(np.cov(real.T))
        self.root = (basis * np.sqrt(np.maximum(values, 0))).astype(np.float32)
        np.savez(path, mean=self.mean, root=self.root)

    def block(self, size: int, start: int, count: int) -> np.ndarray:
        rng = np.random.default_rng([SEED, size, start])
        x = self.mean + rng.standard_normal((count, DIMS), dtype=np.float32) @ self.root.T
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def words(rng: np.random.Generator, n: int) -> list[str]:
    return [f"w{r}" for r in np.minimum(rng.zipf(1.1, n), VOCABULARY)]


def config(state: Path) -> Path:
    path = state / "memoryd.json"
    path.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": "local"}},
                   "list": [{"id": "main", "workspace": str(state / "ws")}]},
        "memoryd": {"stateDir": str(state)}}), encoding="utf-8")
    return path


def build_index(state: Path, size: int, spectrum: Spectrum) -> None:
    """The SQLite index in bulk (one transaction), then its vector file from the same vectors."""
    index = state / "memory" / "main.sqlite"
    writer = IndexWriter(index)
    writer.ensure_vec_table(DIMS)
    conn = writer.conn
    rng = np.random.default_rng(SEED)
    conn.execute("BEGIN IMMEDIATE")
    for start in range(0, size, BLOCK):
        count = min(BLOCK, size - start)
        vectors = spectrum.block(size, start, count)
        rows, fts = [], []
        for i in range(count):
            n = start + i
            text = " ".join(words(rng, WORDS_PER_CHUNK))
            line = 1 + (n % CHUNKS_PER_FILE) * 10
            rows.append((n + 1, f"memory/note-{n // CHUNKS_PER_FILE:06d}.md", "memory", line, line + 9, f"h{n}",
                         WORDS_PER_CHUNK, text, 1, 0.0))
            fts.append((n + 1, segment(text)))
        conn.executemany("INSERT INTO files(path, source, hash, size, mtime, seq, status, chunks, indexed_at) "
                         "VALUES (?, 'memory', '', 0, 0, 0, 'indexed', 0, 0)",
                         [(p,) for p in sorted({r[1] for r in rows})])
        conn.executemany("INSERT INTO chunks(id, path, source, start_line, end_line, hash, tokens, text, has_vector, "
                         "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
        conn.executemany("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", fts)
        conn.executemany("INSERT INTO chunk_vectors(rowid, chunk_id, window, first_line, last_line) "
                         "VALUES (?, ?, 0, 0, 0)",  # one vector a chunk, of its one line of text
                         [(r[0], r[0]) for r in rows])
        conn.executemany("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)",
                         [(r[0], vectors[i].tobytes()) for i, r in enumerate(rows)])
        say(f"{size}: {start + count} chunks written")
    generation = int(writer.meta(META_GENERATION) or 0) + 1
    blocks = (Rows(np.arange(s + 1, s + min(BLOCK, size - s) + 1), np.arange(s + 1, s + min(BLOCK, size - s) + 1),
                   ["memory"] * min(BLOCK, size - s), spectrum.block(size, s, min(BLOCK, size - s)))
              for s in range(0, size, BLOCK))
    vec = VecWriter.build(vec_path(index), DIMS, blocks, generation)
    for key, value in ((META_VECTORS_UID, vec.uid), (META_GENERATION, str(generation)),
                       (META_EMBEDDER, providers.local_embedder(LocalSettings()))):
        writer.set_meta(key, value)
    conn.execute("COMMIT")
    vec.close()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    writer.close()


def ensure_index(cache: Path, size: int, spectrum: Spectrum) -> Path:
    state = cache / f"index-{size}-v{FORMAT}"
    if not (state / "built").exists():
        if state.exists():
            subprocess.run(["rm", "-rf", str(state)], check=True)
        (state / "ws" / "memory").mkdir(parents=True)
        started = time.monotonic()
        build_index(state, size, spectrum)
        (state / "built").write_text(f"{time.monotonic() - started:.0f} s\n")
    config(state)
    return state


def questions(seed: int, n: int) -> list[str]:
    """Content-word questions: 4 words of mid rarity (ranks 30–5000), as an agent would ask."""
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randint(30, 5000)}" for _ in range(4)) + f" q{seed}-{i}" for i in range(n)]


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "n": len(samples)}


def memoryd(state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``memoryd ARGV`` as a shell runs it: the console script beside this Python (``python -m``
    when there is none — it adds runpy's imports, ~10 ms)."""
    script = Path(sys.executable).with_name("memoryd")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "memoryd.services.cli"]
    return subprocess.run([*command, *argv, "--config", str(state / "memoryd.json"), "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=600, check=True)


def cold_start(state: Path) -> float:
    """``memoryd search`` in a new process, no server running: start → answer, median of 3."""
    times = []
    for q in questions(11, 3):
        started = time.perf_counter()
        out = memoryd(state, "search", q, "--json")
        times.append(time.perf_counter() - started)
        assert json.loads(out.stdout)["mode"] == "hybrid", out.stdout
    return round(float(np.median(times)), 2)


# --- the probe: one long-lived process, as a server would be -----------------------------
def probe(state: Path, n_queries: int) -> dict:
    from memoryd.services.query.engine import QueryService
    from memoryd.services.query.models import SearchRequest
    from memoryd.shared.config.loader import load_settings

    settings = load_settings(state / "memoryd.json", state_dir=state)
    service = QueryService(settings)
    service.search("main", SearchRequest(query="w100 w200 warm up"))
    qs = questions(n_queries, n_queries)
    search = []
    for q in qs:
        started = time.perf_counter()
        answer = service.search("main", SearchRequest(query=q))
        search.append(time.perf_counter() - started)
        assert answer.mode == "hybrid"
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    rss = {"rss_mb": round(int(status["VmRSS"].split()[0]) / 1024), "peak_rss_mb": round(int(status["VmHWM"].split()[0])
                                                                                          / 1024)}
    index = service.index("main")
    writer = IndexWriter(settings.index_path("main"))
    rng = np.random.default_rng(99)
    refresh, after = [], []
    for i in range(5):
        chunks = [ChunkData(hash=f"refresh-{i}-{j}", start_line=j + 1, end_line=j + 1, tokens=3,
                            text=f"w{i} refresh chunk {j}") for j in range(2)]
        vectors = rng.standard_normal((2, DIMS)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        with writer.transaction():
            writer.upsert_file(path="memory/bench-refresh.md", source="memory", sha256=str(i), size=1, mtime=0,
                               seq=i, status="indexed")
            writer.replace_chunks("memory/bench-refresh.md", "memory", chunks,
                                  {c.hash: vectors[j:j + 1] for j, c in enumerate(chunks)})
        started = time.perf_counter()
        with index.snapshot() as snap:
            snap.vector_index()
        refresh.append(time.perf_counter() - started)
        with writer.transaction():  # another 2-chunk write, this time timed inside a whole search
            writer.replace_chunks("memory/bench-refresh.md", "memory", chunks[:1], {})
        started = time.perf_counter()
        service.search("main", SearchRequest(query=qs[i]))
        after.append(time.perf_counter() - started)
    writer.close()
    service.close()
    return {"search": percentiles(search), **rss,
            "refresh_ms": round(float(np.median(refresh)) * 1000, 2),
            "search_after_write": percentiles(after)}


def probe_process(state: Path, n_queries: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--probe", str(state), "--queries", str(n_queries)],
                         capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(out.stdout)


# --- the CLI beside HTTP, with a server running -------------------------------------------
def cli_vs_http(state: Path) -> dict:
    with concurrency.served(state) as (url, _):
        qs = questions(5, 20)
        http = []
        for q in qs:
            body = json.dumps({"query": q}).encode()
            request = urllib.request.Request(f"{url}/v1/agents/main/memory_search", body,
                                             {"Content-Type": "application/json"})
            started = time.perf_counter()
            with urllib.request.urlopen(request, timeout=60) as response:
                json.loads(response.read())
            http.append(time.perf_counter() - started)
        cli = []
        for q in qs[:7]:
            started = time.perf_counter()
            memoryd(state, "search", q + " again", "--json")
            cli.append(time.perf_counter() - started)
    h, c = float(np.median(http)) * 1000, float(np.median(cli)) * 1000
    return {"http_ms": round(h, 1), "cli_ms": round(c, 1), "cli_minus_http_ms": round(c - h, 1)}


# --- recall and the numpy baseline --------------------------------------------------------
def exact_top(vectors: list[np.ndarray], queries: np.ndarray, k: int) -> list[list[int]]:
    """Exact top-k row ids (0-based) over blocks of vectors."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_ids = np.zeros((len(queries), 0), dtype=np.int64)
    offset = 0
    for block in vectors:
        scores = queries @ block.T
        ids = np.broadcast_to(np.arange(offset, offset + len(block)), scores.shape)
        scores, ids = np.concatenate([best_scores, scores], 1), np.concatenate([best_ids, ids], 1)
        keep = np.argpartition(-scores, k, axis=1)[:, :k]
        best_scores, best_ids = np.take_along_axis(scores, keep, 1), np.take_along_axis(ids, keep, 1)
        offset += len(block)
    return [set(row.tolist()) for row in best_ids]


def recall(index_path: Path, queries: np.ndarray, truth: list[set[int]], k: int = 10) -> float:
    """recall@k of the service's vector search against exact search (chunk id = row + 1)."""
    vectors = VectorIndex(index_path)
    conn = sqlitedb.connect(index_path, readonly=True)
    conn.execute("BEGIN")
    vectors.refresh(conn, int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]))
    found = [{h.chunk_id - 1 for h in vectors.search(q, k)} for q in queries]
    conn.execute("ROLLBACK")
    return round(float(np.mean([len(f & t) / k for f, t in zip(found, truth, strict=True)])), 4)


def numpy_baseline(blocks: list[np.ndarray], reduced: int, queries: np.ndarray) -> dict:
    rows = np.concatenate(blocks)
    small = np.ascontiguousarray(rows[:, :reduced])

    def timed(matrix: np.ndarray) -> float:
        times = []
        for q in queries[:30]:
            started = time.perf_counter()
            scores = matrix @ q[:matrix.shape[1]]
            np.argpartition(-scores, 24)[:24]
            times.append(time.perf_counter() - started)
        return round(float(np.median(times)) * 1000, 2)

    return {"rows_at_q_float32_ms": timed(rows), f"rows_at_q_{reduced}d_ms": timed(small)}


def real_recall(cache: Path, real: np.ndarray) -> dict:
    """recall@10 on real MiniLM vectors: 300 held out as questions, the rest as the index."""
    rng = np.random.default_rng(1)
    order = rng.permutation(len(real))
    queries, rows = real[order[:300]], real[order[300:]]
    state = cache / f"real-{len(rows)}-v{FORMAT}"
    index = state / "memory" / "main.sqlite"
    if not (state / "built").exists():
        state.mkdir(parents=True, exist_ok=True)
        writer = IndexWriter(index)
        writer.ensure_vec_table(DIMS)
        ids = np.arange(1, len(rows) + 1)
        writer.conn.execute("BEGIN IMMEDIATE")
        writer.conn.executemany("INSERT INTO chunk_vectors(rowid, chunk_id, window) VALUES (?, ?, 0)",
                                [(int(i), int(i)) for i in ids])
        writer.conn.executemany("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)",
                                [(int(i), rows[i - 1].tobytes()) for i in ids])
        vec = VecWriter.build(vec_path(index), DIMS, [Rows(ids, ids, ["memory"] * len(ids), rows)], 1)
        writer.set_meta(META_VECTORS_UID, vec.uid)
        writer.set_meta(META_GENERATION, "1")
        writer.conn.execute("COMMIT")
        vec.close()
        writer.close()
        (state / "built").write_text("ok\n")
    return {"vectors": len(rows), "questions": len(queries),
            "recall_at_10": recall(index, queries, exact_top([rows], queries, 10))}


def bench_size(cache: Path, size: int, n_queries: int, spectrum: Spectrum, real: np.ndarray) -> dict:
    state = ensure_index(cache, size, spectrum)
    say(f"{size}: cold start")
    result: dict = {"chunks": size, "cold_start_s": cold_start(state)}
    say(f"{size}: probe")
    result.update(probe_process(state, n_queries))
    say(f"{size}: cli vs http")
    result["cli_vs_http"] = cli_vs_http(state)
    say(f"{size}: concurrency")
    result["concurrency"] = concurrency.measure(state, questions)
    say(f"{size}: recall and numpy")
    blocks = [spectrum.block(size, s, min(BLOCK, size - s)) for s in range(0, size, BLOCK)]
    queries = real[np.random.default_rng(2).permutation(len(real))[:100]]
    result["recall_at_10"] = recall(state / "memory" / "main.sqlite", queries, exact_top(blocks, queries, 10))
    result["numpy"] = numpy_baseline(blocks, DIMS // 4, queries)
    say(f"{size}: {json.dumps(result)}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="chunks per run")
    parser.add_argument("--queries", type=int, default=200, help="questions per size")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/memoryd-bench"), help="indexes and vectors kept here")
    parser.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    single_blas_thread()
    if args.probe:
        print(json.dumps(probe(args.probe, args.queries)))
        return 0
    _, real = realvectors.vectors(args.cache, say)
    spectrum = Spectrum(real, args.cache)
    report = {"goals": GOALS, "cpu_count": os.cpu_count(), "real_recall": real_recall(args.cache, real)}
    say(f"real recall: {report['real_recall']}")
    report["runs"] = [bench_size(args.cache, size, args.queries, spectrum, real) for size in args.sizes]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
