"""Chunker worker: ``FileChanged`` → ``FileChunked`` (to the embedder) or ``FileSkipped``.

Reads the file once, checks it is memory (not binary, UTF-8, not huge), and splits it
into ~400-token chunks on line boundaries. The chunk texts travel in the event, so the
later stages and a replay never need the file again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from pathlib import Path, PurePosixPath

from shared.chunking import Chunker
from shared.config import Settings
from shared.events import FileChanged, FileChunked, FileDeleted, FileSkipped, parse_event
from shared.worker import context
from shared.workspace import file_sha256

log = logging.getLogger("memoryd.chunker")


def chunker_for(settings: Settings, agent_id: str) -> Chunker:
    c = settings.agent(agent_id).memory_search.chunking
    return Chunker(tokens=c.tokens, overlap=c.overlap)


def _skip(event: FileChanged, reason: str, sha: str, size: int, mtime: float) -> FileSkipped:
    log.warning("agent %s: skipped %s: %s", event.agent, event.path, reason)
    return FileSkipped(agent=event.agent, path=event.path, seq=event.seq, run=event.run, source=event.source,
                       sha256=sha, size=size, mtime=mtime, reason=reason)


def chunk_file(event: FileChanged, settings: Settings) -> FileChunked | FileSkipped | FileDeleted:
    """Read and chunk the file an event names; what became of it is the returned event."""
    rel = PurePosixPath(event.rel)
    if rel.is_absolute() or ".." in rel.parts:
        return _skip(event, f"path {event.rel!r} leaves its root; refusing to read it", event.sha256, 0, 0.0)
    absolute = Path(event.root) / rel
    limit = settings.agent(event.agent).memory_search.sync.max_file_bytes
    try:
        st = os.lstat(absolute)
    except FileNotFoundError:
        return FileDeleted(agent=event.agent, path=event.path, seq=event.seq, run=event.run, origin="chunker")
    if not stat.S_ISREG(st.st_mode):
        return _skip(event, "not a regular file (a symlink or device); memory files must be real files",
                     event.sha256, st.st_size, st.st_mtime)
    if st.st_size > limit:
        return _skip(event, f"{st.st_size:,} bytes is over memorySearch.sync.maxFileBytes ({limit:,}); "
                     "split the file or raise the limit", file_sha256(absolute), st.st_size, st.st_mtime)
    data = absolute.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    if b"\x00" in data:
        return _skip(event, "contains NUL bytes: a binary file, not Markdown; move it out of the memory folders",
                     sha, len(data), st.st_mtime)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _skip(event, f"not valid UTF-8 (byte {exc.start}); re-save it as UTF-8", sha, len(data), st.st_mtime)
    chunker = chunker_for(settings, event.agent)
    return FileChunked(agent=event.agent, path=event.path, seq=event.seq, run=event.run, source=event.source,
                       sha256=sha, size=len(data), mtime=st.st_mtime, chunker=chunker.fingerprint,
                       chunks=chunker.chunk(text))


def chunk_job(events: list[str]) -> int:
    """RQ job: chunk a batch of changed files. Idempotent: it only reads and emits."""
    ctx = context()
    chunked: list[FileChunked] = []
    direct: list[FileSkipped | FileDeleted] = []
    for raw in events:
        event = parse_event(raw)
        if not isinstance(event, FileChanged):
            raise TypeError(f"chunk_job got a {event.type} event; only file.changed belongs on this queue")
        result = chunk_file(event, ctx.settings)
        (chunked if isinstance(result, FileChunked) else direct).append(result)
    ctx.bus.emit("embed", chunked)
    ctx.bus.emit("index", direct)
    return len(chunked)
