"""Pipeline benchmark: prints one JSON object.

- save→indexed latency (p50/p95) of single-file edits through the real watcher and
  workers with the local model, debounce included (default 1.5 s);
- bulk throughput in chunks/s with the local model, with the no-op embedder
  (``provider: none``: the embed stage runs, nothing is embedded — the pipeline's own
  overhead) and with the cheap ``hash`` embedder (the same plus writing vectors), each
  next to the same work done in one process without Redis (``tests/inline_index.py``) in the
  same run: the ratio is the cost of the queues and processes;
- embeddings on an unchanged re-scan (goal 0);
- ``index_local``: `memoryd index` of 300 notes with the local model and no workers running
  (it works the stages itself, overlapped), its chunks/s against the same model encoding the
  same chunk texts in this process (goal ≥ 0.8), and its peak resident memory, sampled with
  psutil over the process and its children (goal ≤ 700 MB);
- ``edits`` (bench/edits.py): chunks embedded and rows rewritten when one line of a 2,000-line
  file is inserted, deleted or appended (goal: ≤ 2 chunks embedded).

Everything runs against a private redis-server started for the run, in a temp dir.
Usage: ``python bench/pipeline.py [--edits 20] [--files 200] [--local-files 12]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # tests/inline_index.py: the pipeline in one process

import edits  # noqa: E402 - bench/edits.py, beside this script
import redis as redis_client  # noqa: E402
from inline_index import index_now  # noqa: E402
from rq import SimpleWorker  # noqa: E402
from support import match_expression  # noqa: E402 - tests/support.py

from memoryd.shared.config.loader import load_settings  # noqa: E402
from memoryd.shared.index.fts import query_terms  # noqa: E402
from memoryd.shared.index.store import IndexReader  # noqa: E402
from memoryd.shared.runtime.bus import Bus  # noqa: E402
from memoryd.shared.runtime.redis_server import start_private_redis  # noqa: E402

WORKERS = [["worker", "chunk"], ["worker", "embed"], ["worker", "index"]]


def _config(tmp: Path, name: str, workspace: Path, provider: str, debounce_ms: int, redis: str) -> Path:
    cfg = tmp / f"{name}.json"
    cfg.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": provider, "sync": {"watchDebounceMs": debounce_ms}}},
                   "list": [{"id": name, "workspace": str(workspace)}]},
        "memoryd": {"stateDir": str(tmp / f"state-{name}"), "redisUrl": redis},
    }))
    return cfg


def _spawn(cfg: Path, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, MEMORYD_CONFIG=str(cfg))
    return subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", *argv], env=env, cwd=ROOT,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115


def _index(cfg: Path, agent: str, workspace: Path) -> dict:
    env = dict(os.environ, MEMORYD_CONFIG=str(cfg))
    out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "index", "--agent", agent, "--workspace",
                          str(workspace), "--wait", "--json"], env=env, cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def _wait_for_workers(cfg: Path, url: str, procs: list[subprocess.Popen[bytes]], timeout: float = 60.0) -> None:
    """Until each of ``procs`` that is a worker has registered: timing starts with the pipeline up."""
    conn = redis_client.Redis.from_url(url)
    bus = Bus(conn, load_settings(cfg))
    wanted = {str(p.pid) for p in procs}
    deadline = time.monotonic() + timeout

    def registered() -> set[str]:
        names = [w.name for stage in ("chunk", "embed", "index")
                 for w in SimpleWorker.all(queue=bus.queues[stage])]
        return {name.rsplit(".", 1)[-1] for name in names}

    while not wanted <= registered():
        if time.monotonic() > deadline:
            raise RuntimeError("workers did not start; see the *.log files")
        time.sleep(0.05)


def _write_corpus(workspace: Path, files: int, lines: int) -> None:
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    for i in range(files):
        body = "\n".join(f"- {i:04d}.{j:03d} decided to move service {j} of team {i} to the new cluster; "
                         f"owner person-{(i * j) % 97}, ticket OPS-{i * 1000 + j}" for j in range(lines))
        (workspace / "memory" / f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}-{i:04d}.md").write_text(body)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def bulk(tmp: Path, redis: str, provider: str, files: int, lines: int) -> dict:
    name = f"bulk-{provider}"
    workspace = tmp / name
    _write_corpus(workspace, files, lines)
    cfg = _config(tmp, name, workspace, provider, 1500, redis)
    procs = [_spawn(cfg, argv, tmp / f"{name}-{argv[-1]}.log") for argv in WORKERS]
    try:
        _wait_for_workers(cfg, redis, procs)
        first = _index(cfg, name, workspace)
        again = _index(cfg, name, workspace)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    # the same work in one process, no Redis, no queues: the baseline
    base_settings = load_settings(cfg, tmp / f"state-{name}-inline")
    start = time.monotonic()
    inline = index_now(base_settings, name)
    inline_seconds = time.monotonic() - start
    windows = IndexReader(base_settings.index_path(name)).conn.execute("SELECT count(*) FROM chunk_vectors")
    pipeline_rate = first["chunks"] / first["seconds"]
    inline_rate = inline["chunks"] / inline_seconds
    return {
        "provider": provider, "files": first["files"], "chunks": first["chunks"],
        "seconds": first["seconds"], "chunks_per_s": round(pipeline_rate, 1),
        "inline_chunks_per_s": round(inline_rate, 1),
        "pipeline_vs_inline": round(pipeline_rate / inline_rate, 3),
        "vectors_per_chunk": round(windows.fetchone()[0] / max(inline["chunks"], 1), 2),
        "rescan_chunks_embedded": again["chunksEmbedded"], "rescan_seconds": again["seconds"],
    }


def _peak_rss(proc: subprocess.Popen[bytes]) -> int:
    """Sample the resident memory of ``proc`` and its direct children until it exits; → the peak sum,
    bytes. Four times a second: finding children reads every process of the machine, and at 20 Hz
    that alone took a good part of a core from the run being measured."""
    import psutil

    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):  # it exited between the two calls
            peak = max(peak, sum(p.memory_info().rss for p in [root, *root.children()]))
        time.sleep(0.25)
    return peak


_MODEL_RSS = """
import json, resource, sys
from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed.providers import LocalProvider
texts = json.load(open(sys.argv[1]))
LocalProvider(LocalSettings(batch_size=int(sys.argv[2]))).embed_chunks(texts)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def model_rss(texts: list[str], batch: int, tmp: Path) -> float:
    """Peak RSS (MB) of a process that only loads the local model and embeds ``texts`` ``batch`` windows at a time."""
    path = tmp / "model-rss-texts.json"
    path.write_text(json.dumps(texts))
    out = subprocess.run([sys.executable, "-c", _MODEL_RSS, str(path), str(batch)], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return round(int(out.stdout.strip()) / 2**20, 1)


def index_local(tmp: Path, redis: str, files: int, lines: int) -> dict:
    """`memoryd index` of ``files`` notes with the local model and no workers running (it works the
    stages itself), against the same model encoding the same chunk texts in this process."""
    import resource

    from memoryd.shared.embed import providers
    from memoryd.shared.index.chunking import Chunker

    name = "index-local"
    workspace = tmp / name
    _write_corpus(workspace, files, lines)
    cfg = _config(tmp, name, workspace, "local", 1500, redis)
    settings = load_settings(cfg)
    texts = [c.text for p in sorted((workspace / "memory").glob("*.md"))
             for c in Chunker.from_settings(settings, name).chunk(p.read_text(encoding="utf-8"))]
    model = providers.resolve(settings.agent(name).memory_search)[0]
    model.embed_chunks(texts[:2])  # loaded and warm: only encoding is timed

    def in_process_rate() -> float:
        """Every chunk text of the run, in one call: the model at its best (a sample would not do —
        the corpus's chunks run from 32 to 248 word pieces, and every 5th chunk encoded at 24/s
        where all of them encode at 20.5/s)."""
        start = time.monotonic()
        model.embed_chunks(texts)
        return len(texts) / (time.monotonic() - start)

    before = in_process_rate()  # the machine's load drifts: the model alone just before and just after
    env = dict(os.environ, MEMORYD_CONFIG=str(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "index", "--agent", name, "--json"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    peak = _peak_rss(proc)
    first = json.loads(proc.stdout.read() if proc.stdout else b"{}")
    children_maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest child, bytes
    after = in_process_rate()
    inline_rate = (before + after) / 2
    rate = first["chunks"] / first["seconds"]
    return {"files": first["files"], "chunks": first["chunks"], "seconds": first["seconds"],
            "chunks_per_s": round(rate, 2), "in_process_model_chunks_per_s": round(inline_rate, 2),
            "in_process_before_after": [round(before, 2), round(after, 2)],
            "end_to_end_vs_in_process": round(rate / inline_rate, 3),
            "peak_rss_mb": round(peak / 2**20, 1), "max_rss_of_one_process_mb": round(children_maxrss / 2**20, 1),
            "batch_windows": settings.agent(name).memory_search.local.batch_size,
            # where the memory goes: the model alone on 200 of these chunks, 32 (0.1's batch), 8 and 4 windows per run
            "model_only_peak_rss_mb": {f"batch_{b}": model_rss(texts[:200], b, tmp) for b in (32, 8, 4)}}


def latency(tmp: Path, redis: str, edits: int) -> dict:
    name = "latency"
    workspace = tmp / name
    _write_corpus(workspace, 5, 60)
    cfg = _config(tmp, name, workspace, "local", 1500, redis)
    _index(cfg, name, workspace)
    settings = load_settings(cfg)
    procs = [_spawn(cfg, argv, tmp / f"{name}-{argv[-1]}.log") for argv in [["watcher"], *WORKERS]]
    samples: list[float] = []
    try:
        _wait_for_workers(cfg, redis, procs[1:])  # procs[0] is the watcher
        conn = redis_client.Redis.from_url(redis)
        while not conn.hget(Bus(conn, settings).key("reconciled"), name):  # the watcher's first reconcile is done
            time.sleep(0.05)
        target = workspace / "memory" / "2026-05-05.md"
        for i in range(edits):
            token = f"zq{i}x{int(time.time() * 1000) % 100000}"
            with open(target, "a") as handle:
                handle.write(f"- edit {i}: remembered codeword {token}\n")
            saved = time.monotonic()
            expr = match_expression(query_terms(token))
            while True:
                try:
                    reader = IndexReader(settings.index_path(name))
                    found = reader.conn.execute("SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ?", (expr,)).fetchone()
                    reader.close()
                except Exception:
                    found = None
                if found:
                    samples.append(time.monotonic() - saved)
                    break
                if time.monotonic() - saved > 30:
                    raise RuntimeError(f"edit {i} not indexed within 30 s")
                time.sleep(0.01)
            time.sleep(0.3)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    return {"edits": edits, "debounce_s": 1.5, "p50_s": round(_pct(samples, 0.5), 3),
            "p95_s": round(_pct(samples, 0.95), 3), "max_s": round(max(samples), 3),
            "p50_minus_debounce_s": round(_pct(samples, 0.5) - 1.5, 3)}


def _say(message: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--files", type=int, default=200, help="files for the no-op embedder run")
    parser.add_argument("--local-files", type=int, default=12, help="files for the local-model run")
    parser.add_argument("--index-files", type=int, default=300, help="notes for the `memoryd index` local-model run")
    parser.add_argument("--only", choices=["latency", "noop", "hash", "local", "edits", "index"], help="run one part")
    args = parser.parse_args()
    parts = {
        "latency_local": ("latency", lambda tmp, url: latency(tmp, url, args.edits)),
        "bulk_noop": ("noop", lambda tmp, url: bulk(tmp, url, "none", args.files, 80)),
        "bulk_hash": ("hash", lambda tmp, url: bulk(tmp, url, "hash", args.files, 80)),
        "bulk_local": ("local", lambda tmp, url: bulk(tmp, url, "local", args.local_files, 80)),
        "index_local": ("index", lambda tmp, url: index_local(tmp, url, args.index_files, 8)),
        # one line inserted, deleted or appended in a 2,000-line file: chunks embedded, rows rewritten
        "edits": ("edits", lambda tmp, url: edits.measure(tmp, positions=20)),
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        redis = start_private_redis(tmp)
        try:
            result: dict = {"cpu_count": os.cpu_count()}
            for key, (short, run) in parts.items():
                if args.only in (None, short):
                    _say(f"{key} …")
                    result[key] = run(tmp, redis.url)
                    _say(f"{key}: {json.dumps(result[key])}")
        finally:
            redis.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
