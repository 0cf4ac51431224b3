"""Rebuilding an agent's live index side by side, from its log, while the old one answers.

A fingerprint change (chunker, tokenizer, FTS tokenizer, embedder) no longer rebuilds
inside an index job. The indexer keeps applying events to the old index, and queues a
rebuild job (``memoryd.services.pipeline.rebuild.rebuild_job``) that:

1. takes the agent's rebuild lock (a ``flock``: one rebuild per agent, whichever indexer
   runs it) and its plan, ``<agent>.sqlite.rebuild.json``, which names a temp file unique
   to this rebuild;
2. folds the log and writes it into the temp file (``memoryd.shared.rebuild.materialize``),
   re-chunking and re-embedding what the new fingerprint needs (the vector store answers
   first), for at most ``memoryd.log.rebuildSliceSeconds``; then it stops and queues its
   continuation — the temp file is the checkpoint: a path already written is skipped;
3. once every path is written, takes the swap lock exclusively (the indexer applies
   under it, shared), folds what was logged meanwhile into the temp file, and renames it
   over the live index. The indexer reopens the new file; queries see its new inode.

``memoryd replay`` without ``--into`` is the same build, run to the end in the foreground.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memoryd.shared.config.settings import Settings
from memoryd.shared.events import ChunkData, ChunksEmbedded, Event, FileDeleted, FileSkipped, VectorData
from memoryd.shared.exceptions import IndexMissing, MemorydError
from memoryd.shared.index.apply import fingerprint
from memoryd.shared.index.store import META_EMBEDDER, META_FENCE, META_FINGERPRINT, IndexReader, IndexWriter
from memoryd.shared.index.vecfile import vec_path
from memoryd.shared.log.checkpoints import fold
from memoryd.shared.log.eventlog import EventLog
from memoryd.shared.rebuild.materialize import Counts, Target, materialize, start_index
from memoryd.shared.runtime.bus import Bus

log = logging.getLogger("memoryd.rebuild")


class FileLock:
    """An ``flock`` on ``path``: released by the kernel when its process dies, so a rebuild
    killed mid-way never leaves the agent locked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self, *, exclusive: bool = True, blocking: bool = True) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor drops the lock
            self.fd = None

    @contextmanager
    def held(self, *, exclusive: bool) -> Iterator[None]:
        self.acquire(exclusive=exclusive)
        try:
            yield
        finally:
            self.release()


def swap_lock(settings: Settings, agent: str) -> FileLock:
    """Held shared by every apply to the live index, exclusively by the swap of a rebuilt one."""
    index = settings.index_path(agent)
    return FileLock(index.with_name(f"{index.name}.swap.lock"))


def _plan_path(settings: Settings, agent: str) -> Path:
    index = settings.index_path(agent)
    return index.with_name(f"{index.name}.rebuild.json")


def pending_plan(settings: Settings, agent: str) -> dict[str, Any] | None:
    try:
        return json.loads(_plan_path(settings, agent).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _drop(path: Path) -> None:
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), vec_path(path)):
        p.unlink(missing_ok=True)


def temp_beside(target: Path, tag: str) -> Path:
    """A name no other build uses, next to ``target`` (one filesystem: the swap is a rename)."""
    return target.with_name(f".{target.stem}.{tag}-{uuid.uuid4().hex[:12]}{target.suffix}")


def swap_in(built: Path, target: Path) -> None:
    """Rename the closed, checkpointed index ``built`` over ``target``, its vector file with it."""
    if vec_path(built).exists():
        os.replace(vec_path(built), vec_path(target))
    os.replace(built, target)
    for side in ("-wal", "-shm"):
        Path(f"{built}{side}").unlink(missing_ok=True)
        Path(f"{target}{side}").unlink(missing_ok=True)


def _live_meta(index: Path, key: str) -> str | None:
    try:
        reader = IndexReader(index)
    except IndexMissing:
        return None
    try:
        return reader.meta(key)
    finally:
        reader.close()


def live_fingerprint(settings: Settings, agent: str) -> str | None:
    try:
        reader = IndexReader(settings.index_path(agent))
    except IndexMissing:
        return None
    try:
        return reader.meta(META_FINGERPRINT)
    finally:
        reader.close()


def rebuild_slice(settings: Settings, agent: str, *, budget: float | None = None, force: bool = False,
                  embed: bool = True) -> dict[str, Any]:
    """Work on the agent's rebuild for about ``budget`` seconds (None: to the end).

    → ``done`` (swapped in, or nothing to do), ``busy`` (another process holds the rebuild
    lock), and the counts. ``force``: rebuild even if the fingerprint is the configured one;
    ``embed``: chunks without a vector in the store go to the provider."""
    index = settings.index_path(agent)
    lock = FileLock(index.with_name(f"{index.name}.rebuild.lock"))
    if not lock.acquire(blocking=False):
        return {"done": False, "busy": True}
    stores = EventLog(settings)
    try:
        wanted = fingerprint(settings, agent)
        plan = pending_plan(settings, agent)
        if plan is None and not force and live_fingerprint(settings, agent) in (wanted, None):
            return {"done": True, "busy": False, "rebuilt": False}
        if plan is not None and plan["fingerprint"] != wanted:
            _drop(Path(plan["temp"]))
            plan = None
        if plan is None:
            plan = {"fingerprint": wanted, "started_at": time.time(),
                    "temp": str(temp_beside(index, "rebuild"))}
            _plan_path(settings, agent).write_text(json.dumps(plan), encoding="utf-8")
        adopt(settings, agent, stores)
        target = Target.configured(settings, agent, embed=embed, relog=stores)
        counts = Counts()
        started = time.monotonic()
        writer = IndexWriter(Path(plan["temp"]))
        try:
            start_index(writer, wanted, target.embedder)
            deadline = None if budget is None else started + budget
            with writer.transaction():  # a slice is one commit: the vector file is written once per slice
                done = materialize(settings, agent, fold(settings, agent), writer, target, stores, counts,
                                   deadline=deadline)
            if not done:
                return {"done": False, "busy": False, **counts.as_dict()}
            with swap_lock(settings, agent).held(exclusive=True):
                with writer.transaction():
                    materialize(settings, agent, fold(settings, agent), writer, target, stores, counts)
                    fence = _live_meta(index, META_FENCE)
                    if fence is not None:  # the newest token the live index has seen stays the bar
                        writer.set_meta(META_FENCE, fence)
                writer.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                writer.close()
                swap_in(Path(plan["temp"]), index)
        finally:
            writer.close()
        _plan_path(settings, agent).unlink(missing_ok=True)
        log.info("agent %s: rebuilt index swapped in (%s)", agent, counts.as_dict())
        return {"done": True, "busy": False, "rebuilt": True, "seconds": round(time.monotonic() - started, 3),
                **counts.as_dict()}
    finally:
        stores.close()
        lock.release()


def rebuild(settings: Settings, agent: str, *, embed: bool = True) -> dict[str, Any]:
    """Rebuild the agent's live index now, in this process (waits for another rebuild to end)."""
    while True:
        result = rebuild_slice(settings, agent, force=True, embed=embed)
        if not result.get("busy"):
            return result
        time.sleep(0.1)


def request(bus: Bus, agent: str) -> bool:
    """Queue the agent's rebuild job unless one is queued or running. → whether it was queued."""
    job_id = bus.job_id(f"rebuild-{agent}")
    if bus.pending(job_id):
        return False
    bus.enqueue("rebuild", agent, job_id=job_id, node=bus.owner_node(agent))
    return True


# --- an index older than its log: taking its content into the log ---------------------
def adopt(settings: Settings, agent: str, stores: EventLog) -> int:
    """Log the live index's files the log does not know (an index built before the log
    existed), so a fold of the log holds everything the index does. → files adopted."""
    try:
        reader = IndexReader(settings.index_path(agent))
    except IndexMissing:
        return 0
    try:
        known = fold(settings, agent).files
        rows = reader.conn.execute("SELECT path, source, hash, size, mtime, seq, status, error FROM files").fetchall()
        missing = [r for r in rows if r[0] not in known]
        if not missing:
            return 0
        events = _adopted(agent, reader, missing)
    finally:
        reader.close()
    stores.append(events)
    log.warning("agent %s: %d indexed files were not in the log; logged them from the index", agent, len(missing))
    return len(missing)


def _adopted(agent: str, reader: IndexReader, rows: list[tuple[Any, ...]]) -> list[Event]:
    embedder = reader.meta(META_EMBEDDER) or "none"
    chunker = (reader.meta(META_FINGERPRINT) or "").split("|fts:")[0]
    events: list[Event] = []
    for path, source, sha, size, mtime, seq, status, error in rows:
        if status == "deleted":
            events.append(FileDeleted(agent=agent, path=path, seq=seq, origin="adopted"))
            continue
        chunks = [ChunkData(hash=h, start_line=s, end_line=e, tokens=t, text=x) for h, s, e, t, x in
                  reader.conn.execute("SELECT hash, start_line, end_line, tokens, text FROM chunks WHERE path = ? "
                                      "ORDER BY start_line, id", (path,))]
        if chunks:
            vectors = reader.stored_vectors(embedder, [c.hash for c in chunks])
            events.append(ChunksEmbedded(
                agent=agent, path=path, seq=seq, source=source, sha256=sha, size=size, mtime=mtime,
                chunker=chunker, chunks=chunks, embedder=embedder, provider="adopted", model="",
                vectors=[VectorData.pack(h, v) for h, v in vectors.items()], cached=len(vectors), embedded=0))
        if status == "skipped":
            events.append(FileSkipped(agent=agent, path=path, seq=seq, source=source, sha256=sha, size=size,
                                      mtime=mtime, reason=error or "skipped"))
    return events


def ensure_rebuildable(settings: Settings, agent: str) -> None:
    """Fail with the fix when there is nothing to rebuild from."""
    if not settings.index_path(agent).exists() and fold(settings, agent).events == 0:
        raise MemorydError(f"agent {agent}: no index and an empty log; index it first (`memoryd index --agent "
                           f"{agent}`)")
