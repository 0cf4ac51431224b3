"""Indexer, store, providers and configuration without worker processes (real SQLite files)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inline_index import index_now

from memoryd.shared.config.loader import load_settings
from memoryd.shared.embed.providers import resolve
from memoryd.shared.events import ChunkData, ChunksEmbedded, FileChunked, FileDeleted, VectorData
from memoryd.shared.exceptions import ConfigError
from memoryd.shared.index.apply import apply, apply_text_first, fingerprint, open_writer, outdated
from memoryd.shared.index.store import IndexReader
from memoryd.shared.rebuild.sidebyside import rebuild
from tests.openai_stub import OpenAIStub


def _embedded(path: str, seq: int, text: str, embedder: str, dims: int = 4) -> ChunksEmbedded:
    chunk = ChunkData(hash=f"h-{text}", start_line=1, end_line=1, tokens=3, text=text)
    return ChunksEmbedded(agent="main", path=path, seq=seq, source="memory", sha256=f"s-{text}", size=1, mtime=0,
                          chunker="c", chunks=[chunk], embedder=embedder, provider="hash", model="m",
                          vectors=[VectorData.pack(chunk.hash, np.ones(dims, np.float32) / np.sqrt(dims))],
                          cached=0, embedded=1)


def _chunked(event: ChunksEmbedded) -> FileChunked:
    return FileChunked(**event.model_dump(include=set(FileChunked.model_fields) - {"type"}))


def test_text_first_rows_keep_the_logged_version_and_never_undo_vectors(workspace: Path, make_settings) -> None:
    """A live edit's texts land before its vectors without claiming its sequence number; late,
    after the ``chunks.embedded`` of the same version, they change nothing."""
    settings, _ = make_settings(workspace)
    writer = open_writer(settings, "main")
    embedder = writer.meta("embedder")
    apply(writer, _embedded("memory/a.md", 10, "first text", embedder))
    edit = _embedded("memory/a.md", 20, "edited text", embedder)
    assert apply_text_first(writer, _chunked(edit))
    assert writer.conn.execute("SELECT text, has_vector FROM chunks").fetchall() == [("edited text", 0)]
    assert writer.file("memory/a.md").seq == 10  # the index holds seq 20 only once it is logged and applied
    assert apply(writer, edit).action == "replaced"
    assert writer.conn.execute("SELECT text, has_vector FROM chunks").fetchall() == [("edited text", 1)]
    assert not apply_text_first(writer, _chunked(edit))  # late: the vectors came first
    assert writer.conn.execute("SELECT has_vector FROM chunks").fetchall() == [(1,)]
    new = _embedded("memory/b.md", 30, "brand new", embedder)
    assert apply_text_first(writer, _chunked(new))
    assert (writer.file("memory/b.md").seq, writer.file("memory/b.md").status) == (0, "indexed")


def test_stale_events_never_overwrite_newer_ones(workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace)
    writer = open_writer(settings, "main")
    embedder = writer.meta("embedder")
    assert apply(writer, _embedded("memory/a.md", 10, "new text", embedder)).action == "replaced"
    assert apply(writer, _embedded("memory/a.md", 5, "old text", embedder)).action == "stale"
    assert [r[0] for r in writer.conn.execute("SELECT text FROM chunks")] == ["new text"]
    assert apply(writer, FileDeleted(agent="main", path="memory/a.md", seq=12)).action == "deleted"
    assert apply(writer, _embedded("memory/a.md", 11, "resurrected", embedder)).action == "stale"
    assert writer.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
    # the same event twice leaves the index as it was (idempotent jobs)
    again = _embedded("memory/b.md", 20, "twice", embedder)
    apply(writer, again)
    apply(writer, again)
    assert writer.conn.execute("SELECT count(*) FROM chunks WHERE path = 'memory/b.md'").fetchone()[0] == 1
    assert writer.conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0] == 1


def test_vectors_of_another_model_are_never_mixed_in(workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace)
    writer = open_writer(settings, "main")
    result = apply(writer, _embedded("memory/a.md", 1, "text", "other:model"))
    assert result.action == "replaced" and result.vectors_missing == 1
    assert writer.conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0] == 0


def test_fingerprint_change_rebuilds_from_the_log_into_a_new_file_reusing_stored_vectors(
        workspace: Path, make_settings) -> None:
    (workspace / "MEMORY.md").write_text("# Short\n- one small fact\n")
    (workspace / "memory" / "2026-01-01.md").write_text("\n".join(f"entry {i} about things" for i in range(300)))
    settings, _ = make_settings(workspace)
    first = index_now(settings, "main")
    old_reader = IndexReader(settings.index_path("main"))
    old_fp = old_reader.meta("fingerprint")
    smaller, _ = make_settings(workspace, chunking={"tokens": 200, "overlap": 40})
    assert fingerprint(smaller, "main") != old_fp
    writer = open_writer(smaller, "main")
    assert outdated(writer, smaller, "main")  # the old index is kept (and answers) until the rebuild
    writer.close()
    (workspace / "memory" / "2026-01-01.md").rename(workspace / "elsewhere.md")  # the log is enough
    stats = rebuild(smaller, "main")
    assert stats["rebuilt"] and stats["files_rechunked"] == 2  # text rebuilt from the logged chunks
    assert stats["chunks_cached"] >= 1  # MEMORY.md's chunk is the same text: its stored vector was reused
    assert stats["chunks_embedded"] >= 1 and stats["vectors_missing"] == 0
    new = IndexReader(smaller.index_path("main"))
    assert new.meta("fingerprint") == fingerprint(smaller, "main")
    assert new.counts()["chunks"] > first["chunks"]
    assert new.conn.execute("SELECT count(*) FROM files WHERE path = 'memory/2026-01-01.md'").fetchone()[0] == 1
    assert old_reader.meta("fingerprint") == old_fp  # a reader of the old file keeps working
    writer = open_writer(smaller, "main")
    assert not outdated(writer, smaller, "main")  # fingerprint matches now: no second rebuild
    writer.close()
    old_reader.close()
    new.close()


def test_local_provider_finds_text_at_the_end_of_a_long_chunk(workspace: Path, make_settings) -> None:
    """MiniLM reads 256 pieces; a 400-token chunk is longer. The tail is embedded in its own window."""
    settings, _ = make_settings(workspace, provider="local")
    (provider,) = resolve(settings.agent("main").memory_search)
    filler = " ".join(f"The quarterly budget review covered line item {i} and vendor invoices." for i in range(30))
    tail = "Our cat Biscuit always sleeps inside the blue laundry basket."
    chunk = f"{filler} {tail}"
    windows = provider.embed_chunks([chunk])[0]
    assert windows.shape[0] >= 2
    query = provider.embed_query("where does the cat Biscuit sleep?")
    best, first_window = float((windows @ query).max()), float(windows[0] @ query)
    assert best > first_window + 0.15
    distractors = provider.embed_chunks([f"{filler} The printer on floor {i} jams often." for i in range(5)])
    assert all(best > float((d @ query).max()) for d in distractors)


def test_a_query_is_read_whole_whatever_the_chunk_windows(workspace: Path, make_settings) -> None:
    """Chunks are cut into 32-piece windows here; a 60-piece question is still embedded whole."""
    narrow, _ = make_settings(workspace, provider="local", local={"windowPieces": 32, "windowOverlap": 8})
    (provider,) = resolve(narrow.agent("main").memory_search)
    question = ("which of the vendors that sent invoices for the quarterly budget review last spring "
                "also asked about the blue laundry basket that our cat Biscuit sleeps in every night?")
    assert len(provider.windows(question)) > 1  # as a chunk, it would be three windows
    pieces = provider.tokenizer.encode(question, add_special_tokens=False).ids
    model, _ = provider.query_session  # the questions' model
    whole = provider._run(model, [[101, *pieces, 102]], 1)[0]  # [CLS] the whole question [SEP]
    first = provider._run(model, provider.windows(question)[:1], 1)[0]
    query = provider.embed_query(question)
    assert float(query @ whole) > 0.999 and float(query @ first) < 0.99


def test_fallback_is_only_to_providers_of_the_same_vector_space(workspace: Path, make_settings) -> None:
    with OpenAIStub() as stub:
        settings, _ = make_settings(workspace, provider="openai-compatible", fallback=["local"], model="m",
                                    remote={"baseUrl": stub.base_url})
        chain = resolve(settings.agent("main").memory_search)
        assert [p.name for p in chain] == ["openai-compatible"]


def test_invalid_configuration_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"chunking": {"tokens": 100,
                                                                                      "overlap": 200}}}}}))
    with pytest.raises(ConfigError, match="chunking.overlap"):
        load_settings(bad)
    bad.write_text(json.dumps({"agents": {"defaults": {"memorySearh": {}}}}))
    with pytest.raises(ConfigError, match="memorySearh"):
        load_settings(bad)
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_settings(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.json")


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "local"}}}}))
    settings = load_settings(cfg, environ={"MEMORYD_PROVIDER": "hash", "MEMORYD_STATE_DIR": str(tmp_path / "s"),
                                           "MEMORYD_DEBOUNCE_MS": "250"})
    search = settings.agent("main").memory_search
    assert search.provider == "hash" and search.sync.watch_debounce_ms == 250
    assert settings.index_path("main") == tmp_path / "s" / "memory" / "main.sqlite"


def test_doctor_reports_sqlite_driver_tokenizer_and_provider(workspace: Path, make_settings, redis_url: str) -> None:
    import subprocess
    import sys

    _, config = make_settings(workspace, redis=redis_url)
    out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "doctor", "--json"],
                         capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    checks = {c["check"]: c for c in report["checks"]}
    assert out.returncode == 0 and report["ok"]
    assert "sqlite-vec v0." in checks["sqlite-vec"]["detail"]
    assert "pysqlite3" in checks["sqlite-vec"]["detail"] or "stdlib" in checks["sqlite-vec"]["detail"]
    assert "cl100k_base" in checks["tokenizer"]["detail"]
    assert checks["provider"]["detail"].startswith("hash")
    assert redis_url in checks["redis"]["detail"]


@pytest.mark.parametrize(("query_model", "said"), [("int8", "questions by its int8 model"),
                                                   ("float", "questions by its float model")])
def test_doctor_says_which_model_embeds_the_questions(workspace: Path, make_settings, redis_url: str,
                                                      query_model: str, said: str) -> None:
    import subprocess
    import sys

    _, config = make_settings(workspace, redis=redis_url, provider="local", local={"queryModel": query_model})
    out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "doctor", "--json"],
                         capture_output=True, text=True, timeout=120)
    provider = next(c for c in json.loads(out.stdout)["checks"] if c["check"] == "provider")
    assert provider["ok"] and provider["detail"].startswith("local (all-MiniLM-L6-v2-int8) answered")
    assert said in provider["detail"]


def test_doctor_names_the_fix_when_redis_is_unreachable(workspace: Path, make_settings) -> None:
    import subprocess
    import sys

    _, config = make_settings(workspace, redis="redis://127.0.0.1:1/0")
    out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "doctor", "--json"],
                         capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    redis_check = next(c for c in report["checks"] if c["check"] == "redis")
    assert out.returncode == 1 and not redis_check["ok"]
    assert "REDIS_URL" in redis_check["detail"]  # the message says what to do


def test_a_long_lived_indexer_reopens_an_index_another_process_swapped(workspace: Path, make_settings) -> None:
    from memoryd.services.pipeline.indexer import _writer
    from memoryd.shared.runtime.worker import WorkerContext

    (workspace / "MEMORY.md").write_text("- a fact\n")
    settings, _ = make_settings(workspace)
    ctx = WorkerContext(settings=settings)
    first = _writer(ctx, "main")
    assert _writer(ctx, "main") is first  # kept open between jobs
    rebuild(settings, "main")  # what another process's rebuild does: a new file swapped in
    assert first.replaced()
    second = _writer(ctx, "main")
    assert second is not first and not second.replaced()
    embedder = second.meta("embedder")
    apply(second, _embedded("memory/new.md", 99, "written after the swap", embedder, dims=256))
    reader = IndexReader(settings.index_path("main"))
    assert reader.conn.execute("SELECT count(*) FROM chunks WHERE path = 'memory/new.md'").fetchone()[0] == 1
    reader.close()


def test_a_skipped_big_file_records_its_real_sha_so_reconcile_leaves_it_alone(workspace: Path, make_settings) -> None:
    from memoryd.shared.config.workspace import file_sha256

    big = workspace / "memory" / "dump.md"
    big.write_text("x" * 5000)
    settings, _ = make_settings(workspace, sync={"maxFileBytes": 1024, "watchDebounceMs": 200})
    stats = index_now(settings, "main")  # in-process events carry no sha: the chunker must hash the file
    assert stats["files_skipped"] == 1
    reader = IndexReader(settings.index_path("main"))
    assert reader.live_hashes() == {"memory/dump.md": file_sha256(big)}
    assert "maxFileBytes" in reader.skipped()[0]["reason"]
    reader.close()
