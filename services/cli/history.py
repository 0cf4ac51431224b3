"""``memoryd log diff``: which memory lines were added, changed or removed between two
moments, and by which event — the audit trail of an agent's memory.

The log is folded up to the first moment; every index-stage event after it, up to the
second, that changes what a path holds is one change: the path's lines before and after
(rebuilt from the chunks, see ``materialize.file_text``), compared line by line. Each
change names its event (type, sequence number, time) and who wrote the file: the
``origin`` of the ``file.changed`` / ``file.deleted`` of that sequence number (the watcher
saw it: ``watch``; a periodic reconcile: ``reconcile``; ``memoryd index``: ``index``), and
a session that logged writing that file (``session.flushed`` / ``session.memory_saved``)
since the path's previous change.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from memoryd.shared.config.settings import Settings
from memoryd.shared.events import ChunkData
from memoryd.shared.index.content import ContentStore
from memoryd.shared.log.checkpoints import fold
from memoryd.shared.log.eventlog import EventLog, Record, log_dir, read
from memoryd.shared.log.fold import INDEX_EVENTS, FileState, Until
from memoryd.shared.rebuild.materialize import file_text

#: Who an origin means, for people reading the trail.
WRITERS = {"watch": "watcher", "reconcile": "watcher (reconcile)", "index": "CLI (memoryd index)",
           "inline": "in-process index", "chunker": "watcher", "adopted": "adopted from an older index"}
SESSION_WRITERS = {"session.flushed": "session flush", "session.memory_saved": "session memory hook"}


@dataclass
class _Author:
    origins: dict[tuple[str, int], str]
    sessions: dict[str, tuple[str, str]]  # path → (writer, session) not yet claimed by a change

    def of(self, path: str, seq: int) -> tuple[str | None, str]:
        origin = self.origins.get((path, seq))
        session = self.sessions.pop(path, None)
        if session is not None:
            return origin, f"{session[0]} (session {session[1]})"
        return origin, WRITERS.get(origin or "", origin or "unknown")

    def note(self, record: Record) -> None:
        body = record.event
        if record.type in ("file.changed", "file.deleted") and record.seq is not None:
            self.origins[(body["path"], record.seq)] = body.get("origin", "watch")
        elif record.type in SESSION_WRITERS:
            for path in body.get("files", []):
                self.sessions[path] = (SESSION_WRITERS[record.type], body["session"])


def _lines(content: ContentStore, state: FileState | None) -> list[str]:
    if state is None or state.status == "deleted" or state.chunks is None:
        return []
    refs = content.manifest(state.chunks["chunks"])
    texts = content.texts(c.hash for c in refs)
    chunks = [ChunkData(hash=c.hash, start_line=c.start_line, end_line=c.end_line, tokens=c.tokens,
                        text=texts.get(c.hash, "")) for c in refs]
    return file_text(chunks).split("\n") if chunks else []


def line_changes(old: list[str], new: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Lines added, removed and changed (a removed line replaced in place by another)."""
    out: dict[str, list[dict[str, Any]]] = {"added": [], "removed": [], "changed": []}
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op in ("replace", "delete", "insert"):
            pairs = min(i2 - i1, j2 - j1) if op == "replace" else 0
            for k in range(pairs):
                out["changed"].append({"line": j1 + k + 1, "old": old[i1 + k], "new": new[j1 + k]})
            out["removed"] += [{"line": i + 1, "text": old[i]} for i in range(i1 + pairs, i2)]
            out["added"] += [{"line": j + 1, "text": new[j]} for j in range(j1 + pairs, j2)]
    return out


def diff(settings: Settings, agent: str, since: Until, until: Until | None = None) -> dict[str, Any]:
    """The changes to the agent's memory after ``since`` up to ``until`` (default: now)."""
    state = fold(settings, agent, since)
    author = _Author({}, {})
    changes: list[dict[str, Any]] = []
    stores = EventLog(settings)
    content = stores.content(agent)
    try:
        for record in read(log_dir(settings, agent)):
            if until is not None and until.past(record):
                break
            if since.includes(record) or (until is not None and not until.includes(record)):
                author.note(record)  # who wrote what before the window, for changes inside it
                continue
            author.note(record)
            if record.type not in INDEX_EVENTS or record.path is None or record.seq is None:
                if record.type == "vectors.filled":
                    state.apply(record)
                continue
            path = record.path
            before = state.files.get(path)
            old = _lines(content, before)
            state.apply(record)
            after = state.files.get(path)
            if after is before:
                continue  # stale: the index kept the newer version
            new = _lines(content, after)
            lines = line_changes(old, new)
            if not any(lines.values()) and (before.status if before else "deleted") == after.status:
                continue  # the same lines again (a touch, a re-save)
            origin, writer = author.of(path, record.seq)
            changes.append({"path": path, "event": record.type, "status": after.status, "seq": record.seq,
                            "at": record.at, "origin": origin, "writer": writer, **lines})
    finally:
        stores.close()
    return {
        "agent": agent, "since": since.label(), "until": until.label() if until else None, "changes": changes,
        "summary": {"changes": len(changes), "files": len({c["path"] for c in changes}),
                    "lines_added": sum(len(c["added"]) for c in changes),
                    "lines_removed": sum(len(c["removed"]) for c in changes),
                    "lines_changed": sum(len(c["changed"]) for c in changes)},
    }
