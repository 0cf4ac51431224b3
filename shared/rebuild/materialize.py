"""A folded log (``memoryd.shared.log.fold.LogState``) written into an index, through ``apply``.

Each path's deciding event is turned back into the event the indexer applied — texts from
the agent's content store, vectors from the embedder's vector store — and applied with the
row times set to the event's log time, so the same log always writes the same rows. Paths
go in sorted order, a batch at a time: one vector lookup (and, when embedding is allowed,
one provider call) per batch. A path whose row already holds its state is skipped, which
makes an interrupted build resumable.

A :class:`Target` says what the index is to hold: the logged chunks as they are, or
re-chunked with today's chunker (the file's text is rebuilt from its chunks and checked
against its sha256, else read from disk); vectors of which embedder; and whether missing
vectors may be computed (``--reembed``, a rebuild) or stay missing (a replay: 0 calls).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.workspace import Workspace
from memoryd.shared.embed import providers
from memoryd.shared.events import (
    ChunkData,
    ChunksEmbedded,
    FileChanged,
    FileChunked,
    FileDeleted,
    FileSkipped,
    VectorData,
)
from memoryd.shared.exceptions import MemorydError, ProviderError
from memoryd.shared.index.apply import apply
from memoryd.shared.index.chunking import Chunker, chunk_file
from memoryd.shared.index.content import ContentStore
from memoryd.shared.index.fts import FTS_TOKENIZER
from memoryd.shared.index.store import META_EMBEDDER, META_FINGERPRINT, IndexWriter
from memoryd.shared.log.eventlog import EventLog
from memoryd.shared.log.fold import FileState, LogState

log = logging.getLogger("memoryd.materialize")



@dataclass
class Target:
    """What the built index holds. ``chunker`` None: each path's chunks as logged; ``chain``
    None: no provider is called (a vector not in the store stays missing)."""

    chunker: str | None
    embedder: str
    provider: str
    model: str
    chain: list[providers.Provider] | None = None
    #: Log what was re-chunked or re-embedded, so the log reproduces the index it built.
    relog: EventLog | None = None

    @classmethod
    def configured(cls, settings: Settings, agent: str, *, embed: bool, relog: EventLog | None = None) -> Target:
        search = settings.agent(agent).memory_search
        name, model, embedder = providers.describe(search)
        chain = providers.resolve(search) if embed and embedder != "none" else None
        return cls(Chunker.from_settings(settings, agent).fingerprint, embedder, name, model, chain, relog)

    def fingerprint(self, state: LogState) -> str:
        """The built index's fingerprint (as ``memoryd.shared.index.apply.fingerprint`` makes it)."""
        chunkers = {s.chunks["chunker"] for s in state.live().values() if s.chunks}
        chunker = self.chunker or (chunkers.pop() if len(chunkers) == 1 else "mixed")
        return f"{chunker}|fts:{FTS_TOKENIZER}|{self.embedder}"


@dataclass
class Counts:
    files: int = 0
    files_deleted: int = 0
    files_skipped: int = 0
    files_rechunked: int = 0
    chunks: int = 0
    chunks_embedded: int = 0
    chunks_cached: int = 0
    vectors_missing: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def start_index(writer: IndexWriter, fingerprint: str, embedder: str) -> None:
    if writer.meta(META_FINGERPRINT) is None:
        with writer.transaction():
            writer.set_meta(META_FINGERPRINT, fingerprint)
            writer.set_meta(META_EMBEDDER, embedder)


def materialize(settings: Settings, agent: str, state: LogState, writer: IndexWriter, target: Target,
                stores: EventLog, counts: Counts, *, deadline: float | None = None) -> bool:
    """Make ``writer``'s index hold ``state``. → False if ``deadline`` (monotonic) came first."""
    todo = [p for p in sorted(state.files) if not _holds(writer, p, state.files[p])]
    batch = d.MATERIALIZE_BATCH_PATHS
    for start in range(0, len(todo), batch):
        _write(settings, agent, {p: state.files[p] for p in todo[start:start + batch]}, writer, target, stores, counts)
        if deadline is not None and time.monotonic() > deadline and start + batch < len(todo):
            return False
    _fill(state, writer, target, stores)
    return True


def _holds(writer: IndexWriter, path: str, state: FileState) -> bool:
    row = writer.file(path)
    return row is not None and row.seq == state.seq and row.status == state.status


def _write(settings: Settings, agent: str, batch: dict[str, FileState], writer: IndexWriter, target: Target,
           stores: EventLog, counts: Counts) -> None:
    content = stores.content(agent)
    built: dict[str, tuple[FileState, list[ChunkData], bool]] = {}
    for path, state in batch.items():
        if state.chunks is None:
            continue
        chunks = _chunks(content, state.chunks)
        rechunked = bool(target.chunker and state.chunks["chunker"] != target.chunker)
        if rechunked:
            chunks = _rechunk(settings, agent, path, state.chunks, chunks)
            counts.files_rechunked += 1
        built[path] = (state, chunks, rechunked)
    vectors = _vectors(built, target, stores, counts)
    with writer.transaction():  # the batch's files in one transaction (each apply joins it)
        for path, state in batch.items():
            _write_one(agent, path, state, built.get(path), writer, target, vectors, counts)


def _write_one(agent: str, path: str, state: FileState, built: tuple[FileState, list[ChunkData], bool] | None,
               writer: IndexWriter, target: Target, vectors: dict[str, np.ndarray], counts: Counts) -> None:
    writer.clock = lambda: state.at
    if built is not None:
        _, chunks, rechunked = built
        body = state.chunks or {}
        event = _embedded(body, chunks, target, vectors, rechunked)
        if target.relog is not None and (rechunked or event.embedder != body["embedder"]):
            target.relog.append([event])
        result = apply(writer, event)
        counts.chunks += len(chunks)
        counts.vectors_missing += result.vectors_missing if result else 0
    body = state.event
    if state.status == "deleted":
        apply(writer, FileDeleted(agent=agent, path=path, seq=state.seq, origin=body.get("origin", "watch")))
        counts.files_deleted += 1
    elif state.status == "skipped":
        apply(writer, FileSkipped(agent=agent, path=path, seq=state.seq, source=body["source"], sha256=body["sha256"],
                                  size=body["size"], mtime=body["mtime"], reason=body["reason"]))
        counts.files_skipped += 1
    else:
        counts.files += 1


def _chunks(content: ContentStore, body: dict[str, Any]) -> list[ChunkData]:
    refs = content.manifest(body["chunks"])
    texts = content.texts(c.hash for c in refs)
    missing = [c.hash for c in refs if c.hash not in texts]
    if missing:
        raise MemorydError(f"{body['path']}: {len(missing)} chunk texts are not in the content store "
                           f"{content.path}; rebuild from the files with `memoryd index`")
    return [ChunkData(hash=c.hash, start_line=c.start_line, end_line=c.end_line, tokens=c.tokens,
                      text=texts[c.hash]) for c in refs]


def _vectors(built: dict[str, tuple[FileState, list[ChunkData], bool]], target: Target, stores: EventLog,
             counts: Counts) -> dict[str, np.ndarray]:
    """The vector of every chunk that gets one: from the store, else (if allowed) the provider."""
    if target.embedder == "none":
        return {}
    wanted: dict[str, str] = {}
    for state, chunks, _ in built.values():
        body = state.chunks or {}
        # A chunk the log says had no vector keeps none (as in the live index) unless embedding is allowed.
        held_back = set(body["vectors_missing"]) if body["embedder"] == target.embedder else set()
        for c in chunks:
            if c.hash not in held_back or target.chain is not None:
                wanted.setdefault(c.hash, c.text)
    store = stores.vectors(target.embedder)
    found = store.get(wanted)
    counts.chunks_cached += len(found)
    todo = {h: t for h, t in wanted.items() if h not in found}
    if todo and target.chain:
        try:
            matrices, _ = providers.embed_with_fallback(target.chain, list(todo.values()))
        except ProviderError as exc:
            log.warning("%d chunks left without vectors: %s", len(todo), exc)
            return found
        made = dict(zip(todo, matrices, strict=True))
        store.put(made)
        found.update(made)
        counts.chunks_embedded += len(made)
    return found


def _embedded(body: dict[str, Any], chunks: list[ChunkData], target: Target, vectors: dict[str, np.ndarray],
              rechunked: bool) -> ChunksEmbedded:
    same = body["embedder"] == target.embedder
    own = list(dict.fromkeys(c.hash for c in chunks))
    return ChunksEmbedded(
        agent=body["agent"], path=body["path"], seq=body["seq"], source=body["source"], sha256=body["sha256"],
        size=body["size"], mtime=body["mtime"], chunker=target.chunker if rechunked else body["chunker"],
        chunks=chunks, embedder=target.embedder, provider=body["provider"] if same else target.provider,
        model=body["model"] if same else target.model,
        vectors=[VectorData.pack(h, vectors[h]) for h in own if h in vectors], cached=0, embedded=0,
    )


def _fill(state: LogState, writer: IndexWriter, target: Target, stores: EventLog) -> None:
    """Vectors filled (``vectors.filled``) after a path was written, for the paths skipped as done."""
    if target.embedder == "none":
        return
    rows = writer.conn.execute("SELECT DISTINCT path, hash FROM chunks WHERE has_vector = 0").fetchall()
    wanted = set()
    for path, h in rows:
        body = state.files[path].chunks if path in state.files else None
        if body and (target.chain is not None or body["embedder"] != target.embedder
                     or h not in body["vectors_missing"]):
            wanted.add(h)
    found = stores.vectors(target.embedder).get(wanted) if wanted else {}
    if found:
        with writer.transaction():
            writer.fill_vectors(found)


# --- re-chunking from the log ----------------------------------------------------------
def file_text(chunks: list[ChunkData]) -> str:
    """A file's text rebuilt from its chunks (overlaps once; the pieces of a split line joined;
    lines in no chunk — only blank ones are left out — empty). Without the final newline."""
    lines: dict[int, str] = {}
    pieces: dict[int, list[str]] = {}
    for c in chunks:
        if c.start_line == c.end_line:
            pieces.setdefault(c.start_line, []).append(c.text)
        else:
            for offset, line in enumerate(c.text.split("\n")):
                lines[c.start_line + offset] = line
    for number, parts in pieces.items():
        if number not in lines:
            lines[number] = "".join(parts)
    last = max(lines, default=0)
    return "\n".join(lines.get(n, "") for n in range(1, last + 1))


def _rechunk(settings: Settings, agent: str, path: str, body: dict[str, Any],
             chunks: list[ChunkData]) -> list[ChunkData]:
    chunker = Chunker.from_settings(settings, agent)
    text = file_text(chunks)
    for candidate in (text + "\n", text, text + "\r\n"):
        if hashlib.sha256(candidate.encode("utf-8")).hexdigest() == body["sha256"]:
            return chunker.chunk(candidate)
    try:  # not rebuildable from its chunks (a BOM, blank runs): the file itself, if it is still there
        found = Workspace(settings.agent(agent)).resolve(path)
        event = FileChanged(agent=agent, path=path, seq=body["seq"], root=str(found.root), rel=found.rel,
                            source=found.source, sha256="", size=0, mtime=0.0, origin="rebuild")
        read = chunk_file(event, settings)
    except MemorydError as exc:
        log.warning("agent %s: %s keeps its old chunks: %s", agent, path, exc)
        return chunks
    return read.chunks if isinstance(read, FileChunked) else chunks
