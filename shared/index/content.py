"""Content by hash: what the event log points at instead of carrying it.

- :class:`ContentStore` — one agent's chunk texts (by the chunk's sha256, the ``hash`` of
  ``ChunkData``) and chunk lists ("manifests": a file version's chunks as hash + lines +
  tokens, by the sha256 of their packed form) in ``<state>/content/<agent>.sqlite``. A
  manifest may be stored as a delta of the previous manifest of the same path (the
  chunks it shares at the start and at the end, lines shifted), so saving one line in a
  2,000-line daily file stores a few dozen bytes, not the whole list.
- :class:`VectorStore` — one embedding model's vectors by chunk hash, shared by every
  agent: ``<state>/cache/<embedder>.sqlite``. The log's ``chunks.embedded`` events name
  the embedder and which hashes have vectors; the vectors themselves live here.

Both are written before the log record that references them (eventlog.py), so a record
never points at content that is not stored.
"""

from __future__ import annotations

import hashlib
import re
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.shared import defaults as d
from memoryd.shared.index import sqlitedb

_ENTRY = struct.Struct(">32sIIi")  # chunk hash, start line, end line, tokens
_DELTA = struct.Struct(">32sIIi")  # base ref, kept prefix, kept suffix, line shift of the suffix


@dataclass(frozen=True)
class ChunkRef:
    """A chunk as the log records it: its text is in the content store under ``hash``."""

    hash: str
    start_line: int
    end_line: int
    tokens: int


def _connect(path: Path, schema: str) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlitedb.driver().module.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {d.SQLITE_BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    # FULL: a commit is on disk before the log record that points at it is written.
    conn.execute("PRAGMA synchronous = FULL")
    if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                for statement in schema.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("PRAGMA user_version = 1")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return conn


def pack_manifest(chunks: Sequence[ChunkRef]) -> bytes:
    return b"".join(_ENTRY.pack(bytes.fromhex(c.hash), c.start_line, c.end_line, c.tokens) for c in chunks)


def _unpack_entries(body: bytes) -> list[ChunkRef]:
    return [ChunkRef(h.hex(), s, e, t) for h, s, e, t in _ENTRY.iter_unpack(body)]


def manifest_ref(chunks: Sequence[ChunkRef]) -> str:
    """The manifest's name: sha256 of its packed (full) form, whatever form it is stored in."""
    return hashlib.sha256(pack_manifest(chunks)).hexdigest()


def _delta(base: list[ChunkRef], new: list[ChunkRef]) -> tuple[int, int, int, list[ChunkRef]]:
    """(prefix, suffix, shift, middle): ``new`` = base[:prefix] + middle + base[-suffix:] shifted."""
    prefix = 0
    while prefix < min(len(base), len(new)) and base[prefix] == new[prefix]:
        prefix += 1
    shift = (new[-1].end_line - base[-1].end_line) if base and new else 0
    suffix = 0
    while suffix < min(len(base), len(new)) - prefix:
        b, n = base[-1 - suffix], new[-1 - suffix]
        if (b.hash, b.start_line + shift, b.end_line + shift, b.tokens) != (n.hash, n.start_line, n.end_line, n.tokens):
            break
        suffix += 1
    return prefix, suffix, shift, new[prefix:len(new) - suffix]


class ContentStore:
    """One agent's texts and manifests. Thread-safe; one per agent per process."""

    # manifests.base: NULL when body is the whole list, else the ref body is a delta of;
    # depth: how many bases resolving it reads. heads: the last manifest stored per path.
    SCHEMA = """
        CREATE TABLE texts (hash TEXT PRIMARY KEY, text TEXT NOT NULL);
        CREATE TABLE manifests (ref TEXT PRIMARY KEY, base TEXT, depth INTEGER NOT NULL, body BLOB NOT NULL);
        CREATE TABLE heads (path TEXT PRIMARY KEY, ref TEXT NOT NULL)
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = _connect(path, self.SCHEMA)
        self.lock = threading.Lock()
        self._resolved: OrderedDict[str, list[ChunkRef]] = OrderedDict()

    def close(self) -> None:
        self.conn.close()

    def put_files(self, files: Sequence[tuple[str, Sequence[ChunkRef], dict[str, str]]]) -> list[str]:
        """Store file versions' chunk lists (each as a delta of its path's last one when that is
        smaller) and the texts not stored yet, in one transaction. → the lists' refs. Idempotent."""
        lists = [list(chunks) for _, chunks, _ in files]
        refs = [manifest_ref(chunks) for chunks in lists]
        with self.lock:
            known = {r for r in set(refs)
                     if self.conn.execute("SELECT 1 FROM manifests WHERE ref = ?", (r,)).fetchone()}
            if len(known) < len(set(refs)):
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    for (path, _, texts), chunks, ref in zip(files, lists, refs, strict=True):
                        if ref not in known:
                            self._insert(path, chunks, texts, ref)
                            known.add(ref)
                    self.conn.execute("COMMIT")
                except BaseException:
                    self.conn.execute("ROLLBACK")
                    raise
            for chunks, ref in zip(lists, refs, strict=True):
                self._remember(ref, chunks)
        return refs

    def _insert(self, path: str, chunks: list[ChunkRef], texts: dict[str, str], ref: str) -> None:
        head = self.conn.execute("SELECT h.ref, m.depth FROM heads h JOIN manifests m ON m.ref = h.ref "
                                 "WHERE h.path = ?", (path,)).fetchone()
        base, depth, body = None, 0, pack_manifest(chunks)
        if head and head[1] + 1 < d.CONTENT_MAX_DELTA_DEPTH:
            prefix, suffix, shift, middle = _delta(self._manifest(head[0]), chunks)
            delta = _DELTA.pack(bytes.fromhex(head[0]), prefix, suffix, shift) + pack_manifest(middle)
            if len(delta) < len(body):
                base, depth, body = head[0], head[1] + 1, delta
        self.conn.executemany("INSERT OR IGNORE INTO texts(hash, text) VALUES (?, ?)", list(texts.items()))
        self.conn.execute("INSERT OR IGNORE INTO manifests(ref, base, depth, body) VALUES (?,?,?,?)",
                          (ref, base, depth, body))
        self.conn.execute("INSERT OR REPLACE INTO heads(path, ref) VALUES (?, ?)", (path, ref))

    def manifest(self, ref: str) -> list[ChunkRef]:
        with self.lock:
            return self._manifest(ref)

    def _manifest(self, ref: str) -> list[ChunkRef]:
        if ref in self._resolved:
            self._resolved.move_to_end(ref)
            return self._resolved[ref]
        row = self.conn.execute("SELECT base, body FROM manifests WHERE ref = ?", (ref,)).fetchone()
        if row is None:
            raise KeyError(f"manifest {ref} is not in {self.path}: the content store lost it; replay from "
                           "an older checkpoint or rebuild from the files (`memoryd index`)")
        base, body = row
        if base is None:
            chunks = _unpack_entries(body)
        else:
            _, prefix, suffix, shift = _DELTA.unpack_from(body)
            old = self._manifest(base)
            tail = [ChunkRef(c.hash, c.start_line + shift, c.end_line + shift, c.tokens)
                    for c in old[len(old) - suffix:]] if suffix else []
            chunks = old[:prefix] + _unpack_entries(body[_DELTA.size:]) + tail
        self._remember(ref, chunks)
        return chunks

    def _remember(self, ref: str, chunks: list[ChunkRef]) -> None:
        self._resolved[ref] = chunks
        while len(self._resolved) > d.CONTENT_MANIFEST_CACHE:
            self._resolved.popitem(last=False)

    def texts(self, hashes: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(hashes))
        found: dict[str, str] = {}
        with self.lock:
            for start in range(0, len(wanted), 500):
                batch = wanted[start:start + 500]
                marks = ",".join("?" * len(batch))
                found.update(self.conn.execute(f"SELECT hash, text FROM texts WHERE hash IN ({marks})", batch))
        return found

    def bases(self, refs: Iterable[str]) -> set[str]:
        """``refs`` and every manifest they are deltas of (what must be kept to resolve them)."""
        keep: set[str] = set()
        todo = list(refs)
        with self.lock:
            while todo:
                ref = todo.pop()
                if ref in keep:
                    continue
                keep.add(ref)
                row = self.conn.execute("SELECT base FROM manifests WHERE ref = ?", (ref,)).fetchone()
                if row and row[0]:
                    todo.append(row[0])
        return keep

    def collect(self, live_refs: Iterable[str]) -> dict[str, int]:
        """Delete manifests not needed by ``live_refs`` and texts no kept manifest lists. → counts."""
        keep = self.bases(live_refs)
        texts = {c.hash for ref in keep for c in self.manifest(ref)}
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS keep_refs (ref TEXT PRIMARY KEY)")
                self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS keep_texts (hash TEXT PRIMARY KEY)")
                self.conn.execute("DELETE FROM keep_refs")
                self.conn.execute("DELETE FROM keep_texts")
                self.conn.executemany("INSERT INTO keep_refs VALUES (?)", [(r,) for r in keep])
                self.conn.executemany("INSERT INTO keep_texts VALUES (?)", [(h,) for h in texts])
                manifests = self.conn.execute(
                    "DELETE FROM manifests WHERE ref NOT IN (SELECT ref FROM keep_refs)").rowcount
                removed = self.conn.execute(
                    "DELETE FROM texts WHERE hash NOT IN (SELECT hash FROM keep_texts)").rowcount
                self.conn.execute("DELETE FROM heads WHERE ref NOT IN (SELECT ref FROM keep_refs)")
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self._resolved.clear()
        return {"manifests_removed": manifests, "texts_removed": removed}


def embedder_slug(embedder: str) -> str:
    """A file name for an embedder id ("local:all-MiniLM-L6-v2-int8:384:w96/24")."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", embedder).strip("-")[:80]
    return f"{readable}-{hashlib.sha256(embedder.encode()).hexdigest()[:8]}"


class VectorStore:
    """One embedder's vectors by chunk hash (all window vectors of a chunk, float32). Thread-safe."""

    SCHEMA = """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE vectors (
            hash TEXT PRIMARY KEY,
            windows INTEGER NOT NULL,
            dims INTEGER NOT NULL,
            vector BLOB NOT NULL,
            created_at REAL NOT NULL
        )
    """

    def __init__(self, state_dir: Path, embedder: str) -> None:
        self.embedder = embedder
        self.path = state_dir / "cache" / f"{embedder_slug(embedder)}.sqlite"
        self.conn = _connect(self.path, self.SCHEMA)
        self.conn.execute("PRAGMA synchronous = NORMAL")  # a cache: a vector lost is embedded again
        self.conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('embedder', ?)", (embedder,))
        self.lock = threading.Lock()

    def close(self) -> None:
        self.conn.close()

    def put(self, vectors: dict[str, np.ndarray]) -> None:
        rows = []
        for h, matrix in vectors.items():
            m = np.ascontiguousarray(matrix, dtype=np.float32)
            m = m[None, :] if m.ndim == 1 else m
            rows.append((h, m.shape[0], m.shape[1], m.tobytes(), time.time()))
        if not rows:
            return
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.executemany("INSERT OR IGNORE INTO vectors(hash, windows, dims, vector, created_at) "
                                      "VALUES (?,?,?,?,?)", rows)
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    def get(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = list(dict.fromkeys(hashes))
        found: dict[str, np.ndarray] = {}
        with self.lock:
            for start in range(0, len(wanted), 500):
                batch = wanted[start:start + 500]
                marks = ",".join("?" * len(batch))
                for h, windows, dims, blob in self.conn.execute(
                        f"SELECT hash, windows, dims, vector FROM vectors WHERE hash IN ({marks})", batch):
                    found[h] = np.frombuffer(blob, dtype=np.float32).reshape(windows, dims)
        return found
