"""The durable per-agent event log: the record every index is folded from.

Every event a stage emits (``Bus.emit`` / ``Bus.log``) is appended here by that stage's
process before it is queued, so losing Redis loses no history. One agent's log is a
folder of append-only segments, ``<state>/log/<agent>/00000001.log``, … — one JSON line
per event, ``{"at": <append time>, "event": {…}}`` — and its checkpoints (``snap-*.json.gz``,
written by ``memoryd.shared.log.checkpoints``). Appends from every process go through one
``flock`` per agent, are written with one ``write`` per batch and ``fsync``'d per batch; a
segment past ``memoryd.log.segmentBytes`` is sealed and the next one started.

Events in the log carry hashes, not content: a ``file.chunked`` / ``chunks.embedded``
event's ``chunks`` is the ref of its chunk list in the agent's content store and the texts
are stored there by hash; a ``chunks.embedded`` event's vectors go to the embedder's
vector store and the record keeps only ``vectors_missing`` (the hashes without one);
``vectors.filled`` keeps the hashes. :func:`hydrate` turns a record back into the event.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.events import (
    ChunksEmbedded,
    Event,
    FileChanged,
    FileChunked,
    VectorData,
    VectorsFilled,
    parse_event,
)
from memoryd.shared.exceptions import Fenced
from memoryd.shared.index.content import ChunkRef, ContentStore, VectorStore

log = logging.getLogger("memoryd.eventlog")

SEGMENT_SUFFIX = ".log"
#: The newest fencing token an append came with (shared/runtime/lease.py), beside the segments.
FENCE_FILE = "fence"
#: (segment number, byte offset in it): where a record starts, or where a fold stopped.
Position = tuple[int, int]
START: Position = (0, 0)


def log_dir(settings: Settings, agent: str) -> Path:
    return settings.data_dir / "log" / agent


def content_path(settings: Settings, agent: str) -> Path:
    return settings.data_dir / "content" / f"{agent}.sqlite"


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:08d}{SEGMENT_SUFFIX}"


def segments(directory: Path) -> list[int]:
    """The segment numbers in ``directory``, oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n[:-len(SEGMENT_SUFFIX)]) for n in names
                  if n.endswith(SEGMENT_SUFFIX) and n[:-len(SEGMENT_SUFFIX)].isdigit())


@dataclass(frozen=True)
class Record:
    """One logged event, as stored (slim); ``end`` is where the next record starts."""

    segment: int
    offset: int
    end: int
    at: float
    event: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.event["type"])

    @property
    def seq(self) -> int | None:
        return self.event.get("seq")

    @property
    def path(self) -> str | None:
        return self.event.get("path")

    @property
    def after(self) -> Position:
        return (self.segment, self.end)


def read(directory: Path, start: Position = START) -> Iterator[Record]:
    """Records from ``start`` on, in log order. A last line without its newline (being
    written, or torn by a crash) ends the log; a line that is not JSON is skipped, logged."""
    for number in segments(directory):
        if number < start[0]:
            continue
        offset = start[1] if number == start[0] else 0
        try:
            with open(segment_path(directory, number), "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:  # dropped by retention while we listed
            continue
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            line = data[pos:nl]
            try:
                raw = json.loads(line)
                yield Record(number, offset + pos, offset + nl + 1, float(raw["at"]), raw["event"])
            except (ValueError, KeyError, TypeError):
                log.warning("%s: unreadable record at byte %d skipped", segment_path(directory, number), offset + pos)
            pos = nl + 1


class _AgentLog:
    """One agent's segments as this process appends to them."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self.lock_fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        self.number = 0
        self.fd: int | None = None
        self.lock = threading.Lock()

    def _open(self, number: int) -> None:
        if self.fd is not None:
            os.close(self.fd)
        path = segment_path(self.directory, number)
        created = not path.exists()
        self.fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self.number = number
        size = os.fstat(self.fd).st_size
        if size and os.pread(self.fd, 1, size - 1) != b"\n":  # a write torn by a crash: end it
            os.write(self.fd, b"\n")
        if created:  # the new name must survive a crash too
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def _check_fence(self, fence: int | None) -> None:
        """Under the flock: refuse a write under an older token than the log has seen; record a newer one."""
        if fence is None:
            return
        path = self.directory / FENCE_FILE
        try:
            seen = int(path.read_text(encoding="ascii") or 0)
        except FileNotFoundError:
            seen = 0
        if fence < seen:
            raise Fenced(self.directory.name, f"the log {self.directory}", fence, seen)
        if fence > seen:
            aside = path.with_name(f"{FENCE_FILE}.new")
            aside.write_text(str(fence), encoding="ascii")
            os.replace(aside, path)

    def write(self, data: bytes, fence: int | None = None) -> None:
        with self.lock:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
            try:
                self._check_fence(fence)
                if self.fd is None:
                    found = segments(self.directory)
                    self._open(found[-1] if found else 1)
                while segment_path(self.directory, self.number + 1).exists():  # another process rotated
                    self._open(self.number + 1)
                assert self.fd is not None
                if os.fstat(self.fd).st_size >= self.segment_bytes:
                    self._open(self.number + 1)
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view):]
                os.fsync(self.fd)
            finally:
                fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        os.close(self.lock_fd)


class EventLog:
    """This process's writer of every agent's log, and its content and vector stores."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: The agents written most recently keep their log and content store open (about five
        #: file descriptors each), at most WORKER_MEMO_ENTRIES: not one per agent on the box.
        self._logs: OrderedDict[str, _AgentLog] = OrderedDict()
        self._content: OrderedDict[str, ContentStore] = OrderedDict()
        self._vectors: dict[str, VectorStore] = {}
        self._lock = threading.Lock()

    def _recent(self, table: OrderedDict[str, Any], agent: str, make: Callable[[], Any]) -> Any:
        """``table[agent]``, made if missing; the least recently used beyond the bound are closed."""
        with self._lock:
            if agent in table:
                table.move_to_end(agent)
                return table[agent]
            value = table[agent] = make()
            while len(table) > d.WORKER_MEMO_ENTRIES:
                table.popitem(last=False)[1].close()
            return value

    def content(self, agent: str) -> ContentStore:
        return self._recent(self._content, agent, lambda: ContentStore(content_path(self.settings, agent)))

    def vectors(self, embedder: str) -> VectorStore:
        with self._lock:
            if embedder not in self._vectors:
                self._vectors[embedder] = VectorStore(self.settings.data_dir, embedder)
            return self._vectors[embedder]

    def _agent_log(self, agent: str) -> _AgentLog:
        return self._recent(self._logs, agent,
                            lambda: _AgentLog(log_dir(self.settings, agent), self.settings.memoryd.log.segment_bytes))

    def append(self, events: Sequence[Event], fences: Mapping[str, int] | None = None) -> None:
        """Store the events' content (one transaction per store), then append the events, in
        order, to their agents' logs (one write and one fsync per agent). ``fences``: the token
        each agent's append carries (Fenced if its log has seen a newer one; unfenced if absent)."""
        by_agent: dict[str, list[Event]] = {}
        for event in events:
            by_agent.setdefault(event.agent, []).append(event)
        for agent, mine in by_agent.items():
            with_chunks = [e for e in mine if isinstance(e, FileChunked | ChunksEmbedded)]
            refs = dict(zip((id(e) for e in with_chunks), self.content(agent).put_files(
                [(e.path, [ChunkRef(c.hash, c.start_line, c.end_line, c.tokens) for c in e.chunks],
                  {c.hash: c.text for c in e.chunks}) for e in with_chunks]), strict=True))
            vectors: dict[str, dict[str, Any]] = {}
            for e in mine:
                if isinstance(e, ChunksEmbedded | VectorsFilled):
                    vectors.setdefault(e.embedder, {}).update({v.hash: v.matrix() for v in e.vectors})
            for embedder, found in vectors.items():
                self.vectors(embedder).put(found)
            now = time.time()
            lines = [json.dumps({"at": now, "event": slim(e, refs.get(id(e)))}, ensure_ascii=False,
                                separators=(",", ":")) for e in mine]
            self._agent_log(agent).write("".join(f"{line}\n" for line in lines).encode("utf-8"),
                                         (fences or {}).get(agent))

    def shrink(self) -> None:
        """Give back the page caches of the open content and vector stores (they stay open: other
        threads may be using them; SQLite serialises the call with theirs). Under the lock, so that
        none is closed meanwhile by :meth:`_recent` making room for another agent's."""
        with self._lock:
            for store in [*self._content.values(), *self._vectors.values()]:
                store.conn.execute("PRAGMA shrink_memory")

    def close(self) -> None:
        for item in [*self._logs.values(), *self._content.values(), *self._vectors.values()]:
            item.close()
        self._logs.clear()
        self._content.clear()
        self._vectors.clear()


def slim(event: Event, chunks_ref: str | None) -> dict[str, Any]:
    """The event as logged (its content already stored): chunk lists by ref, vectors by hash."""
    body = event.model_dump(mode="json")
    if isinstance(event, FileChanged):
        del body["text"]  # the file itself is the record; a re-drive reads it again
    if isinstance(event, FileChunked | ChunksEmbedded):
        body["chunks"] = chunks_ref
    if isinstance(event, ChunksEmbedded):
        have = {v.hash for v in event.vectors}
        body["vectors_missing"] = sorted({c.hash for c in event.chunks} - have)
        del body["vectors"]
    if isinstance(event, VectorsFilled):
        body["vectors"] = [v.hash for v in event.vectors]
    return body


def hydrate(body: dict[str, Any], content: ContentStore, vectors: Callable[[str], VectorStore]) -> Event:
    """The event a slim record was made from (texts and vectors read back by hash)."""
    b = dict(body)
    kind = b["type"]
    if kind in ("file.chunked", "chunks.embedded"):
        refs = content.manifest(b["chunks"])
        texts = content.texts(c.hash for c in refs)
        b["chunks"] = [{"hash": c.hash, "start_line": c.start_line, "end_line": c.end_line, "tokens": c.tokens,
                        "text": texts[c.hash]} for c in refs]
    if kind == "chunks.embedded":
        missing = set(b.pop("vectors_missing"))
        wanted = [h for h in dict.fromkeys(c["hash"] for c in b["chunks"]) if h not in missing]
        found = vectors(b["embedder"]).get(wanted)
        b["vectors"] = [VectorData.pack(h, found[h]).model_dump() for h in wanted if h in found]
    if kind == "vectors.filled":
        found = vectors(b["embedder"]).get(b["vectors"])
        b["vectors"] = [VectorData.pack(h, found[h]).model_dump() for h in b["vectors"] if h in found]
    return parse_event(json.dumps(b))
