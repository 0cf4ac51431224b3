"""Several nodes on one Redis: prints one JSON object (issue 21).

- ``throughput``: one agent's first import of ``--files`` files (~``--chunks`` chunks in all)
  by an owner node (watcher, chunker, indexer) and 1, 2 and 3 embedder nodes. An embedder
  node is a ``memoryd worker embed`` with its own node name, state dir and data dir — it
  shares nothing with the owner but Redis and the namespace — so the vectors it makes reach
  the index only through the owner. Measured from the owner's start until every file is
  indexed with all its vectors: seconds, chunks/s, and the ratio to one embedder node. The
  provider is the local model (``--provider``): embedding is the work that scales.
- ``failover``: two full nodes (watcher, chunker, embedder, indexer) sharing the data dir;
  ``--kills`` times the owner's whole process group is killed (SIGKILL), a note is written
  at once, and the other node's taking of the lease and that note's arrival in the index
  (keyword-searchable) are timed; the killed node comes back as the standby.

The machine has 2 cores: three embedder processes share them with the owner's.
Usage: ``python bench/nodes.py [--files 300] [--kills 3] [--provider local]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import redis as redis_client
from rq import Worker

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from memoryd.shared.config.loader import load_settings  # noqa: E402
from memoryd.shared.config.settings import Settings  # noqa: E402
from memoryd.shared.exceptions import IndexMissing  # noqa: E402
from memoryd.shared.index.store import IndexReader  # noqa: E402
from memoryd.shared.runtime.bus import Bus  # noqa: E402
from memoryd.shared.runtime.lease import Leases  # noqa: E402
from memoryd.shared.runtime.redis_server import start_private_redis  # noqa: E402
from tests.nodes_harness import Node  # noqa: E402
from tests.support import wait_until  # noqa: E402

NAMESPACE = "nodes-bench"
WORDS = ["ledger", "harbor", "quartz", "violet", "meadow", "cobalt", "summit", "lantern", "orchard", "falcon",
         "ember", "tundra", "canyon", "willow", "saffron", "granite", "beacon", "delta", "prism", "juniper"]


def _say(message: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def _config(root: Path, workspace: Path, data: Path, provider: str) -> Path:
    path = root / "memoryd.json"
    path.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": provider, "sync": {"watchDebounceMs": 200}}},
                   "list": [{"id": "main", "workspace": str(workspace)}]},
        "memoryd": {"dataDir": str(data), "namespace": NAMESPACE}}), encoding="utf-8")
    return path


def _write_files(workspace: Path, files: int) -> None:
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    for i in range(files):
        lines = [f"- {WORDS[(i + j) % len(WORDS)]} note {i}.{j}: the {WORDS[(i * j) % len(WORDS)]} "
                 f"report lists {i * 7 + j} items for the {WORDS[j % len(WORDS)]} team." for j in range(24)]
        (workspace / "memory" / f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}-{i}.md").write_text("\n".join(lines) + "\n")


def _progress(settings: Settings) -> tuple[int, int, int]:
    """(files indexed, chunks, chunks without vectors) of the agent's index."""
    try:
        reader = IndexReader(settings.index_path("main"))
    except IndexMissing:
        return 0, 0, 0
    try:
        counts = reader.counts()
        return counts["files"], counts["chunks"], counts["chunks_without_vectors"]
    finally:
        reader.close()


def _embedders_ready(conn: redis_client.Redis, settings: Settings, count: int) -> bool:
    queue = Bus(conn, settings).lanes("embed")[0]
    return len([w for w in Worker.all(queue=queue) if ".embed-" in w.name]) >= count


def _import(root: Path, redis_url: str, files: int, provider: str, embedders: int) -> dict[str, object]:
    """One first import with ``embedders`` embedder nodes (on an emptied Redis database)."""
    conn = redis_client.Redis.from_url(redis_url)
    conn.flushdb()
    run = root / f"throughput-{embedders}"
    workspace, data = run / "workspace", run / "data"
    _write_files(workspace, files)
    config = _config(run, workspace, data, provider)
    settings = load_settings(config, run / "probe")
    nodes = [Node(f"embed-{i}", run / f"embed-{i}", config, redis_url,
                  MEMORYD_DATA_DIR=str(run / f"embed-{i}" / "own-data")) for i in range(embedders)]
    owner = Node("owner", run / "owner", config, redis_url)
    try:
        for node in nodes:
            node.start("embed")
        wait_until(lambda: _embedders_ready(conn, settings, embedders), timeout=120,
                   what=f"{embedders} embedder nodes registered")
        started = time.monotonic()
        owner.start("watcher", "chunk", "index")
        wait_until(lambda: (p := _progress(settings))[0] == files and p[1] > 0 and p[2] == 0, timeout=1800,
                   interval=0.25, what=f"the import with {embedders} embedder nodes\n{owner.logs()}")
        seconds = time.monotonic() - started
        chunks = _progress(settings)[1]
        done = {w.name: w.successful_job_count for w in Worker.all(queue=Bus(conn, settings).lanes("embed")[0])
                if ".embed-" in w.name}
    finally:
        owner.shutdown()
        for node in nodes:
            node.shutdown()
    _say(f"{embedders} embedder nodes: {chunks} chunks in {seconds:.1f} s")
    return {"seconds": round(seconds, 1), "chunks": chunks, "chunks_per_second": round(chunks / seconds, 1),
            "embed_jobs_per_node": done}


def throughput(root: Path, redis_url: str, files: int, provider: str) -> dict[str, dict[str, object]]:
    out = {str(n): _import(root, redis_url, files, provider, n) for n in (1, 2, 3)}
    base = float(out["1"]["chunks_per_second"])  # type: ignore[arg-type]
    for n in ("2", "3"):
        out[n]["ratio_to_1"] = round(float(out[n]["chunks_per_second"]) / base, 2)  # type: ignore[arg-type]
    return out


def _keyword(settings: Settings, word: str) -> bool:
    try:
        reader = IndexReader(settings.index_path("main"))
    except IndexMissing:
        return False
    try:
        return bool(reader.conn.execute("SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ?", (word,)).fetchone())
    finally:
        reader.close()


def failover(root: Path, redis_url: str, kills: int) -> dict[str, object]:
    conn = redis_client.Redis.from_url(redis_url)
    conn.flushdb()
    run = root / "failover"
    workspace, data = run / "workspace", run / "data"
    _write_files(workspace, 20)
    config = _config(run, workspace, data, "hash")
    settings = load_settings(config, run / "probe")
    leases = Leases(conn, settings.namespace, "bench")
    nodes = {name: Node(name, run / name, config, redis_url) for name in ("A", "B")}
    services = ("watcher", "chunk", "embed", "index")
    takeovers, searchable = [], []
    try:
        nodes["A"].start(*services)
        wait_until(lambda: (o := leases.owner("main")) is not None and o.node == "A", timeout=60, what="A owning")
        nodes["B"].start(*services)
        wait_until(lambda: _progress(settings)[0] == 20, timeout=120, what="the first import")
        for kill in range(kills):
            owner = leases.owner("main").node  # type: ignore[union-attr]
            standby = "B" if owner == "A" else "A"
            time.sleep(3)  # the standby has been up a while
            nodes[owner].kill()
            killed = time.monotonic()
            word = f"failover{kill}word"
            (workspace / "memory" / f"after-kill-{kill}.md").write_text(f"- written as {owner} died: {word}\n")
            wait_until(lambda s=standby: (o := leases.owner("main")) is not None and o.node == s, timeout=60,
                       interval=0.1, what=f"{standby} taking the agent\n{nodes[standby].logs()}")
            takeovers.append(round(time.monotonic() - killed, 1))
            wait_until(lambda w=word: _keyword(settings, w), timeout=60, interval=0.1,
                       what=f"the note written at the kill in the index\n{nodes[standby].logs()}")
            searchable.append(round(time.monotonic() - killed, 1))
            _say(f"kill {kill + 1}: {standby} took over in {takeovers[-1]} s, note searchable in {searchable[-1]} s")
            nodes[owner].start(*services)  # back, as the standby
    finally:
        for node in nodes.values():
            node.shutdown()
    return {"kills": kills, "takeover_seconds": takeovers, "note_searchable_seconds": searchable,
            "max_note_searchable_seconds": max(searchable)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--provider", default="local")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="memoryd-nodes-"))
    server = start_private_redis(root / "redis")
    try:
        url = f"{server.url.rsplit('/', 1)[0]}/0"
        result = {"throughput": throughput(root, url, args.files, args.provider),
                  "failover": failover(root, url, args.kills)}
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
