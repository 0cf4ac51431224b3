"""Two nodes on one real Redis: each agent owned by one node under a fenced lease (issue 21).

Each node is a process group of real memoryd services with its own state dir and node name;
the agents' data dir (indexes, logs) and their workspaces are shared, as a shared volume
would be. Node n1 starts first and takes both agents; node n2's chunker and embedder do
their chunking and embedding, and n2's query service forwards their searches to n1. Killed
with its whole process group, n1 loses them to n2 within 15 s; the token n1 wrote under is
then refused by the index and the log; chunkers and embedders of n1, back as workers only with
a data dir of their own (stateless), serve the agents n2 owns, even one added since; an agent
nobody owns is answered with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis
from rq import Worker

from memoryd.shared.config.loader import load_settings
from memoryd.shared.events import FileDeleted
from memoryd.shared.exceptions import Fenced
from memoryd.shared.index.store import META_FENCE, IndexWriter
from memoryd.shared.log.eventlog import FENCE_FILE, EventLog, log_dir
from memoryd.shared.runtime.lease import Leases
from tests.conftest import write_config
from tests.nodes_harness import Node
from tests.support import wait_until

pytestmark = pytest.mark.integration

def _search(url: str, agent: str, query: str) -> dict:
    answer = httpx.post(f"{url}/v1/agents/{agent}/memory_search", json={"query": query, "fusion": "keyword"},
                        timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _found(url: str, agent: str, query: str, path: str) -> bool:
    """Whether a search finds ``path`` (False while the index is not made yet)."""
    try:
        answer = httpx.post(f"{url}/v1/agents/{agent}/memory_search", json={"query": query, "fusion": "keyword"},
                            timeout=10)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200 and any(r["path"] == path for r in answer.json()["results"])


def _jobs_done(conn: redis.Redis, settings, stage: str, node: str) -> int:
    """Jobs finished by the live workers of ``stage`` on ``node``."""
    from memoryd.shared.runtime.bus import Bus

    queue = Bus(conn, settings).lanes(stage)[0]
    return sum(w.successful_job_count for w in Worker.all(queue=queue) if f".{node}." in w.name)


def test_each_agent_is_written_by_its_owner_and_moves_when_the_owner_dies(tmp_path: Path, redis_url: str) -> None:
    ws = {agent: tmp_path / f"ws-{agent}" for agent in ("a", "b")}
    for folder in ws.values():
        (folder / "memory").mkdir(parents=True)
    data = tmp_path / "shared-data"
    config = write_config(tmp_path / "memoryd.json", {
        "agents": {"defaults": {"memorySearch": {"provider": "hash", "sync": {"watchDebounceMs": 200}}},
                   "list": [{"id": agent, "workspace": str(folder)} for agent, folder in ws.items()]},
        "memoryd": {"dataDir": str(data)}})
    settings = load_settings(config, tmp_path / "probe-state")
    conn = redis.Redis.from_url(redis_url)
    leases = Leases(conn, settings.namespace, "observer")
    n1 = Node("n1", tmp_path / "node-1", config, redis_url)
    n2 = Node("n2", tmp_path / "node-2", config, redis_url)
    try:
        n1.start("watcher", "index", "serve")
        wait_until(lambda: all((o := leases.owner(a)) is not None and o.node == "n1" for a in ws), timeout=60,
                   what=f"n1 holding both agents' leases\n{n1.logs()}")
        n2.start("chunk", "embed", "watcher", "index", "serve")
        url1, url2 = n1.url(), n2.url()
        time.sleep(3)  # n2's watcher has kept its leases at least once: it holds nothing, n1 does
        assert {a: leases.owner(a).node for a in ws} == {"a": "n1", "b": "n1"}
        (ws["a"] / "memory" / "2026-12-03.md").write_text("- The lighthouse keeper counts forty gulls.\n")
        (ws["b"] / "memory" / "2026-12-03.md").write_text("- The orchard ledger lists nine pear trees.\n")
        # n2's query service forwards to n1, the owner; the chunking and embedding were n2's
        wait_until(lambda: _found(url2, "a", "lighthouse gulls", "memory/2026-12-03.md"), timeout=30,
                   what=f"a's note searchable through n2\n{n1.logs()}\n{n2.logs()}")
        wait_until(lambda: _found(url2, "b", "orchard pear", "memory/2026-12-03.md"), timeout=30,
                   what=f"b's note searchable through n2\n{n1.logs()}\n{n2.logs()}")
        assert _found(url1, "a", "lighthouse gulls", "memory/2026-12-03.md")
        wait_until(lambda: _jobs_done(conn, settings, "embed", "n2") >= 2, timeout=30,
                   what="n2's embedder finished both agents' embed jobs")
        assert _jobs_done(conn, settings, "chunk", "n2") >= 2
        # every write to the index and the log came under n1's token, the only one drawn so far
        old = {a: leases.owner(a).token for a in ws}
        for agent in ws:
            assert int(conn.get(f"memoryd:{settings.namespace}:fence:{agent}")) == old[agent]
            assert int((log_dir(settings, agent) / FENCE_FILE).read_text()) == old[agent]
            reader = IndexWriter(settings.index_path(agent))
            assert reader.meta(META_FENCE) == str(old[agent])
            reader.close()

        n1.kill()
        killed = time.monotonic()
        (ws["a"] / "memory" / "2026-12-03.md").write_text("- The lighthouse keeper counts forty gulls.\n"
                                                          "- A ferry named Juniper docks at noon.\n")
        wait_until(lambda: all((o := leases.owner(a)) is not None and o.node == "n2" for a in ws), timeout=30,
                   what=f"n2 taking both agents over\n{n2.logs()}")
        taken = time.monotonic() - killed
        wait_until(lambda: _found(url2, "a", "ferry Juniper", "memory/2026-12-03.md"), timeout=30,
                   what=f"the note written after n1 died searchable on n2\n{n2.logs()}")
        searchable = time.monotonic() - killed
        print(json.dumps({"takeover_seconds": round(taken, 1), "searchable_after_kill_seconds": round(searchable, 1)}))
        assert searchable <= 15, f"a's edit after n1 died searchable after {searchable:.1f} s"
        new = leases.owner("a").token
        assert new > old["a"]

        # a late write of the old owner, under its token, is refused by the resources themselves
        writer = IndexWriter(settings.index_path("a"))
        writer.fence = old["a"]
        with pytest.raises(Fenced, match="older than"), writer.transaction():
            writer.set_meta("late", "write")
        assert writer.meta("late") is None
        writer.close()
        record = EventLog(settings)
        with pytest.raises(Fenced, match="older than"):
            record.append([FileDeleted(agent="a", path="memory/2026-12-03.md", seq=1)], {"a": old["a"]})
        record.close()
        assert _found(url2, "a", "ferry Juniper", "memory/2026-12-03.md")

        # n1 back as a chunker and embedder only, stateless: a data dir of its own (empty), the same
        # namespace; it serves the agents n2 owns, one of them added since, known only as n2 published it
        n2.stop("chunk")
        n2.stop("embed")
        workers = Node("n1", tmp_path / "node-1-workers", config, redis_url, MEMORYD_NAMESPACE=settings.namespace,
                       MEMORYD_DATA_DIR=str(tmp_path / "node-1-workers" / "own-data"))
        workers.start("chunk", "embed")
        (ws["b"] / "memory" / "2026-12-04.md").write_text("- The granary roof was mended with slate.\n")
        c = tmp_path / "ws-c"
        (c / "memory").mkdir(parents=True)
        (c / "memory" / "2026-12-04.md").write_text("- The kiln fires at dawn on Tuesdays.\n")
        subprocess.run([sys.executable, "-m", "memoryd.services.cli", "agents", "add", "c", "--workspace", str(c)],
                       env=n2.env, capture_output=True, text=True, timeout=60, check=True)
        wait_until(lambda: _found(url2, "b", "granary slate", "memory/2026-12-04.md"), timeout=60,
                   what=f"b's note, chunked and embedded on n1, searchable\n{workers.logs()}\n{n2.logs()}")
        wait_until(lambda: _found(url2, "c", "kiln dawn", "memory/2026-12-04.md"), timeout=60,
                   what=f"the new agent c's note searchable\n{workers.logs()}\n{n2.logs()}")
        wait_until(lambda: _jobs_done(conn, settings, "embed", "n1") >= 2, timeout=30,
                   what=f"n1's embedder finishing b's and c's embed jobs\n{workers.logs()}")
        assert _jobs_done(conn, settings, "chunk", "n1") >= 2
        assert not (tmp_path / "node-1-workers" / "own-data" / "log").exists()  # it wrote no log
        workers.shutdown()

        # nobody owns the agents once n2 dies: n1's query service answers and says why
        n2.kill()
        n1.start("serve")
        url1 = n1.url()
        wait_until(lambda: leases.owner("a") is None, timeout=20, what="a's lease expired")
        answer = _search(url1, "a", "ferry Juniper")
        assert "no live node holds agent a's lease" in answer["unavailable"]
        status = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "status", "--json"], env=n1.env,
                                capture_output=True, text=True, timeout=60, check=True)
        agents = json.loads(status.stdout)["agents"]
        assert agents["a"]["owner"] is None and "no live node holds its lease" in agents["a"]["unavailable"]
    finally:
        n1.shutdown()
        n2.shutdown()
