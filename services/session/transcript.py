"""Session transcripts: ``<workspace>/sessions/<sessionId>.jsonl``, append-only.

One JSON object per line, camelCase, tagged by ``type``:

- ``message``: a user or assistant message, or a tool result (``role: tool``), with its
  timestamp and its tiktoken count;
- ``compaction``: the summary of the turns before ``firstKeptId``;
- ``flush_requested`` / ``flush``: the pre-compaction flush of one compaction cycle was
  asked for / done (``compactionCount`` names the cycle; ``error`` and ``unwritten`` when its
  notes could not be written);
- ``reset``: the session ended (``/new``, ``/reset``, daily or idle); what follows is a new
  conversation under the same id;
- ``memory_saved``: the session-memory hook saved its note for the ``reset`` ``resetId``.

Every counter ``memoryd session show`` prints is derived from these lines, so it survives
any restart. Appends take an exclusive ``flock`` and write the whole batch with one
``write`` on an ``O_APPEND`` descriptor: concurrent appenders never interleave or lose a
line. A line torn by a crash is logged and skipped when read, and the next append starts
on a fresh line.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from memoryd.shared.exceptions import BadRequest, validation_problems

log = logging.getLogger("memoryd.transcript")

SESSIONS_DIR = "sessions"
#: Session ids become file names: no separators, no leading dot.
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
Role = Literal["user", "assistant", "tool"]


def new_id() -> str:
    return uuid.uuid4().hex[:16]


class _Entry(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    id: str = Field(default_factory=new_id)
    #: ISO 8601 with the UTC offset of the clock that wrote it.
    ts: str

    @property
    def at(self) -> datetime:
        return datetime.fromisoformat(self.ts)


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    arguments: str = "{}"


class Message(_Entry):
    type: Literal["message"] = "message"
    role: Role
    content: str
    tokens: int
    #: Tool name, for ``role: tool``.
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None


class Compaction(_Entry):
    type: Literal["compaction"] = "compaction"
    summary: str
    #: The first message kept verbatim; None when every turn was summarised.
    first_kept_id: str | None = None
    tokens: int
    tokens_before: int
    tokens_after: int
    #: The compaction count this entry makes (1 for the session's first compaction).
    compaction_count: int
    manual: bool = False
    focus: str | None = None


class FlushRequested(_Entry):
    type: Literal["flush_requested"] = "flush_requested"
    compaction_count: int
    tokens: int


class Flushed(_Entry):
    type: Literal["flush"] = "flush"
    compaction_count: int
    tokens: int
    files: list[str] = []
    no_reply: bool = False
    #: Why the notes could not be written (the day's file is a symlink, read-only …); the
    #: cycle is closed all the same, so compaction goes on and the flush is not retried.
    error: str | None = None
    #: The notes that were not written, kept here to be copied over by hand.
    unwritten: str | None = None


class Reset(_Entry):
    type: Literal["reset"] = "reset"
    reason: Literal["daily", "idle", "new", "reset"]


class MemorySavedEntry(_Entry):
    type: Literal["memory_saved"] = "memory_saved"
    reset_id: str
    files: list[str]


Entry = Annotated[
    Message | Compaction | FlushRequested | Flushed | Reset | MemorySavedEntry, Field(discriminator="type")
]
_ENTRY: TypeAdapter[Entry] = TypeAdapter(Entry)


def dump(entry: _Entry) -> str:
    return json.dumps(entry.model_dump(by_alias=True, exclude_none=True), ensure_ascii=False,
                      separators=(",", ":"))


def session_path(workspace: Path, session: str) -> Path:
    if not SESSION_ID.match(session):
        raise BadRequest(f"session id {session!r} is not valid: use letters, digits and _ . : - "
                         "(at most 128 characters, starting with a letter or digit)")
    return workspace / SESSIONS_DIR / f"{session}.jsonl"


def parse_lines(raw: bytes, path: Path) -> list[Entry]:
    entries: list[Entry] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            entries.append(_ENTRY.validate_json(line))
        except ValidationError as exc:
            log.warning("%s:%d is not a transcript entry (torn by a crash?), skipped: %s",
                        path, number, validation_problems(exc))
    return entries


class Transcript:
    """One session's JSONL file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def of(cls, workspace: Path, session: str) -> Transcript:
        return cls(session_path(workspace, session))

    def exists(self) -> bool:
        return self.path.exists()

    def read_bytes(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""

    def read(self) -> list[Entry]:
        return parse_lines(self.read_bytes(), self.path)

    def append(self, *entries: _Entry) -> None:
        with self.locked() as locked:
            locked.append(*entries)

    @contextmanager
    def locked(self) -> Iterator[LockedTranscript]:
        """Hold the file's exclusive lock: read, decide and append without a race."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield LockedTranscript(self.path, fd)
        finally:
            os.close(fd)  # closing releases the lock


@dataclass
class LockedTranscript:
    path: Path
    fd: int
    _entries: list[Entry] | None = field(default=None, repr=False)

    @property
    def entries(self) -> list[Entry]:
        if self._entries is None:
            size = os.fstat(self.fd).st_size
            self._entries = parse_lines(os.pread(self.fd, size, 0), self.path)
        return self._entries

    def append(self, *entries: _Entry) -> None:
        if not entries:
            return
        data = "".join(dump(e) + "\n" for e in entries).encode("utf-8")
        size = os.fstat(self.fd).st_size
        if size and os.pread(self.fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # a crash tore the last line; never glue onto it
        written = 0
        while written < len(data):
            written += os.write(self.fd, data[written:])
        if self._entries is not None:
            self._entries.extend(entries)  # type: ignore[arg-type]


# --- what the counters are, derived from the entries ---------------------------------------
@dataclass
class Segment:
    """The entries since the last reset: the conversation the session id names now."""

    entries: list[Entry]
    resets: int
    started_at: str | None

    @property
    def compactions(self) -> list[Compaction]:
        return [e for e in self.entries if isinstance(e, Compaction)]

    @property
    def compaction_count(self) -> int:
        return len(self.compactions)

    @property
    def last_compaction(self) -> Compaction | None:
        found = self.compactions
        return found[-1] if found else None

    @property
    def memory_flush_compaction_count(self) -> int | None:
        """The compaction count at the last flush (OpenClaw's ``memoryFlushCompactionCount``)."""
        done = [e.compaction_count for e in self.entries if isinstance(e, Flushed)]
        return done[-1] if done else None

    def flush_requested(self, cycle: int) -> bool:
        return any(isinstance(e, FlushRequested | Flushed) and e.compaction_count == cycle for e in self.entries)

    def flushed(self, cycle: int) -> bool:
        return any(isinstance(e, Flushed) and e.compaction_count == cycle for e in self.entries)

    @property
    def last_flush(self) -> Flushed | None:
        done = [e for e in self.entries if isinstance(e, Flushed)]
        return done[-1] if done else None

    @property
    def messages(self) -> list[Message]:
        return [e for e in self.entries if isinstance(e, Message)]

    def live_messages(self) -> list[Message]:
        """Messages after the latest compaction: the turns still in context verbatim."""
        last = self.last_compaction
        if last is None:
            return self.messages
        ids = [e.id for e in self.entries]
        start = ids.index(last.id)
        live = [e for e in self.entries[start + 1:] if isinstance(e, Message)]
        if last.first_kept_id is None:
            return live
        kept = [e for e in self.entries[:start] if isinstance(e, Message)]
        cut = next((i for i, m in enumerate(kept) if m.id == last.first_kept_id), len(kept))
        return kept[cut:] + live

    @property
    def last_activity(self) -> datetime | None:
        msgs = self.messages
        return msgs[-1].at if msgs else None

    @property
    def last_request_at(self) -> datetime | None:
        """When the model last answered: the provider's prompt cache was written then."""
        answers = [m for m in self.messages if m.role == "assistant"]
        return answers[-1].at if answers else None


def segment(entries: Sequence[Entry]) -> Segment:
    resets = [i for i, e in enumerate(entries) if isinstance(e, Reset)]
    start = resets[-1] + 1 if resets else 0
    tail = list(entries[start:])
    started = tail[0].ts if tail else None
    return Segment(entries=tail, resets=len(resets), started_at=started)


def ended_segment(entries: Sequence[Entry], reset_id: str) -> list[Message]:
    """The messages of the conversation that the reset ``reset_id`` ended."""
    ids = [e.id for e in entries]
    if reset_id not in ids:
        return []
    end = ids.index(reset_id)
    begin = max((i for i in range(end) if isinstance(entries[i], Reset)), default=-1) + 1
    return [e for e in entries[begin:end] if isinstance(e, Message)]


def as_json(entry: _Entry) -> dict[str, Any]:
    return entry.model_dump(by_alias=True, exclude_none=True)
