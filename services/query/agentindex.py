"""One agent's index as the query service reads it: read-only connections, one per search in
flight, and what every search of one committed generation shares (its vectors, mapped lazily:
services/query/vectors.py, and the keyword side's statistics).

Every read goes through :meth:`AgentIndex.snapshot`: one read transaction on a connection of
its own, so a search sees one committed state, never blocks the indexer (WAL) and never waits
for another search. Usually a snapshot takes the index's lock only to pick an idle
connection, then begins and reads ``meta.generation`` (bumped by every committed write) on
it. When that generation is new, or the file's inode changed (a rebuild swaps in a new
file: reopen), or no connection is idle, it starts again under the lock: a new vector file
mapped (a compaction; before ``BEGIN``), ``BEGIN``, and the next :class:`_State` built from
the last one — the document frequencies start afresh, the vectors follow by what changed
(a copy: the searches still on the previous generation keep theirs). Those renewals run one
after another, so the state only moves forward, and a search that starts after the indexer
committed sees its rows.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memoryd.services.query import keyword as query_keyword
from memoryd.services.query.ranking import ChunkRow
from memoryd.services.query.vectors import VectorIndex
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.embed.windowlines import window_lines
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.index import sqlitedb
from memoryd.shared.index.indexvectors import read_meta
from memoryd.shared.index.store import META_DIMS, META_EMBEDDER, META_GENERATION
from memoryd.shared.log.eventlog import log_dir, segments

#: The lines of window vectors an older writer did not keep, worked out once per chunk text.
_window_lines = functools.lru_cache(maxsize=d.WINDOW_LINES_CACHE)(window_lines)


class _State:
    """What every search of one committed generation shares; only ``vectors`` is ever set
    after it is made (once, under the index's lock, by the first search that wants them)."""

    def __init__(self, conn: Any, generation: str | None, identity: tuple[int, int],
                 vectors: VectorIndex | None) -> None:
        self.identity = identity
        self.generation = generation
        self.embedder = read_meta(conn, META_EMBEDDER)
        self.has_vectors = read_meta(conn, META_DIMS) is not None
        self.stats = query_keyword.Stats(conn)
        self.vectors = vectors if self.has_vectors else None


class Snapshot:
    """One search's view of the index: its own connection inside one read transaction, and the
    shared state of the generation that transaction sees. Valid only inside ``snapshot()``."""

    def __init__(self, owner: AgentIndex, conn: Any, state: _State) -> None:
        self.owner = owner
        self.conn = conn
        self.state = state
        self.keyword = query_keyword.KeywordSearcher(conn, state.stats)

    @property
    def identity(self) -> tuple[int, int]:
        return self.state.identity

    @property
    def generation(self) -> str | None:
        return self.state.generation

    @property
    def embedder(self) -> str | None:
        return self.state.embedder

    def vector_index(self) -> VectorIndex | None:
        """The index's vectors at this snapshot; None when it has none."""
        if not self.state.has_vectors:
            return None
        if self.state.vectors is None or self.state.vectors.file is None:
            self.owner.load_vectors(self)
        return self.state.vectors

    def chunks(self, ids: list[int]) -> dict[int, ChunkRow]:
        """id → row of the chunks that still exist."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return self._rows(f"id IN ({marks})", ids)

    def windows(self, ids: list[int]) -> list[tuple[int, int, int, int]]:
        """(chunk id, vector rowid, first line, last line) of the window vectors of the chunks ``ids``.
        Lines an older writer did not keep (NULL, or no such column before migration 5) are worked
        out from the chunk's text by its embedder's rule (shared/embed/windowlines.py, cached), so an
        upgraded index's old rows get the same snippets; a chunk whose rule is not known is left out."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        try:
            rows = self.conn.execute(f"SELECT chunk_id, rowid, first_line, last_line FROM chunk_vectors "
                                     f"WHERE chunk_id IN ({marks}) ORDER BY chunk_id, window", ids).fetchall()
        except sqlitedb.driver().module.OperationalError:  # no such column: not migrated yet
            rows = [(cid, rowid, None, None) for cid, rowid in self.conn.execute(
                f"SELECT chunk_id, rowid FROM chunk_vectors WHERE chunk_id IN ({marks}) ORDER BY chunk_id, window",
                ids)]
        unknown: dict[int, list[int]] = {}  # chunk id → its window rows' rowids, in window order
        for cid, rowid, first, _ in rows:
            if first is None:
                unknown.setdefault(cid, []).append(rowid)
        if not unknown:
            return rows
        marks = ",".join("?" * len(unknown))
        texts = dict(self.conn.execute(f"SELECT id, text FROM chunks WHERE id IN ({marks})", list(unknown)))
        out = [r for r in rows if r[0] not in unknown]
        for cid, rowids in unknown.items():
            lines = _window_lines(self.embedder or "", texts.get(cid, ""), len(rowids))
            if lines is not None:
                out += [(cid, rowid, first, last) for rowid, (first, last) in zip(rowids, lines, strict=True)]
        return out

    def around(self, path: str, start_line: int, end_line: int) -> dict[int, ChunkRow]:
        """id → row of the chunks of ``path`` holding a line of ``start_line − 1 .. end_line + 1``."""
        return self._rows("path = ? AND start_line <= ? AND end_line >= ?", (path, end_line + 1, start_line - 1))

    def _rows(self, where: str, params: Any) -> dict[int, ChunkRow]:
        """id → row of the chunks matching ``where`` (an SQL condition with ``params``)."""
        rows = self.conn.execute(
            f"SELECT id, path, source, start_line, end_line, text, tokens FROM chunks WHERE {where}", params)
        return {r[0]: ChunkRow(*r[1:]) for r in rows}


def missing_index(settings: Settings, agent_id: str) -> str:
    """What to do about an agent whose index file is gone: replay its event log when it has one
    (the log and the content store hold every chunk and vector: no provider call), else index."""
    index = f"no index at {settings.index_path(agent_id)} for agent {agent_id}"
    if segments(log_dir(settings, agent_id)):
        return (f"{index}; its event log is there: `memoryd replay --agent {agent_id}` rebuilds the index from it "
                f"in seconds, without calling the embedding provider (or run `memoryd index --agent {agent_id}`, "
                "or start the pipeline: `memoryd up`)")
    return f"{index}; start the pipeline (`memoryd up`) or run `memoryd index --agent {agent_id}`"


class AgentIndex:
    """One agent's index as the query service sees it. Use :meth:`snapshot` for every read;
    ``missing()`` is the message when the file is not there."""

    def __init__(self, path: Path, missing: Callable[[], str] | None = None) -> None:
        self.path = path
        self.missing = missing or (lambda: f"no index at {path}; start the pipeline (`memoryd up`) or run "
                                           "`memoryd index`")
        #: Held to start a snapshot, to load the vectors once, and to close; never during a search.
        self._lock = threading.Lock()
        self._state: _State | None = None
        self._idle: list[Any] = []  # connections to the current file that no search holds now
        self._epoch = 0  # bumped when the file is replaced or closed: older connections are not reused
        self._active = 0  # snapshots in flight

    @property
    def is_open(self) -> bool:
        return self._state is not None

    def embedder(self) -> str | None:
        """What made the index's vectors, as its last snapshot saw it (one is taken when none was yet);
        None when the index is missing."""
        if self._state is None:
            try:
                with self.snapshot():
                    pass
            except IndexMissing:
                return None
        state = self._state
        return state.embedder if state is not None else None

    @property
    def busy(self) -> bool:
        """Whether a search holds a snapshot of it now."""
        return self._active > 0

    @property
    def connections(self) -> int:
        """Connections open on it: the idle ones and those of the searches in flight."""
        return len(self._idle) + self._active

    @property
    def vectors(self) -> VectorIndex | None:
        """The vectors of the latest generation, if a search loaded them."""
        state = self._state
        return state.vectors if state is not None else None

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """The index at its latest committed state for the duration of the block."""
        conn, epoch, state = self._begin()
        try:
            yield Snapshot(self, conn, state)
        finally:
            conn.execute("ROLLBACK")
            with self._lock:
                self._active -= 1
                if epoch == self._epoch:
                    self._idle.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    def _begin(self) -> tuple[Any, int, _State]:
        """A connection in a read transaction, its epoch, and the state of the generation it sees.

        The usual case takes the lock only to pick an idle connection: ``BEGIN`` and the meta
        read run outside it (each lets go of the GIL, and a lock held across them made every
        search of the agent wait for the GIL's hand-overs). A new file, a new generation, a
        transaction older than the state, or no idle connection: :meth:`_renew`, under the lock."""
        with self._lock:
            conn, epoch = (self._idle.pop() if self._idle else None), self._epoch
            self._active += 1
        try:
            if conn is not None:
                identity = self._identity()
                conn.execute("BEGIN")
                generation = read_meta(conn, META_GENERATION)
                state = self._state
                if state is not None and epoch == self._epoch and (state.identity, state.generation) == (
                        identity, generation):
                    return conn, epoch, state
                conn.execute("ROLLBACK")
            return self._renew(conn, epoch)
        except BaseException as exc:
            with self._lock:
                self._active -= 1
                if isinstance(exc, IndexMissing):
                    self._drop()  # the file is gone: let go of its connections and state
            if conn is not None:
                conn.close()  # and with it the transaction
            raise

    def _renew(self, conn: Any | None, epoch: int) -> tuple[Any, int, _State]:
        """Under the lock, in order: the file (reopen if replaced), a new vector file mapped, then
        ``BEGIN``, and the state brought to the generation that transaction sees. Snapshots renewed
        one after another see generations that never go back, so the state only moves forward."""
        with self._lock:
            identity = self._identity()
            if self._state is not None and identity != self._state.identity:
                self._drop()
            if conn is None or epoch != self._epoch:  # none idle, or one of a file since replaced
                if conn is not None:
                    conn.close()
                conn = self._connect()
            try:
                if self._state is not None and self._state.vectors is not None:
                    self._state.vectors.remap()  # before BEGIN: a new vector file never lags the snapshot
                conn.execute("BEGIN")
                generation = read_meta(conn, META_GENERATION)
                if self._state is None or generation != self._state.generation:
                    vectors = self._state.vectors if self._state is not None else None
                    if vectors is not None:
                        vectors = vectors.following(conn, int(generation or 0))
                    self._state = _State(conn, generation, identity, vectors)
            except BaseException:
                conn.close()  # and with it the transaction
                raise
            return conn, self._epoch, self._state

    def _identity(self) -> tuple[int, int]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise IndexMissing(self.missing()) from None
        return st.st_dev, st.st_ino

    def _connect(self) -> Any:
        conn = sqlitedb.connect(self.path, readonly=True)
        query_keyword.prepare(conn)
        return conn

    def load_vectors(self, snapshot: Snapshot) -> None:
        """Map the vectors for ``snapshot``'s generation (inside its read transaction), once unless the
        file was not there: later generations bring them forward from there."""
        with self._lock:
            state = snapshot.state
            if state.vectors is None or state.vectors.file is None:
                vectors = VectorIndex(self.path)
                vectors.refresh(snapshot.conn, int(state.generation or 0))
                state.vectors = vectors

    def chunk_count(self) -> int:
        """Chunks in the index now, without loading its vectors."""
        with self.snapshot() as snap:
            return snap.state.stats.total

    def close(self) -> None:
        """Close the idle connections and forget the state; a search in flight finishes on its own
        connection (closed when it ends), and the next search reopens."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        self._epoch += 1
        idle, self._idle, self._state = self._idle, [], None
        for conn in idle:
            conn.close()
