"""Folding an agent's log into the state its index should hold: per path, the event that
decides it (same rule as ``memoryd.shared.index.apply.apply``: an event older, by sequence
number, than what the path holds is stale), plus the work logged but not yet at the index.

The state is small — event bodies that carry hashes — so folding a log is fast; turning
it into an index (texts, vectors, SQLite) is ``memoryd.shared.rebuild.replay``. A checkpoint is
this state saved after a sealed segment (``memoryd.shared.log.checkpoints``): a fold starts
from the newest checkpoint that fits and reads at most the segments after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from datetime import time as dtime
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.exceptions import BadRequest
from memoryd.shared.log.eventlog import START, Position, Record

#: Events that change an index, and the ones before them that are work in flight.
INDEX_EVENTS = ("chunks.embedded", "file.deleted", "file.skipped")
INFLIGHT_EVENTS = ("file.changed", "file.chunked")


@dataclass(frozen=True)
class Until:
    """Where a fold stops: records appended at or before ``at`` (a Unix time), or file events
    whose sequence number is at most ``seq`` (others by time: a seq is µs since the epoch)."""

    at: float | None = None
    seq: int | None = None

    @classmethod
    def parse(cls, text: str) -> Until:
        """``2026-03-03`` (the end of that day, local time), ``2026-03-03T12:00:00+01:00``, or a
        sequence number (digits only)."""
        text = text.strip()
        if text.isdigit():
            return cls(seq=int(text))
        try:
            if len(text) == 10:
                when = datetime.combine(datetime.fromisoformat(text).date(), dtime.max)
            else:
                when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise BadRequest(f"cannot read {text!r} as a moment: give an ISO date or time "
                             "(2026-03-03, 2026-03-03T12:00:00Z) or a sequence number") from None
        return cls(at=when.timestamp())

    def includes(self, record: Record) -> bool:
        if self.seq is not None:
            return record.seq <= self.seq if record.seq is not None else record.at * 1_000_000 <= self.seq
        return self.at is None or record.at <= self.at

    def past(self, record: Record) -> bool:
        """Whether no later record can be included any more (time cuts only)."""
        return self.at is not None and record.at > self.at + d.LOG_CLOCK_SLACK_SECONDS

    def admits(self, last_at: float | None, max_seq: int) -> bool:
        """Whether a state folded up to ``last_at`` / ``max_seq`` is all inside this cut (a
        checkpoint of it may start the fold)."""
        if self.seq is not None:
            return max_seq <= self.seq and (last_at or 0) * 1_000_000 <= self.seq
        return self.at is None or (last_at or 0) <= self.at

    def label(self) -> str | None:
        if self.seq is not None:
            return str(self.seq)
        return None if self.at is None else datetime.fromtimestamp(self.at).astimezone().isoformat()


@dataclass
class FileState:
    """One path: the index-stage event that decides it and, unless deleted, the chunks it holds
    (a skipped file keeps its last indexed version). ``at``: when that event was logged."""

    seq: int
    status: str  # indexed | skipped | deleted
    at: float
    event: dict[str, Any]
    chunks: dict[str, Any] | None

    def to_json(self) -> list[Any]:
        return [self.seq, self.status, self.at, self.event, self.chunks]

    @classmethod
    def from_json(cls, raw: list[Any]) -> FileState:
        return cls(*raw)


@dataclass
class LogState:
    files: dict[str, FileState] = field(default_factory=dict)
    #: path → body of the latest file.changed / file.chunked newer than what the path holds.
    inflight: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Where the next record to fold starts.
    position: Position = START
    events: int = 0
    first_at: float | None = None
    last_at: float | None = None
    max_seq: int = 0

    def apply(self, record: Record) -> None:
        body = record.event
        kind = record.type
        self.events += 1
        self.first_at = record.at if self.first_at is None else self.first_at
        self.last_at = record.at if self.last_at is None else max(self.last_at, record.at)
        self.position = record.after
        seq = record.seq
        if seq is not None:
            self.max_seq = max(self.max_seq, seq)
        if kind == "vectors.filled":
            self._fill(body)
            return
        path = record.path
        if path is None or seq is None:
            return  # session events: in the log, not in an index
        held = self.files.get(path)
        if kind in INFLIGHT_EVENTS:
            waiting = self.inflight.get(path)
            newer = held is None or seq > held.seq
            rank = (seq, INFLIGHT_EVENTS.index(kind))
            if newer and (waiting is None or rank >= (waiting["seq"], INFLIGHT_EVENTS.index(waiting["type"]))):
                self.inflight[path] = body
            return
        if kind not in INDEX_EVENTS:
            return
        waiting = self.inflight.get(path)
        if waiting is not None and waiting["seq"] <= seq:
            del self.inflight[path]
        if held is not None and held.seq > seq:
            return  # stale, as apply() drops it
        if kind == "chunks.embedded":
            self.files[path] = FileState(seq, "indexed", record.at, body, body)
        elif kind == "file.deleted":
            self.files[path] = FileState(seq, "deleted", record.at, body, None)
        else:
            self.files[path] = FileState(seq, "skipped", record.at, body, held.chunks if held else None)

    def _fill(self, body: dict[str, Any]) -> None:
        filled = set(body["vectors"])
        for state in self.files.values():
            chunks = state.chunks
            if chunks and chunks["embedder"] == body["embedder"] and chunks["vectors_missing"]:
                left = [h for h in chunks["vectors_missing"] if h not in filled]
                if len(left) != len(chunks["vectors_missing"]):
                    state.chunks = {**chunks, "vectors_missing": left}
                    if state.event is chunks:
                        state.event = state.chunks

    def live(self) -> dict[str, FileState]:
        """Paths whose chunks an index holds (indexed, or skipped with an earlier version)."""
        return {p: s for p, s in self.files.items() if s.chunks is not None}

    def refs(self) -> set[str]:
        """Every manifest this state points at (what the content store must keep)."""
        refs = {s.chunks["chunks"] for s in self.files.values() if s.chunks}
        return refs | {b["chunks"] for b in self.inflight.values() if b["type"] == "file.chunked"}

    def to_json(self) -> dict[str, Any]:
        return {"files": {p: s.to_json() for p, s in self.files.items()}, "inflight": self.inflight,
                "position": list(self.position), "events": self.events, "first_at": self.first_at,
                "last_at": self.last_at, "max_seq": self.max_seq}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> LogState:
        return cls(files={p: FileState.from_json(v) for p, v in raw["files"].items()}, inflight=raw["inflight"],
                   position=(raw["position"][0], raw["position"][1]), events=raw["events"],
                   first_at=raw["first_at"], last_at=raw["last_at"], max_seq=raw["max_seq"])


def fold_records(state: LogState, records: Iterable[Record], until: Until | None = None,
                 stop_after_segment: int | None = None) -> LogState:
    """Fold ``records`` into ``state`` (in place; → it) up to ``until`` / the end of a segment."""
    for record in records:
        if stop_after_segment is not None and record.segment > stop_after_segment:
            break
        if until is not None:
            if until.past(record):
                break
            if not until.includes(record):
                continue
        state.apply(record)
    return state
