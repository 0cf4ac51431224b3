"""``memoryd replay`` and ``asOf``: indexes folded from the log the pipeline's stages wrote.

The history is made by ``memoryd index`` runs through a real Redis (the stages log their
own events): the retrieval fixture indexed, then one file edited, one deleted, one added.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
import redis
from fastapi.testclient import TestClient
from mcp import Client, StdioServerParameters
from retrieval_set import FIXTURE, questions

from memoryd.services.query.engine import QueryService
from memoryd.services.query.http import create_app
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from memoryd.shared.embed import providers
from memoryd.shared.exceptions import BadRequest
from memoryd.shared.index.store import IndexReader
from memoryd.shared.log.eventlog import log_dir, read
from memoryd.shared.log.fold import Until
from memoryd.shared.rebuild.replay import replay

REPO = Path(__file__).resolve().parent.parent
EDITED = "memory/2026-01-20.md"
DELETED = "memory/2026-01-29.md"
ADDED = "memory/2026-02-28.md"
QUERIES = [q.q for q in questions()[:12]] + ["E-404", "ZEBRA-7781 crossing widget", "atlas-docs-eu"]


@dataclass
class History:
    settings: Settings
    config: Path
    env: dict[str, str]
    then: str  # an ISO time between the first and the second `memoryd index`
    then_seq: int  # the last sequence number logged by the first run
    deleted_text: str


def cli(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memoryd.services.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, check=check, timeout=300)


def _config(directory: Path, redis_url: str, provider: str) -> Path:
    data = json.loads((FIXTURE / "questions.json").read_text(encoding="utf-8"))
    config = directory / "memoryd.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": provider, "chunking": data["chunking"],
                                                 "extraPaths": data["extraPaths"]}},
                   "list": [{"id": "main", "workspace": str(directory / "workspace")}]},
        "memoryd": {"stateDir": str(directory / "state"), "redisUrl": redis_url},
    }), encoding="utf-8")
    return config


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, redis_server: str) -> History:
    """Made once for this module's tests, which only read it (Redis db 0 is used for the two runs)."""
    tmp_path = tmp_path_factory.mktemp("history")
    redis_url = f"{redis_server}/0"
    redis.Redis.from_url(redis_url).flushdb()
    shutil.copytree(FIXTURE / "workspace", tmp_path / "workspace")
    config = _config(tmp_path, redis_url, "hash")
    env = dict(os.environ, MEMORYD_CONFIG=str(config))
    cli(env, "index", "--agent", "main", "--json")
    settings = load_settings(config)
    then_seq = max(r.seq for r in read(log_dir(settings, "main")) if r.seq is not None)
    time.sleep(1.1)
    then = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    time.sleep(1.1)
    workspace = tmp_path / "workspace"
    deleted_text = (workspace / DELETED).read_text(encoding="utf-8")
    with open(workspace / EDITED, "a", encoding="utf-8") as handle:
        handle.write("- Ticket ZEBRA-7781: the zebra crossing widget is broken.\n")
    (workspace / DELETED).unlink()
    (workspace / ADDED).write_text("# 2026-02-28\n- Moved the standup to 9:45 for the Lisbon team.\n")
    cli(env, "index", "--agent", "main", "--json")
    redis.Redis.from_url(redis_url).flushdb()
    return History(settings, config, env, then, then_seq, deleted_text)


def answers(settings: Settings, index: Path | None = None) -> list[list[tuple[str, int, int, float]]]:
    """memory_search's answers to QUERIES (paths, lines, scores) from the live index, or ``index``:
    ten results each, down to a score of 0.05 (below it, chunks that share nothing with the query
    tie at 0, and which of them fill a list is arbitrary)."""
    if index is not None:
        settings = settings.model_copy(deep=True)
        settings.memoryd.state_dir = str(index.parent.parent)
        assert settings.index_path("main") == index
    service = QueryService(settings)
    try:
        return [[(r.path, r.start_line, r.end_line, r.score) for r in
                 service.search("main", SearchRequest(query=q, min_score=0.05, max_results=10)).results]
                for q in QUERIES]
    finally:
        service.close()


def test_replay_into_answers_like_the_live_index_with_zero_provider_calls(
        history: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = json.loads(cli(history.env, "replay", "--agent", "main", "--into",
                         str(tmp_path / "cli" / "memory" / "main.sqlite"), "--json").stdout)
    assert out["chunksEmbedded"] == 0 and out["vectorsMissing"] == 0 and out["swapped"] is False
    assert out["chunksCached"] > 0 and out["filesDeleted"] == 1

    def no_calls(*_: object) -> None:
        raise AssertionError("replay called the embedding provider")

    monkeypatch.setattr(providers, "embed_with_fallback", no_calls)
    into = tmp_path / "replayed" / "memory" / "main.sqlite"
    result = replay(history.settings, "main", into=into)
    assert result["chunks_embedded"] == 0
    live = answers(history.settings)
    assert sum(len(a) for a in live) > 100 and answers(history.settings, into) == live


def test_replaying_twice_writes_byte_identical_chunk_tables(history: History, tmp_path: Path) -> None:
    first, second = tmp_path / "one.sqlite", tmp_path / "two.sqlite"
    replay(history.settings, "main", into=first)
    replay(history.settings, "main", into=second)
    tables = {}
    for path in (first, second):
        reader = IndexReader(path)
        q = reader.conn.execute
        tables[path] = [q(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("chunks", "chunk_vectors", "files")]
        tables[path] += [q("SELECT rowid, embedding FROM chunks_vec ORDER BY rowid").fetchall(),
                         q("SELECT rowid, text FROM chunks_fts ORDER BY rowid").fetchall()]
        reader.close()
    assert tables[first][0] and tables[first][1] and tables[first][3]  # chunks, with vectors
    assert tables[first] == tables[second]  # every row, times and blobs included


def _files(path: Path) -> dict[str, str]:
    reader = IndexReader(path)
    try:
        return dict(reader.conn.execute("SELECT path, status FROM files"))
    finally:
        reader.close()


def _has_text(path: Path, needle: str) -> bool:
    reader = IndexReader(path)
    try:
        return reader.conn.execute("SELECT count(*) FROM chunks WHERE instr(text, ?)", (needle,)).fetchone()[0] > 0
    finally:
        reader.close()


def test_replay_until_gives_the_index_as_it_was_then(history: History, tmp_path: Path) -> None:
    by_time, by_seq = tmp_path / "then-time.sqlite", tmp_path / "then-seq.sqlite"
    out = json.loads(cli(history.env, "replay", "--agent", "main", "--until", history.then, "--into", str(by_time),
                         "--json").stdout)
    assert out["chunksEmbedded"] == 0 and out["until"]
    replay(history.settings, "main", until=Until(seq=history.then_seq), into=by_seq)
    for into in (by_time, by_seq):
        then = _files(into)
        assert then[DELETED] == "indexed" and ADDED not in then  # deleted later: back; added later: absent
        assert not _has_text(into, "ZEBRA-7781") and _has_text(history.settings.index_path("main"), "ZEBRA-7781")
    assert _files(history.settings.index_path("main"))[DELETED] == "deleted"  # the live index was left alone
    with pytest.raises(BadRequest, match="--into"):
        replay(history.settings, "main", until=Until(seq=history.then_seq))


def _deleted_line(history: History) -> str:
    return next(line for line in history.deleted_text.splitlines() if len(line) > 30).lstrip("-# ")


def test_as_of_searches_the_past_over_the_cli_and_http(history: History) -> None:
    needle = _deleted_line(history)
    live = json.loads(cli(history.env, "search", needle, "--json", "--min-score", "0").stdout)
    assert DELETED not in {r["path"] for r in live["results"]}
    past = json.loads(cli(history.env, "search", needle, "--json", "--min-score", "0", "--as-of",
                          history.then).stdout)
    assert past["results"][0]["path"] == DELETED
    with TestClient(create_app(history.settings)) as client:
        body = client.post("/v1/agents/main/memory_search",
                           json={"query": "ZEBRA-7781", "asOf": history.then, "minScore": 0}).json()
        assert body["results"] and all("ZEBRA-7781" not in r["snippet"] for r in body["results"])
        body = client.post("/v1/agents/main/memory_search", json={"query": "ZEBRA-7781", "minScore": 0}).json()
        assert "ZEBRA-7781" in body["results"][0]["snippet"]
        bad = client.post("/v1/agents/main/memory_search", json={"query": "x", "asOf": "last tuesday"})
        assert bad.status_code == 400 and "ISO" in bad.json()["error"]["message"]


def test_as_of_over_mcp(history: History) -> None:
    params = StdioServerParameters(command=sys.executable, cwd=str(REPO), env=history.env,
                                   args=["-m", "memoryd.services.cli", "mcp", "--agent", "main"])
    needle = _deleted_line(history)

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            past = await client.call_tool("memory_search", {"query": needle, "asOf": history.then, "minScore": 0})
            assert not past.is_error and past.structured_content["results"][0]["path"] == DELETED
            now = await client.call_tool("memory_search", {"query": needle, "minScore": 0})
            assert DELETED not in {r["path"] for r in now.structured_content["results"]}

    anyio.run(main)


def test_replay_without_into_swaps_the_live_index_atomically(history: History) -> None:
    index = history.settings.index_path("main")
    before = answers(history.settings)
    inode = index.stat().st_ino
    old = IndexReader(index)  # a reader in the middle of reading the old file keeps its view
    old.conn.execute("BEGIN")
    chunks = old.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    out = json.loads(cli(history.env, "replay", "--agent", "main", "--json").stdout)
    assert out["swapped"] is True and out["chunksEmbedded"] == 0
    assert index.stat().st_ino != inode and answers(history.settings) == before
    assert old.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == chunks > 0
    old.conn.execute("ROLLBACK")
    old.close()


def test_reembed_after_a_model_change(tmp_path: Path, redis_url: str) -> None:
    (tmp_path / "workspace" / "memory").mkdir(parents=True)
    (tmp_path / "workspace" / "memory" / "2026-01-05.md").write_text(
        "".join(f"- decision {i}: moved service {i} to the new cluster\n" for i in range(80)))
    env = dict(os.environ, MEMORYD_CONFIG=str(_config(tmp_path, redis_url, "none")))
    cli(env, "index", "--agent", "main", "--json")  # logged without vectors
    config = _config(tmp_path, redis_url, "hash")  # the model changed
    settings = load_settings(config)
    into = tmp_path / "re.sqlite"
    with pytest.raises(BadRequest, match="--reembed"):
        replay(settings, "main", into=into)
    out = json.loads(cli(dict(os.environ, MEMORYD_CONFIG=str(config)), "replay", "--agent", "main", "--into",
                         str(into), "--reembed", "--json").stdout)
    reader = IndexReader(into)
    chunks = reader.conn.execute("SELECT count(DISTINCT hash) FROM chunks").fetchone()[0]
    assert out["chunksEmbedded"] == chunks > 0 and reader.missing_vectors() == 0
    reader.close()
    again = replay(settings, "main", into=into, reembed=True)
    assert again["chunks_embedded"] == 0 and again["chunks_cached"] == chunks  # stored once, by hash
    assert Until.parse("2026-03-03").at > Until.parse("2026-03-02T23:59:59").at  # a date means its whole day
