"""The events: the only contract between stages (see docs/events.md).

Every event is a pydantic model with a ``type`` tag and a ``version``. Each stage reads
its input event, does one job and emits its output event. Every event is also appended
to the agent's durable log on disk (``memoryd.shared.log.eventlog``), texts and vectors stored
once by hash, so an index can be rebuilt by replaying it: ``FileChunked`` carries the chunk
texts, ``ChunksEmbedded`` the vectors, so replay needs neither the files nor a provider.
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = SCHEMA_VERSION
    event_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    emitted_at: float = Field(default_factory=time.time)
    agent: str


class FileEvent(Event):
    #: Workspace-relative POSIX path (``memory/2026-01-20.md``), or ``<source>/…`` for an
    #: extraPath outside the workspace. Never absolute, never ``..``.
    path: str
    #: Per-agent sequence number: strictly increasing, survives a Redis restart (see bus.next_seq).
    seq: int
    #: The ``memoryd index`` run that caused it, so the CLI can count its progress.
    run: str | None = None


class FileChanged(FileEvent):
    type: Literal["file.changed"] = "file.changed"
    #: Absolute directory ``path`` is relative to (the workspace or the extraPath root).
    root: str
    #: Path of the file inside ``root`` (differs from ``path`` for outside extraPaths).
    rel: str
    source: str = "memory"
    sha256: str
    size: int
    mtime: float
    #: What saw it: "watch", "reconcile" or "index" (the CLI).
    origin: str = "watch"
    #: The file's text, read by the node whose workspace holds it (shared/index/chunking.read_file),
    #: so a chunker needs no workspace; never logged. None: the chunker reads the file itself.
    text: str | None = None


class FileDeleted(FileEvent):
    type: Literal["file.deleted"] = "file.deleted"
    origin: str = "watch"


class ChunkData(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hash: str
    start_line: int
    end_line: int
    #: Counted line by line (see Chunker._make): at least tiktoken's count of ``text``.
    tokens: int
    text: str


class _Chunked(FileEvent):
    """A file as the chunker cut it: what FileChunked and ChunksEmbedded both carry."""

    source: str
    sha256: str
    size: int
    mtime: float
    #: Chunker settings + tokenizer the chunks were made with (part of the index fingerprint).
    chunker: str
    chunks: list[ChunkData]


class FileChunked(_Chunked):
    type: Literal["file.chunked"] = "file.chunked"


class FileSkipped(FileEvent):
    """A file that looks like memory but cannot be indexed; the last good version stays."""

    type: Literal["file.skipped"] = "file.skipped"
    source: str
    sha256: str
    size: int
    mtime: float
    reason: str


class VectorData(BaseModel):
    """All window vectors of one chunk, float32, row-major, base64 (JSON-safe and compact)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hash: str
    windows: int
    dims: int
    data: str

    @classmethod
    def pack(cls, chunk_hash: str, matrix: np.ndarray) -> VectorData:
        m = np.ascontiguousarray(matrix, dtype=np.float32)
        if m.ndim == 1:
            m = m[None, :]
        return cls(hash=chunk_hash, windows=m.shape[0], dims=m.shape[1],
                   data=base64.b64encode(m.tobytes()).decode("ascii"))

    def matrix(self) -> np.ndarray:
        raw = np.frombuffer(base64.b64decode(self.data), dtype=np.float32)
        return raw.reshape(self.windows, self.dims)


class ChunksEmbedded(_Chunked):
    type: Literal["chunks.embedded"] = "chunks.embedded"
    #: Provider fingerprint the vectors belong to ("local:all-MiniLM-L6-v2-int8:384:w96/24").
    embedder: str
    provider: str
    model: str
    #: One entry per chunk that has a vector; chunks without one are indexed "vector missing".
    vectors: list[VectorData]
    cached: int
    embedded: int
    error: str | None = None


class VectorsFilled(Event):
    """Vectors for chunks that were indexed without them (the provider was down)."""

    type: Literal["vectors.filled"] = "vectors.filled"
    embedder: str
    vectors: list[VectorData]
    embedded: int


class IndexApplied(FileEvent):
    type: Literal["index.applied"] = "index.applied"
    action: Literal["replaced", "deleted", "skipped", "stale"]
    sha256: str | None = None
    chunks: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    vectors_missing: int = 0
    reason: str | None = None


class SessionEvent(Event):
    session: str
    tokens: int = 0


class FlushRequested(SessionEvent):
    type: Literal["session.flush_requested"] = "session.flush_requested"
    compaction_count: int


class MemoryFlushed(SessionEvent):
    type: Literal["session.flushed"] = "session.flushed"
    files: list[str] = []
    no_reply: bool = False


class FlushFailed(SessionEvent):
    """The flush's notes could not be written (the day's file is a symlink, read-only …); the
    cycle is closed anyway and the notes are kept in the transcript's ``flush`` entry."""

    type: Literal["session.flush_failed"] = "session.flush_failed"
    compaction_count: int
    path: str
    reason: str


class Compacted(SessionEvent):
    type: Literal["session.compacted"] = "session.compacted"
    tokens_before: int
    tokens_after: int
    compaction_count: int
    manual: bool = False


class Pruned(SessionEvent):
    type: Literal["session.pruned"] = "session.pruned"
    soft_trimmed: int
    hard_cleared: int


class SessionReset(SessionEvent):
    type: Literal["session.reset"] = "session.reset"
    reason: Literal["daily", "idle", "new", "reset"]


class MemorySaved(SessionEvent):
    type: Literal["session.memory_saved"] = "session.memory_saved"
    files: list[str]


class HeartbeatRan(Event):
    """One heartbeat of an agent read its recent daily logs (see docs/sessions.md, "Heartbeat")."""

    type: Literal["heartbeat.ran"] = "heartbeat.ran"
    #: The daily logs read (workspace-relative), oldest first.
    files: list[str]
    #: Lines that could be promoted (after the noise, secrets and other agents' lines were dropped).
    lines: int
    #: Groups of lines that recur on at least memoryDays days.
    recurring: int
    #: The ids of the proposals this heartbeat made.
    proposed: list[str] = []
    #: Who phrased the notes: "extractive" or "openai-compatible:<model>".
    phrased_by: str


class Occurrence(BaseModel):
    """Where a statement was seen: a line of a daily log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    line: int
    text: str


class PromotionProposed(Event):
    """A recurring statement proposed for MEMORY.md, SOUL.md or TOOLS.md, waiting for a person."""

    type: Literal["promotion.proposed"] = "promotion.proposed"
    proposal_id: str
    target: Literal["MEMORY.md", "SOUL.md", "TOOLS.md"]
    text: str
    #: One per day it was seen on, oldest first.
    sources: list[Occurrence]


class PromotionAccepted(Event):
    type: Literal["promotion.accepted"] = "promotion.accepted"
    proposal_id: str
    target: Literal["MEMORY.md", "SOUL.md", "TOOLS.md"]
    #: The line of the target file that now holds it.
    line: int
    #: The workspace's git commit of the change; None when the workspace is not a git repository.
    commit: str | None = None


class PromotionRejected(Event):
    type: Literal["promotion.rejected"] = "promotion.rejected"
    proposal_id: str
    reason: str | None = None


AnyEvent = Annotated[
    FileChanged | FileDeleted | FileChunked | FileSkipped | ChunksEmbedded | VectorsFilled | IndexApplied
    | FlushRequested | MemoryFlushed | FlushFailed | Compacted | Pruned | SessionReset | MemorySaved
    | HeartbeatRan | PromotionProposed | PromotionAccepted | PromotionRejected,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)


def parse_event(raw: str | bytes) -> AnyEvent:
    """Any event from its JSON; a wrong ``type`` or field names what is wrong, and an event of a newer
    schema than this memoryd's (a log written by a later release) is refused rather than misread."""
    event = _ADAPTER.validate_json(raw)
    if event.version > SCHEMA_VERSION:
        raise ValueError(f"{event.type} event {event.event_id} of agent {event.agent} has schema version "
                         f"{event.version}; this memoryd reads up to {SCHEMA_VERSION}: upgrade memoryd to read it")
    return event
