"""The indexing pipeline end to end: a real redis-server, real watcher and worker processes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.openai_stub import OpenAIStub
from tests.pipeline_harness import Pipeline, snapshot, wait_until

pytestmark = pytest.mark.integration

AGENT = "main"


@pytest.fixture
def pipeline(workspace: Path, make_settings, redis_url: str, tmp_path: Path):
    settings, config = make_settings(workspace, redis=redis_url, debounce_ms=300)
    p = Pipeline(config, redis_url, settings, tmp_path)
    yield p
    p.stop()


def _live(p: Pipeline) -> None:
    """Start every service and wait until the watcher has done its first reconcile."""
    p.start()
    wait_until(lambda: p.conn.hget(p.bus.key("reconciled"), AGENT), timeout=60)


def test_idle_workers_wait_for_jobs_without_read_timeouts(pipeline: Pipeline, workspace: Path) -> None:
    """redis-py 8 opens a connection with a 5 s read timeout and RQ blocks in BLPOP for minutes:
    an idle indexer (its log-recovery duty on Redis every second) logged "could not connect to
    Redis instance" every few seconds and backed off with jobs waiting (shared/runtime/worker.py
    fit_read_timeout)."""
    _live(pipeline)
    time.sleep(15)  # three of the old 5 s timeouts
    (workspace / "memory" / "2026-02-02.md").write_text("- The quokka census starts in March.\n")
    assert wait_until(lambda: pipeline.keyword(AGENT, "quokka")) == ["memory/2026-02-02.md"]
    assert "could not connect to Redis" not in pipeline.logs()


def test_new_file_is_searchable(pipeline: Pipeline, workspace: Path) -> None:
    _live(pipeline)
    (workspace / "memory" / "2026-01-20.md").write_text(
        "## API Discussion\nDecided to use REST over GraphQL for simplicity.\n")
    assert wait_until(lambda: pipeline.keyword(AGENT, "GraphQL")) == ["memory/2026-01-20.md"]
    assert pipeline.chunks(AGENT, "memory/2026-01-20.md")[0][1:3] == (1, 2)


def test_edit_replaces_only_that_files_chunks(pipeline: Pipeline, workspace: Path) -> None:
    other = workspace / "MEMORY.md"
    other.write_text("# Preferences\n- Tabs over spaces.\n")
    daily = workspace / "memory" / "2026-01-21.md"
    daily.write_text("Met Alice about the billing migration.\n")
    _live(pipeline)
    wait_until(lambda: pipeline.keyword(AGENT, "billing") and pipeline.keyword(AGENT, "Tabs"))
    before_other = pipeline.chunks(AGENT, "MEMORY.md")
    daily.write_text("Met Bob about the search rollout.\n")
    wait_until(lambda: pipeline.keyword(AGENT, "rollout"))
    assert pipeline.keyword(AGENT, "billing") == []
    assert pipeline.chunks(AGENT, "MEMORY.md") == before_other  # same rows, same ids


def test_delete_and_rename(pipeline: Pipeline, workspace: Path) -> None:
    a = workspace / "memory" / "a.md"
    b = workspace / "memory" / "b.md"
    a.write_text("the zebra protocol\n")
    (workspace / "memory" / "c.md").write_text("the yak protocol\n")
    _live(pipeline)
    wait_until(lambda: pipeline.keyword(AGENT, "zebra") and pipeline.keyword(AGENT, "yak"))
    a.rename(b)
    assert wait_until(lambda: pipeline.keyword(AGENT, "zebra") == ["memory/b.md"])
    (workspace / "memory" / "c.md").unlink()
    wait_until(lambda: not pipeline.keyword(AGENT, "yak"))
    assert pipeline.chunks(AGENT, "memory/a.md") == []
    assert pipeline.query(AGENT, "SELECT status FROM files WHERE path = 'memory/c.md'") == [("deleted",)]


def test_atomic_rename_save_is_seen(pipeline: Pipeline, workspace: Path) -> None:
    target = workspace / "MEMORY.md"
    target.write_text("first version\n")
    _live(pipeline)
    wait_until(lambda: pipeline.keyword(AGENT, "first"))
    tmp = workspace / ".MEMORY.md.swp"  # how editors save: write a temp file, rename it over
    tmp.write_text("second version with kiwis\n")
    os.replace(tmp, target)
    assert wait_until(lambda: pipeline.keyword(AGENT, "kiwis")) == ["MEMORY.md"]
    assert pipeline.keyword(AGENT, "first") == []


def test_hundred_rapid_writes_cause_one_reindex(pipeline: Pipeline, workspace: Path) -> None:
    _live(pipeline)
    path = workspace / "memory" / "burst.md"
    for i in range(100):
        with open(path, "a") as handle:
            handle.write(f"line {i} of the burst\n")
    wait_until(lambda: pipeline.keyword(AGENT, "99"))
    wait_until(pipeline.drained)
    assert len(pipeline.events(AGENT, "file.changed", "memory/burst.md")) == 1
    assert len(pipeline.events(AGENT, "index.applied", "memory/burst.md")) == 1
    assert len(pipeline.chunks(AGENT, "memory/burst.md")) >= 1


def _index(p: Pipeline, workspace: Path) -> dict:
    out = p.cli("index", "--agent", AGENT, "--workspace", str(workspace), "--wait", "--json")
    return json.loads(out.stdout)


def test_reindexing_unchanged_workspace_embeds_nothing(pipeline: Pipeline, workspace: Path) -> None:
    for day in range(1, 6):
        (workspace / "memory" / f"2026-02-0{day}.md").write_text(
            "\n".join(f"day {day} note {i}: shipped feature {i}" for i in range(120)))
    first = _index(pipeline, workspace)
    assert first["files"] == 5 and first["chunksEmbedded"] == first["chunks"] > 5
    second = _index(pipeline, workspace)
    assert second["chunksEmbedded"] == 0
    assert second["chunksCached"] == first["chunks"]


def test_appending_a_line_to_a_long_daily_log_embeds_at_most_two_chunks(pipeline: Pipeline, workspace: Path) -> None:
    log = workspace / "memory" / "2026-03-01.md"
    log.write_text("".join(f"- 09:{i % 60:02d} worked on ticket OPS-{i} with the team\n" for i in range(2000)))
    first = _index(pipeline, workspace)
    assert first["chunks"] > 50
    with open(log, "a") as handle:
        handle.write("- 18:00 decided to ship on Friday\n")
    second = _index(pipeline, workspace)
    assert 1 <= second["chunksEmbedded"] <= 2


def test_bad_files_are_reported_and_skipped(pipeline: Pipeline, workspace: Path) -> None:
    mem = workspace / "memory"
    (mem / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR")
    (mem / "latin1.md").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    with open(mem / "huge.md", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)
        handle.seek(0)
        handle.write(b"# not really\n")
    _live(pipeline)
    (mem / "good.md").write_text("the pipeline kept going\n")
    wait_until(lambda: pipeline.keyword(AGENT, "kept going"))
    status = json.loads(pipeline.cli("status", "--json").stdout)
    skipped = {s["path"]: s["reason"] for s in status["agents"][AGENT]["index"]["skipped"]}
    assert set(skipped) == {"memory/binary.md", "memory/latin1.md", "memory/huge.md"}
    assert "binary" in skipped["memory/binary.md"]
    assert "UTF-8" in skipped["memory/latin1.md"]
    assert "maxFileBytes" in skipped["memory/huge.md"]


def test_ignores_non_memory_hidden_and_symlinked_files(pipeline: Pipeline, workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("secret penguin outside the workspace\n")
    (workspace / "notes.txt").write_text("penguin in a txt\n")
    (workspace / "README.md").write_text("penguin in a root file that is not memory\n")
    (workspace / "memory" / ".hidden").mkdir()
    (workspace / "memory" / ".hidden" / "x.md").write_text("penguin hidden\n")
    (workspace / "memory" / "link.md").symlink_to(outside)
    (workspace / "memory" / "real.md").write_text("a walrus\n")
    _live(pipeline)
    wait_until(lambda: pipeline.keyword(AGENT, "walrus"))
    wait_until(pipeline.drained)
    assert pipeline.keyword(AGENT, "penguin") == []
    assert [r[0] for r in pipeline.query(AGENT, "SELECT path FROM files")] == ["memory/real.md"]


def test_kill9_embedder_and_indexer_then_restart_equals_fresh_rebuild(
    workspace: Path, make_settings, redis_url: str, tmp_path: Path
) -> None:
    from rq.registry import StartedJobRegistry

    with OpenAIStub() as stub:
        stub.set(delay=0.5)  # each embedding call takes a while: the embedder dies mid-batch
        search = {"model": "stub-embed", "remote": {"baseUrl": stub.base_url, "maxRetries": 0}}
        settings, config = make_settings(workspace, redis=redis_url, provider="openai-compatible", **search)
        p = Pipeline(config, redis_url, settings, tmp_path)
        try:
            for i in range(120):
                (workspace / "memory" / f"note-{i:03d}.md").write_text(
                    "\n".join(f"note {i} fact {j}: the {j}th detail of project {i}" for j in range(40)))
            # a reconcile's files; the index jobs go to the agent's owner, this machine's node
            embed_q, index_q = p.bus.bulk["embed"], p.bus.node_lanes(settings.node)[1]
            p.start()
            wait_until(lambda: StartedJobRegistry(queue=embed_q).count > 0, timeout=60, interval=0.005)
            p.kill9("embed")
            assert StartedJobRegistry(queue=embed_q).count == 1  # the batch it died in
            p.start("embed")
            wait_until(lambda: StartedJobRegistry(queue=index_q).count > 0 or index_q.count > 0,
                       timeout=60, interval=0.002)
            p.kill9("index")
            p.start("index")
            wait_until(lambda: p.drained() and p.query(
                AGENT, "SELECT count(*) FROM files WHERE status = 'indexed'")[0][0] == 120, timeout=240)
            live = snapshot(settings, AGENT)
        finally:
            p.stop()
        fresh_settings, _ = make_settings(workspace, provider="openai-compatible", **search)
        fresh_settings.memoryd.state_dir = str(tmp_path / "fresh-state")
        stub.set(delay=0)
        from inline_index import index_now

        index_now(fresh_settings, AGENT)
        assert live == snapshot(fresh_settings, AGENT), p.logs()


def test_keyword_search_survives_failing_providers_and_vectors_arrive_later(
    workspace: Path, make_settings, redis_url: str, tmp_path: Path
) -> None:
    with OpenAIStub() as stub:
        stub.set(embeddings="500")
        search = {"model": "stub-embed", "remote": {"baseUrl": stub.base_url, "maxRetries": 1, "cooldownSeconds": 1}}
        settings, config = make_settings(workspace, redis=redis_url, provider="openai-compatible", **search)
        p = Pipeline(config, redis_url, settings, tmp_path)
        try:
            _live(p)
            (workspace / "memory" / "2026-04-01.md").write_text("The outage code is E-503 on the billing API.\n")
            assert wait_until(lambda: p.keyword(AGENT, "E-503")) == ["memory/2026-04-01.md"]
            assert [r[-1] for r in p.chunks(AGENT, "memory/2026-04-01.md")] == [0]  # vector missing
            # the texts land ahead of the embed job (text_job); its failure is on record once it ends
            status = wait_until(lambda: (s := json.loads(p.cli("status", "--json").stdout))["queues"]
                                ["providerErrors"].get(AGENT) and s, what="the provider's error in status")
            assert status["agents"][AGENT]["index"]["chunksWithoutVectors"] == 1
            assert "gave up after 2 tries" in status["queues"]["providerErrors"][AGENT]["error"]
            stub.set(embeddings="ok")
            wait_until(lambda: [r[-1] for r in p.chunks(AGENT, "memory/2026-04-01.md")] == [1], timeout=60)
            assert p.query(AGENT, "SELECT count(*) FROM chunk_vectors")[0][0] == 1
            wait_until(lambda: AGENT not in json.loads(p.cli("status", "--json").stdout)["queues"]["providerErrors"])
        finally:
            p.stop()


def test_a_live_edit_is_keyword_searchable_while_the_embedder_hangs_and_its_vectors_follow(
    workspace: Path, make_settings, redis_url: str, tmp_path: Path
) -> None:
    """The chunker sends a live edit's texts straight to the indexer: with the provider hung (and
    a 60 s client timeout, so the embed job cannot end for a minute) the note is found by keyword
    within 15 s, its rows without vectors and its file row still at the last logged version; when
    the provider answers, the ``chunks.embedded`` lands on the same rows with their vectors."""
    with OpenAIStub() as stub:
        search = {"model": "stub-embed", "remote": {"baseUrl": stub.base_url, "maxRetries": 0, "timeoutSeconds": 60}}
        settings, config = make_settings(workspace, redis=redis_url, provider="openai-compatible", **search)
        p = Pipeline(config, redis_url, settings, tmp_path)
        try:
            _live(p)
            stub.set(embeddings="hang")
            path = "memory/2026-05-01.md"
            (workspace / path).write_text("- The standby region is eu-north-7 since the audit.\n")
            assert wait_until(lambda: p.keyword(AGENT, "eu-north-7"), timeout=15,
                              what="the note's text rows while the embedder hangs") == [path], p.logs()
            from rq.registry import StartedJobRegistry

            wait_until(lambda: StartedJobRegistry(queue=p.bus.queues["embed"]).count == 1,
                       what="the embed job of the note, hung on the provider")
            rows = p.chunks(AGENT, path)
            assert [r[-1] for r in rows] == [0]  # vectors still to come
            assert p.query(AGENT, "SELECT seq FROM files WHERE path = ?", (path,)) == [(0,)]
            assert p.events(AGENT, "chunks.embedded", path) == []  # nothing logged for the texts
            stub.set(embeddings="ok")
            wait_until(lambda: [r[-1] for r in p.chunks(AGENT, path)] == [1], timeout=60,
                       what="the vectors of the note once the provider answers")
            assert p.chunks(AGENT, path)[0][0] == rows[0][0]  # the same row gained its vector
            [embedded] = p.events(AGENT, "chunks.embedded", path)
            assert p.query(AGENT, "SELECT seq FROM files WHERE path = ?", (path,)) == [(embedded.seq,)]
        finally:
            p.stop()
