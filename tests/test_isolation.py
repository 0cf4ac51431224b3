"""Isolation, enforced: nothing of agent b is ever returned or touched on agent a's behalf —
through the HTTP API, a job payload, the watcher, or a hostile workspace (symlinks, an
overlapping extraPath, an agent id holding ``../``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from inline_index import index_now
from rq.registry import FailedJobRegistry

from memoryd.services.pipeline.watcher import AgentWatch
from memoryd.services.query.http import create_app
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.workspace import Workspace
from memoryd.shared.events import FileChanged, FileSkipped, parse_event
from memoryd.shared.exceptions import BadRequest, ConfigError
from memoryd.shared.index.chunking import chunk_file
from memoryd.shared.index.store import IndexReader
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.worker import run_worker
from tests.agents_support import two_agents


def _plant_symlinks(a: Path, b: Path) -> None:
    """a's memory/ holds a symlinked file and a symlinked folder, both into b's workspace."""
    os.symlink(b / "MEMORY.md", a / "memory" / "link.md")
    os.symlink(b / "memory", a / "memory" / "linked")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("isolation")
    settings, _ = two_agents(tmp)
    a, b = tmp / "a", tmp / "b"
    _plant_symlinks(a, b)
    for agent in ("a", "b"):
        index_now(settings, agent)
    with TestClient(create_app(settings)) as client:
        yield settings, client, a, b


def _never_b(text: str) -> None:
    assert "quokka" not in text and "zanzibar" not in text, text


@pytest.mark.parametrize("path", [
    "../b/MEMORY.md",
    "../b/memory/2026-03-01.md",
    "memory/../../b/MEMORY.md",
    "ABSOLUTE_B",                                   # b's MEMORY.md by its absolute path
    "~/../b/MEMORY.md",
    "..%2fb%2fMEMORY.md",                           # %-encoded slashes
    "%2e%2e/b/MEMORY.md",                           # %-encoded dots
    "memory%2f..%2f..%2fb%2fMEMORY.md",
    "..\\b\\MEMORY.md",                             # backslashes
    "．．／b／MEMORY.md",                            # fullwidth: NFKC makes it ../b/MEMORY.md
    "memory/．．/．．/b/MEMORY.md",
    "memory/\u2025/b/MEMORY.md",                     # two-dot leader
    "memory/\u2024\u2024/\u2024\u2024/b/MEMORY.md",  # one-dot leaders
    "MEMORY.md\x00/../../b/MEMORY.md",
    "memory/link.md",                               # a symlink in a's memory/ to b's MEMORY.md
    "memory/linked/2026-03-01.md",                  # through a symlinked folder into b's memory/
])
def test_memory_get_never_reads_b(hostile, path: str) -> None:
    settings, client, _, b = hostile
    path = str(b / "MEMORY.md") if path == "ABSOLUTE_B" else path
    r = client.post("/v1/agents/a/memory_get", json={"path": path})
    assert r.status_code in (403, 404), r.text
    assert r.json()["error"]["code"] in ("path_refused", "not_found")
    _never_b(r.text)


def test_search_on_a_never_returns_b(hostile) -> None:
    _, client, _, _ = hostile
    for query in ("quokka", "zanzibar quokka b-only-fact", "migration planned", "MEMORY.md"):
        r = client.post("/v1/agents/a/memory_search", json={"query": query, "minScore": 0, "maxResults": 50})
        assert r.status_code == 200
        assert all(hit["path"] in ("MEMORY.md", "memory/2026-03-01.md") for hit in r.json()["results"])
        _never_b(r.text)
    # b's own search finds it: the words are really there
    assert client.post("/v1/agents/b/memory_search", json={"query": "quokka"}).json()["results"]


@pytest.mark.parametrize("agent", ["..%2fb", "%2e%2e", "a%2f..%2fb", "．．", "a%2f%2e%2e%2fb"])
def test_an_agent_id_in_the_url_cannot_climb(hostile, agent: str) -> None:
    _, client, _, _ = hostile
    r = client.post(f"/v1/agents/{agent}/memory_search", json={"query": "quokka"})
    assert r.status_code in (404, 422), r.text
    _never_b(r.text)


def test_the_index_of_a_holds_nothing_of_b(hostile) -> None:
    settings, _, _, _ = hostile
    reader = IndexReader(settings.index_path("a"))
    try:
        texts = [t for (t,) in reader.conn.execute("SELECT text FROM chunks")]
        paths = [p for (p,) in reader.conn.execute("SELECT path FROM files")]
    finally:
        reader.close()
    assert sorted(paths) == ["MEMORY.md", "memory/2026-03-01.md"]
    _never_b("\n".join(texts))


def test_symlinks_into_b_are_not_memory_of_a(hostile) -> None:
    settings, _, a, _ = hostile
    ws = Workspace(settings.agent("a"))
    assert ws.classify(a / "memory" / "linked" / "2026-03-01.md") is None
    assert {f.path for f in ws.scan()} == {"MEMORY.md", "memory/2026-03-01.md"}


def _changed(agent: str, root: Path, rel: str, path: str) -> FileChanged:
    return FileChanged(agent=agent, path=path, seq=int(time.time() * 1e6), root=str(root), rel=rel,
                       sha256="", size=0, mtime=0.0, origin="index")


@pytest.mark.parametrize("root, rel, path", [
    ("B", "MEMORY.md", "MEMORY.md"),                         # b's workspace as the root
    ("B/memory", "2026-03-01.md", "memory/2026-03-01.md"),   # b's memory folder
    ("A/memory", "../../b/MEMORY.md", "memory/x.md"),        # climbing out of a's folder
    ("A/memory", "linked/2026-03-01.md", "memory/linked/2026-03-01.md"),  # through a's symlinked folder
    ("A/memory", "2026-03-01.md", "../b/MEMORY.md"),         # an index path that is not the file's
    ("A/ｍemory", "2026-03-01.md", "memory/2026-03-01.md"),  # a look-alike of a's folder
])
def test_the_chunker_refuses_a_payload_naming_anothers_file(hostile, root: str, rel: str, path: str) -> None:
    settings, _, a, b = hostile
    folder = Path(root.replace("A", str(a)).replace("B", str(b)))
    result = chunk_file(_changed("a", folder, rel, path), settings)
    assert isinstance(result, FileSkipped), result
    assert "refusing to read" in result.reason
    _never_b(result.model_dump_json())


def test_a_worker_given_anothers_path_touches_nothing_of_b(tmp_path: Path, redis_url: str) -> None:
    """Real workers: a chunk job for agent a naming b's files, and one for an agent id '../b'."""
    settings, _ = two_agents(tmp_path, redis=redis_url, jobRetries=0)
    index_now(settings, "b")
    before = IndexReader(settings.index_path("b")).live_hashes()
    conn = redis.Redis.from_url(redis_url)
    bus = Bus(conn, settings)
    b = tmp_path / "b"
    bus.emit("chunk", [_changed("a", b, "MEMORY.md", "MEMORY.md"),
                       _changed("a", b / "memory", "2026-03-01.md", "memory/2026-03-01.md")])
    bus.emit("chunk", [_changed("../b", b, "MEMORY.md", "MEMORY.md")])
    for stage in ("chunk", "embed", "index"):
        run_worker(stage, settings, conn, burst=True)
    reader = IndexReader(settings.index_path("a"))
    try:
        assert reader.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
        reasons = [r for (r,) in reader.conn.execute("SELECT error FROM files WHERE status = 'skipped'")]
    finally:
        reader.close()
    assert len(reasons) == 2 and all("not a memory folder of agent 'a'" in r for r in reasons)
    assert IndexReader(settings.index_path("b")).live_hashes() == before
    [failed] = FailedJobRegistry(queue=bus.queues["chunk"]).get_job_ids()
    assert "unknown agent '../b'" in bus.queues["chunk"].fetch_job(failed).latest_result().exc_string
    assert sorted(p.name for p in (settings.state_dir / "memory").glob("*.sqlite")) == ["a.sqlite", "b.sqlite"]
    assert not list(settings.state_dir.parent.glob("*.sqlite"))  # '../b' made no file beside the state dir


def test_an_agent_id_holding_dotdot_names_no_file() -> None:
    settings = load_settings()
    for bad in ("../b", "..", "a/../../b", ".hidden", ""):
        with pytest.raises(BadRequest):
            settings.index_path(bad)


def test_the_watcher_of_a_emits_nothing_of_b(tmp_path: Path, redis_url: str) -> None:
    settings, _ = two_agents(tmp_path, redis=redis_url)
    a, b = tmp_path / "a", tmp_path / "b"
    _plant_symlinks(a, b)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    watch = AgentWatch(settings, "a", bus)
    watch.reconcile()
    watch.settle(a / "memory" / "linked" / "2026-03-01.md")  # as if inotify reported it
    watch.settle(a / "memory" / "link.md")
    watch.flush()
    emitted = [parse_event(raw) for lane in bus.lanes("chunk") for job in lane.jobs for raw in job.args[0]]
    assert sorted(e.path for e in emitted) == ["MEMORY.md", "memory/2026-03-01.md"]
    assert all(not e.root.startswith(str(b)) for e in emitted)


@pytest.mark.parametrize("extra", ["B", "B/memory", "TMP"])
def test_an_extra_path_overlapping_anothers_workspace_is_refused(tmp_path: Path, extra: str) -> None:
    settings, config = two_agents(tmp_path)
    data = settings.model_dump(by_alias=True, exclude_none=True)
    data["agents"]["list"][0]["extraPaths"] = [
        extra.replace("TMP", str(tmp_path)).replace("B", str(tmp_path / "b"))]
    config.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="overlaps the workspace"):
        load_settings(config, state_dir=tmp_path / "state")
