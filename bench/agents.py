"""Many agents on one box: prints one JSON object.

100 agents × ~2,000 chunks each (20 files of ~100 chunks), served by one set of workers
(watcher, chunker, embedder, indexer) and one query service (``memoryd serve``), with the
``hash`` provider so the figures are the pipeline's and the service's, not a model's:

- ``processes``: resident memory (MB) and open file descriptors of each process, after
  every agent was searched, at the end of the fairness window, and once the import has
  finished, every queue is empty and the workers have been idle long enough to settle
  (``processes_after_import_settled``);
- ``import``: the import's exit code and seconds, when every queue was empty, and the jobs
  left in any queue (goal: none);
- ``query``: memory_search over HTTP to a random agent each time: p50 / p99 (ms);
- ``edit_to_searchable``: a one-line edit to a random agent's file until memory_search
  over HTTP finds it (debounce included, 1.5 s): p50 / p95 / max (s);
- ``fairness``: the same while another agent's bulk import of 10,000 files
  (``memoryd index --agent bulk --workspace W``, a new agent added while everything runs:
  the watcher reconciles it too) is under way, for ``--fair-seconds`` (90) into the import
  or until it ends; only edits answered while the import ran count. How far the import
  got is reported beside them.

To stay within a few minutes on two shared cores, every agent's workspace and index start
as copies of one built agent (plus one file of its own that the watcher's first reconcile
sends through the pipeline); everything after that is the real pipeline.
Usage: ``python bench/agents.py [--agents 100] [--chunks 2000] [--bulk-files 10000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import redis as redis_client
from rq.registry import StartedJobRegistry

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # tests/inline_index.py: the pipeline in one process

from inline_index import index_now  # noqa: E402

from memoryd.shared.config.loader import load_settings  # noqa: E402
from memoryd.shared.config.settings import Settings  # noqa: E402
from memoryd.shared.defaults import SETTLE_CHECK_SECONDS, SETTLE_IDLE_SECONDS  # noqa: E402
from memoryd.shared.exceptions import IndexMissing  # noqa: E402
from memoryd.shared.index.store import IndexReader  # noqa: E402
from memoryd.shared.runtime.bus import Bus  # noqa: E402
from memoryd.shared.runtime.redis_server import start_private_redis  # noqa: E402

SERVICES = {"watcher": ["watcher"], "chunker": ["worker", "chunk"], "embedder": ["worker", "embed"],
            "indexer": ["worker", "index"], "query": ["serve"]}
FILES = 20
#: Small chunks keep 200,000 of them to ~100 MB of text: the count is what is measured.
CHUNKING = {"tokens": 64, "overlap": 8}
WORDS = ["ledger", "harbor", "quartz", "violet", "meadow", "cobalt", "summit", "lantern", "orchard", "falcon",
         "ember", "tundra", "canyon", "willow", "saffron", "granite", "beacon", "delta", "prism", "juniper",
         "nimbus", "copper", "thistle", "raven", "marble", "cedar"]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _say(message: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def _write_template(workspace: Path, chunks: int) -> None:
    """FILES files of ~chunks/FILES chunks of CHUNKING tokens (lines of ~25 tokens, ~1.4 a chunk)."""
    rng = random.Random(7)
    per_file = chunks // FILES
    (workspace / "memory").mkdir(parents=True)
    for f in range(FILES):
        lines = [f"- {f}.{n}: " + " ".join(rng.choice(WORDS) for _ in range(8)) for n in range(per_file * 7 // 5)]
        (workspace / "memory" / f"2026-01-{f + 1:02d}.md").write_text("\n".join(lines) + "\n")


def _config(tmp: Path, agents: list[str], redis: str) -> Path:
    cfg = tmp / "memoryd.json"
    cfg.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": "hash", "chunking": CHUNKING}},
                   "list": [{"id": a, "workspace": str(tmp / "ws" / a)} for a in agents]},
        "memoryd": {"stateDir": str(tmp / "state"), "redisUrl": redis},
    }))
    return cfg


def _build(tmp: Path, agents: list[str], chunks: int, redis: str) -> Path:
    """One agent built for real, copied to the others with one file of each agent's own."""
    template = tmp / "template"
    _write_template(template, chunks)
    cfg = _config(tmp, agents, redis)
    settings = load_settings(cfg)
    shutil.copytree(template, tmp / "ws" / agents[0])
    index_now(settings, agents[0])
    built = settings.index_path(agents[0])
    for agent in agents[1:]:  # the index is the SQLite file and its vector file beside it
        shutil.copytree(template, tmp / "ws" / agent)
        for suffix in (".sqlite", ".vec"):
            shutil.copyfile(built.with_suffix(suffix), settings.index_path(agent).with_suffix(suffix))
    for agent in agents:
        (tmp / "ws" / agent / "MEMORY.md").write_text(f"# {agent}\n{agent} keeps the key of the {agent} archive\n")
    return cfg


def _spawn(cfg: Path, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_") and k != "REDIS_URL"}
    return subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "--config", str(cfg), *argv], env=env,
                            cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115


def _search(http: httpx.Client, agent: str, query: str) -> list[dict]:
    r = http.post(f"/v1/agents/{agent}/memory_search", json={"query": query, "minScore": 0.3})
    return r.json().get("results", []) if r.status_code == 200 else []


def _processes(procs: dict[str, subprocess.Popen[bytes]]) -> dict[str, dict[str, float]]:
    """Each service's memory and descriptors, with the processes it started (``memoryd serve``'s
    query processes: services/cli/serveprocs.py) added in and counted in ``processes``."""
    out = {}
    for name, proc in procs.items():
        first = psutil.Process(proc.pid)
        tree = [first, *first.children(recursive=True)]
        fulls = [p.memory_full_info() for p in tree]  # PSS: a page shared with other processes counts in shares
        out[name] = {"rss_mb": round(sum(f.rss for f in fulls) / 2**20, 1),
                     "pss_mb": round(sum(f.pss for f in fulls) / 2**20, 1),
                     "open_fds": sum(p.num_fds() for p in tree), "processes": len(tree)}
    return out


def _edits(http_url: str, tmp: Path, agents: list[str], count: int, threads: int,
           until: Callable[[], bool] = lambda: False) -> list[float]:
    """One-line edits to random agents (``threads`` at a time) → seconds each took to be searchable.
    Stops early once ``until()``; an edit that was still waiting then is not counted."""
    samples: list[float] = []
    lock = threading.Lock()
    rng = random.Random(11)
    picks = [(rng.choice(agents), i) for i in range(count)]

    def edit(agent: str, i: int) -> None:
        token = f"zq{i}k{int(time.time() * 1000) % 100000}"
        with httpx.Client(base_url=http_url, timeout=30) as http:
            with open(tmp / "ws" / agent / "memory" / "2026-01-01.md", "a") as handle:
                handle.write(f"- edit {i}: codeword {token}\n")
            saved = time.monotonic()
            while not any(token in hit["snippet"] for hit in _search(http, agent, token)):
                if time.monotonic() - saved > 120:
                    raise RuntimeError(f"edit {i} of {agent} not searchable within 120 s")
                time.sleep(0.05)
            took = time.monotonic() - saved
        if not until():
            with lock:
                samples.append(took)

    pending = list(picks)
    while pending:
        batch, pending = pending[:threads], pending[threads:]
        workers = [threading.Thread(target=edit, args=job) for job in batch]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if until():
            break
    return samples


def _indexed(settings: Settings, agent: str) -> int:
    try:
        reader = IndexReader(settings.index_path(agent))
    except IndexMissing:
        return 0
    try:
        return int(reader.conn.execute("SELECT count(*) FROM files WHERE status = 'indexed'").fetchone()[0])
    finally:
        reader.close()


def _summary(samples: list[float]) -> dict[str, float]:
    return {"n": len(samples), "p50_s": round(_pct(samples, 0.5), 2), "p95_s": round(_pct(samples, 0.95), 2),
            "max_s": round(max(samples), 2)} if samples else {"n": 0}


def _finish_import(importer: subprocess.Popen[bytes], bus: Bus, t0: float, deadline_s: float = 900) -> dict:
    """Wait for ``memoryd index --wait`` to end, then for every queue of every stage to be empty and
    no job started: a finished import leaves no queued work."""
    try:
        code = importer.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        importer.terminate()
        importer.wait(timeout=60)
        return {"finished": False, "waited_s": deadline_s}
    finished_s = time.monotonic() - t0
    lanes = [q for s in ("chunk", "embed", "index") for q in bus.lanes(s)]

    def queued() -> dict[str, int]:
        counts = {q.name: q.count + StartedJobRegistry(queue=q).count for q in lanes}
        return {name: n for name, n in counts.items() if n}

    until = time.monotonic() + 120
    while (left := queued()) and time.monotonic() < until:
        time.sleep(0.5)
    return {"finished": code == 0, "exit_code": code, "import_s": round(finished_s, 1),
            "queues_empty_s": round(time.monotonic() - t0, 1), "jobs_left": left}


def run(tmp: Path, redis: str, n_agents: int, chunks: int, bulk_files: int, queries: int,
        fair_seconds: float) -> dict:
    agents = [f"agent{i:03d}" for i in range(n_agents)]
    started = time.monotonic()
    cfg = _build(tmp, agents, chunks, redis)
    settings = load_settings(cfg)
    _say(f"built {n_agents} agents in {time.monotonic() - started:.0f}s")
    port = 18000 + os.getpid() % 1000
    procs = {name: _spawn(cfg, [*argv, *(["--port", str(port)] if name == "query" else [])], tmp / f"{name}.log")
             for name, argv in SERVICES.items()}
    http_url = f"http://127.0.0.1:{port}"
    result: dict = {"agents": n_agents, "cpu_count": os.cpu_count()}
    try:
        conn = redis_client.Redis.from_url(redis)
        bus = Bus(conn, settings)
        deadline = time.monotonic() + 300
        while conn.hlen(bus.key("reconciled")) < n_agents or any(q.count for s in ("chunk", "embed", "index")
                                                                  for q in bus.lanes(s)):
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in tmp.glob("*.log"))
                raise RuntimeError(f"the pipeline did not settle in 300 s:\n{logs}")
            time.sleep(0.2)
        with httpx.Client(base_url=http_url, timeout=30) as http:
            while True:
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            chunk_counts = [a["chunks"] for a in http.get("/v1/agents").json()["agents"]]
            result["chunks_per_agent"] = round(sum(chunk_counts) / len(chunk_counts))
            own = [_search(http, a, f"{a} archive") for a in agents]  # each agent's own file went through
            result["own_file_found"] = sum(1 for hits in own if hits and hits[0]["path"] == "MEMORY.md")
            rng = random.Random(3)
            samples = []
            for _ in range(queries):
                agent, words = rng.choice(agents), " ".join(rng.sample(WORDS, 2))
                t0 = time.perf_counter()
                _search(http, agent, words)
                samples.append((time.perf_counter() - t0) * 1000)
            result["query"] = {"n": queries, "p50_ms": round(_pct(samples, 0.5), 1),
                               "p99_ms": round(_pct(samples, 0.99), 1)}
        result["processes_after_queries"] = _processes(procs)
        _say(f"queries: {result['query']}")
        result["edit_to_searchable"] = _summary(_edits(http_url, tmp, agents, 20, 4))
        _say(f"edits: {result['edit_to_searchable']}")

        bulk = tmp / "ws-bulk"
        (bulk / "memory").mkdir(parents=True)
        for i in range(bulk_files):
            (bulk / "memory" / f"import-{i:05d}.md").write_text(f"imported {i}: " + " ".join(WORDS[i % 20:][:6]) + "\n")
        t0 = time.monotonic()
        importer = _spawn(cfg, ["index", "--agent", "bulk", "--workspace", str(bulk), "--wait", "--json"],
                          tmp / "import.log")
        while not any(q.count for q in bus.lanes("chunk")):  # the import's jobs are queued
            time.sleep(0.1)
        checked = {"at": 0.0, "done": False}

        def over() -> bool:
            """The import is done (every file indexed), or the window is over."""
            if time.monotonic() - checked["at"] > 1:
                checked.update(at=time.monotonic(), done=_indexed(settings, "bulk") >= bulk_files)
            return bool(checked["done"]) or time.monotonic() - t0 > fair_seconds

        fair = _edits(http_url, tmp, agents, 1000, 4, until=over)
        indexed = _indexed(settings, "bulk")
        result["fairness"] = {"bulk_files": bulk_files, "window_s": round(time.monotonic() - t0, 1),
                              "import_finished": indexed >= bulk_files, "bulk_files_indexed": indexed,
                              "bulk_queued_at_end": sum(q.count for s in ("chunk", "embed", "index")
                                                        for q in [bus.bulk[s]]),
                              "edit_to_searchable_during_import": _summary(fair)}
        _say(f"fairness: {result['fairness']}")
        result["processes_after_import_window"] = _processes(procs)
        result["import"] = _finish_import(importer, bus, t0)
        _say(f"import: {result['import']}")
        time.sleep(SETTLE_IDLE_SECONDS + 2 * SETTLE_CHECK_SECONDS + 1)  # every worker idle long enough to settle
        result["processes_after_import_settled"] = _processes(procs)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=30)
    result["total_s"] = round(time.monotonic() - started, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--chunks", type=int, default=2000, help="chunks per agent")
    parser.add_argument("--bulk-files", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--fair-seconds", type=float, default=90,
                        help="measure edits for this long into the import (it need not finish)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        server = start_private_redis(tmp)
        try:
            result = run(tmp, server.url, args.agents, args.chunks, args.bulk_files, args.queries, args.fair_seconds)
        finally:
            server.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
