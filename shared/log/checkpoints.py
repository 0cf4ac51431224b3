"""Checkpoints, retention and statistics of an agent's log: what keeps it bounded.

When a segment is sealed (the writer started the next one), :func:`compact` folds it on
top of the previous checkpoint and saves the state as ``snap-<segment>.json.gz``, listed in
``checkpoints.json``. A fold (:func:`fold`) starts from the newest checkpoint inside its cut,
so a replay reads at most the segments after it, however old the log. With
``memoryd.log.retentionDays`` > 0, sealed segments whose last event is older than that are
deleted once a checkpoint covers them; the oldest checkpoint left is then the oldest
moment a replay can reach, and content (texts, manifests) no kept checkpoint or segment
points at is deleted from the agent's content store.

``compact`` runs in the indexer (every ``LOG_COMPACT_SECONDS``), never concurrently with
itself (a lock file); folds only read.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import BadRequest
from memoryd.shared.index.content import ContentStore
from memoryd.shared.log.eventlog import content_path, log_dir, read, segment_path, segments
from memoryd.shared.log.fold import LogState, Until, fold_records

log = logging.getLogger("memoryd.checkpoints")

INDEX = "checkpoints.json"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def entries(directory: Path) -> list[dict[str, Any]]:
    """The checkpoints, oldest first: ``segment`` (folded through), ``file``, ``events``,
    ``last_at``, ``max_seq``."""
    try:
        return json.loads((directory / INDEX).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []


def load(directory: Path, entry: dict[str, Any]) -> LogState:
    with gzip.open(directory / entry["file"], "rb") as handle:
        return LogState.from_json(json.loads(handle.read()))


def oldest_point(directory: Path) -> dict[str, Any] | None:
    """The earliest moment a replay can reach: the log's first event while its first segment
    is kept, else the oldest checkpoint. None: an empty log."""
    segs = segments(directory)
    if segs and segs[0] == 1:
        first = next(read(directory), None)
        return None if first is None else {"at": first.at, "seq": first.seq, "from": "start of the log"}
    marks = entries(directory)
    if not marks:
        return None
    return {"at": marks[0]["last_at"], "seq": marks[0]["max_seq"], "from": f"checkpoint {marks[0]['file']}"}


def fold(settings: Settings, agent: str, until: Until | None = None) -> LogState:
    """The agent's log folded up to ``until`` (default: all of it), from the best checkpoint."""
    directory = log_dir(settings, agent)
    state = None
    for entry in reversed(entries(directory)):
        if until is None or until.admits(entry["last_at"], entry["max_seq"]):
            state = load(directory, entry)
            break
    if state is None:
        segs = segments(directory)
        if segs and segs[0] != 1:
            oldest = oldest_point(directory)
            raise BadRequest(f"agent {agent}: the log reaches back to {_when(oldest)} (older segments were "
                             "dropped by memoryd.log.retentionDays); ask for a later moment")
        state = LogState()
    return fold_records(state, read(directory, state.position), until)


def _when(point: dict[str, Any] | None) -> str:
    return "nothing" if point is None else time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(point["at"]))


def compact(settings: Settings, agent: str, now: float | None = None) -> dict[str, int]:
    """Checkpoint every sealed segment that has none; drop segments past retention; collect
    content nothing kept points at. → counts. A no-op while another process compacts."""
    directory = log_dir(settings, agent)
    if not directory.is_dir():
        return {}
    lock_fd = os.open(directory / "compact.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return {}
        return _compact(settings, agent, directory, time.time() if now is None else now)
    finally:
        os.close(lock_fd)


def _compact(settings: Settings, agent: str, directory: Path, now: float) -> dict[str, int]:
    segs = segments(directory)
    marks = entries(directory)
    done = {"checkpoints_written": 0, "segments_dropped": 0, "texts_removed": 0, "manifests_removed": 0}
    sealed = segs[:-1]
    state = load(directory, marks[-1]) if marks else None
    for number in sealed:
        if marks and number <= marks[-1]["segment"]:
            continue
        if state is None:
            if number != 1:
                log.warning("agent %s: segment %d has no checkpoint before it; not compacting", agent, number)
                return done
            state = LogState()
        fold_records(state, read(directory, state.position), stop_after_segment=number)
        name = f"snap-{number:08d}.json.gz"
        _write_atomic(directory / name, gzip.compress(json.dumps(state.to_json()).encode("utf-8")))
        marks.append({"segment": number, "file": name, "events": state.events, "last_at": state.last_at,
                      "max_seq": state.max_seq})
        done["checkpoints_written"] += 1
    if done["checkpoints_written"]:
        _write_atomic(directory / INDEX, json.dumps(marks, indent=1).encode("utf-8"))
    days = settings.memoryd.log.retention_days
    if days <= 0 or not marks:
        return done
    cutoff = now - days * 86400
    expired = [m for m in marks if m["segment"] in sealed and (m["last_at"] or 0) < cutoff]
    if not expired:
        return done
    keep_from = expired[-1]["segment"]  # its checkpoint becomes where replays start
    for number in sealed:
        if number <= keep_from:
            segment_path(directory, number).unlink(missing_ok=True)
            done["segments_dropped"] += 1
    kept = [m for m in marks if m["segment"] >= keep_from]
    _write_atomic(directory / INDEX, json.dumps(kept, indent=1).encode("utf-8"))
    for m in marks:
        if m["segment"] < keep_from:
            (directory / m["file"]).unlink(missing_ok=True)
    refs = set().union(*(load(directory, m).refs() for m in kept))
    refs |= {r.event["chunks"] for r in read(directory) if r.type in ("file.chunked", "chunks.embedded")}
    store = ContentStore(content_path(settings, agent))
    try:
        done.update(store.collect(refs))
    finally:
        store.close()
    log.info("agent %s: log compacted: %s", agent, done)
    return done


def stats(settings: Settings, agent: str) -> dict[str, Any]:
    """What ``memoryd log stats`` shows: size, events, checkpoints, the oldest replayable point."""
    directory = log_dir(settings, agent)
    segs = segments(directory)
    by_type: dict[str, int] = {}
    last_at = None
    for record in read(directory):
        by_type[record.type] = by_type.get(record.type, 0) + 1
        last_at = record.at
    marks = entries(directory)
    content = content_path(settings, agent)
    oldest = oldest_point(directory)
    return {
        "agent": agent,
        "log_dir": str(directory),
        "segments": len(segs),
        "bytes": sum(segment_path(directory, n).stat().st_size for n in segs),
        "events": sum(by_type.values()),
        "events_by_type": dict(sorted(by_type.items())),
        "checkpoints": len(marks),
        "checkpoint_bytes": sum((directory / m["file"]).stat().st_size for m in marks),
        "content_bytes": sum(p.stat().st_size for p in (content, Path(f"{content}-wal")) if p.exists()),
        "oldest_replayable": None if oldest is None else {**oldest, "iso": _when(oldest)},
        "newest": None if last_at is None else {"at": last_at, "iso": _when({"at": last_at})},
        "retention_days": settings.memoryd.log.retention_days,
    }
