"""One embedding cache per model, shared by every agent: the same text for another agent costs no
provider call; an index's old per-index cache moves into it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from inline_index import index_now

from memoryd.shared.config.loader import load_settings
from memoryd.shared.index import schema, sqlitedb
from memoryd.shared.index.content import VectorStore
from memoryd.shared.index.store import IndexWriter

NOTE = "\n".join(f"- decision {i}: the deploy freeze starts on Friday, owner Priya, ticket OPS-{i}" for i in range(60))


def test_the_same_note_for_a_second_agent_costs_no_provider_call(tmp_path: Path) -> None:
    agents = []
    for name in ("alpha", "beta"):
        workspace = tmp_path / name
        (workspace / "memory").mkdir(parents=True)
        (workspace / "memory" / "2026-02-01.md").write_text(NOTE)
        agents.append({"id": name, "workspace": str(workspace)})
    (tmp_path / "beta" / "memory" / "2026-02-02.md").write_text("- only beta knows the blue laundry basket\n")
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "hash"}}, "list": agents},
                                  "memoryd": {"stateDir": str(tmp_path / "state")}}))
    settings = load_settings(config, state_dir=tmp_path / "state")
    first = index_now(settings, "alpha")
    assert first["chunks_embedded"] == first["chunks"] > 0
    second = index_now(settings, "beta")
    assert second["chunks"] == first["chunks"] + 1
    assert second["chunks_embedded"] == 1  # only beta's own note went to the provider
    assert second["chunks_cached"] == first["chunks"]
    cache_files = list((tmp_path / "state" / "cache").glob("*.sqlite"))
    assert len(cache_files) == 1  # one per model, not per agent


def test_an_index_per_index_cache_moves_to_the_shared_one(tmp_path: Path) -> None:
    index = tmp_path / "state" / "memory" / "main.sqlite"
    index.parent.mkdir(parents=True)
    conn = sqlitedb.connect(index)
    old = [script for script in schema.MIGRATIONS if isinstance(script, str)][:2]  # an index of before
    for script in old:
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    vector = np.arange(8, dtype=np.float32).reshape(2, 4)
    conn.execute("INSERT INTO embedding_cache VALUES ('hash:m:4', 'abc', 2, 4, ?, 0)", (vector.tobytes(),))
    conn.close()
    IndexWriter(index).close()
    shared = VectorStore(tmp_path / "state", "hash:m:4")
    assert np.array_equal(shared.get(["abc"])["abc"], vector)
    shared.close()
    conn = sqlitedb.connect(index, readonly=True)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "embedding_cache" not in tables
    conn.close()
