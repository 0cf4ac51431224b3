"""The index's schema: numbered migrations (SPEC §4 and what later work added), applied in order.

``PRAGMA user_version`` holds how many have run; :func:`migrate` runs the rest, each in
its own transaction, and :func:`create` builds a new index under a temp name and renames it
into place, so a reader never opens a file without its tables. The writer (store.py)
calls both when it opens an index; readers never migrate.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.shared.index import sqlitedb
from memoryd.shared.index.content import VectorStore

#: Each a script (split at ``;``), statements to run one by one, or a function of (connection, index path).
MIGRATIONS: list[str | tuple[str, ...] | Callable[[Any, Path], None]] = [
    # 1: the schema of SPEC §4.
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE files (
        path TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        hash TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime REAL NOT NULL,
        seq INTEGER NOT NULL,
        status TEXT NOT NULL,          -- indexed | skipped | deleted (a tombstone keeps its seq)
        error TEXT,
        chunks INTEGER NOT NULL DEFAULT 0,
        indexed_at REAL NOT NULL
    );
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        path TEXT NOT NULL,
        source TEXT NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        hash TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        text TEXT NOT NULL,
        has_vector INTEGER NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL
    );
    CREATE INDEX chunks_by_path ON chunks(path);
    CREATE INDEX chunks_by_hash ON chunks(hash);
    CREATE INDEX chunks_missing_vector ON chunks(has_vector) WHERE has_vector = 0;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(text, tokenize = 'unicode61 remove_diacritics 2');
    CREATE TABLE chunk_vectors (
        rowid INTEGER PRIMARY KEY AUTOINCREMENT,
        chunk_id INTEGER NOT NULL,
        window INTEGER NOT NULL
    );
    CREATE INDEX chunk_vectors_by_chunk ON chunk_vectors(chunk_id);
    CREATE TABLE embedding_cache (
        embedder TEXT NOT NULL,
        hash TEXT NOT NULL,
        windows INTEGER NOT NULL,
        dims INTEGER NOT NULL,
        vector BLOB NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (embedder, hash)
    );
    """,
    # 2: which vector rows each generation deleted, so the vector file's readers and its writer
    # catch up in proportion to a change (shared/index/indexvectors.py); pruned once the file has them.
    """
    CREATE TABLE vector_deletions (generation INTEGER NOT NULL, vector INTEGER NOT NULL);
    CREATE INDEX vector_deletions_by_generation ON vector_deletions(generation);
    CREATE INDEX vector_deletions_by_vector ON vector_deletions(vector);
    """,
    # 3: the embedding cache is one per model for the whole installation (content.VectorStore,
    # <state>/cache/<embedder>.sqlite): this index's rows move there, its table goes.
    lambda conn, path: _move_cache(conn, path),
    # 4: what a search would otherwise scan the index for — the chunk count (IDF weights) kept
    # in ``meta`` by triggers, and a trigram index of file paths for identifiers in a path.
    # Statements one by one: trigger bodies hold ``;``.
    (
        "INSERT OR REPLACE INTO meta(key, value) SELECT 'chunks', count(*) FROM chunks",
        "CREATE TRIGGER chunks_counted_in AFTER INSERT ON chunks BEGIN "
        "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'chunks'; END",
        "CREATE TRIGGER chunks_counted_out AFTER DELETE ON chunks BEGIN "
        "UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE key = 'chunks'; END",
        "CREATE VIRTUAL TABLE file_paths USING fts5(path, tokenize = 'trigram')",
        "INSERT INTO file_paths(rowid, path) SELECT rowid, path FROM files",
        "CREATE TRIGGER file_paths_in AFTER INSERT ON files BEGIN "
        "INSERT INTO file_paths(rowid, path) VALUES (new.rowid, new.path); END",
        "CREATE TRIGGER file_paths_out AFTER DELETE ON files BEGIN DELETE FROM file_paths WHERE rowid = old.rowid; "
        "END",
    ),
    # 5: the lines of its chunk each window vector was made from (shared/embed/windowlines.py), so a
    # search knows which lines of a result its question is nearest to; NULL for rows written before.
    """
    ALTER TABLE chunk_vectors ADD COLUMN first_line INTEGER;
    ALTER TABLE chunk_vectors ADD COLUMN last_line INTEGER;
    """,
]


def _move_cache(conn: Any, path: Path) -> None:
    """Copy the index's ``embedding_cache`` rows into the shared cache of their model, then drop
    it. An index lives at ``<state>/memory/<agent>.sqlite``, so the state dir is two up."""
    rows = conn.execute("SELECT embedder, hash, windows, dims, vector FROM embedding_cache").fetchall()
    by_embedder: dict[str, dict[str, np.ndarray]] = {}
    for embedder, h, windows, dims, blob in rows:
        by_embedder.setdefault(embedder, {})[h] = np.frombuffer(blob, dtype=np.float32).reshape(windows, dims)
    for embedder, vectors in by_embedder.items():
        store = VectorStore(Path(path).resolve().parent.parent, embedder)
        try:
            store.put(vectors)
        finally:
            store.close()
    conn.execute("DROP TABLE embedding_cache")


def migrate(conn: Any, path: Path) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if callable(script):
                script(conn, path)
            else:
                for statement in script.split(";") if isinstance(script, str) else script:
                    if statement.strip():
                        conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def create(path: Path) -> None:
    """A new index appears whole: built under a temp name, migrated, then renamed into place,
    so a reader never opens a file without its tables."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    conn = sqlitedb.connect(tmp)
    try:
        migrate(conn, path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for side in ("-wal", "-shm"):
        Path(f"{tmp}{side}").unlink(missing_ok=True)
    if path.exists():  # another writer won the race: use its file
        tmp.unlink()
    else:
        os.replace(tmp, path)
