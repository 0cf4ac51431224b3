"""``memoryd replay`` and ``asOf``: indexes folded from the log, now or as they were.

- :func:`replay` — the agent's index from its log: swapped in for the live one (the same
  side-by-side build as a rebuild), or written to ``--into PATH``; with ``--until`` the
  index as it was at that moment. Without ``--reembed`` no provider is called: vectors
  come from the vector store, and a log whose chunks or vectors do not match the
  configuration is refused with the fix.
- :func:`as_of_index` — the index as it was at a moment, for ``memory_search``'s ``asOf``:
  built once per distinct state under ``<state>/snapshots/<agent>/`` (keyed by what the
  state holds, so every moment between the same two events shares one file) and kept for
  the ``memoryd.log.asOfSnapshots`` most recently used.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import BadRequest, MemorydError
from memoryd.shared.index.store import IndexWriter
from memoryd.shared.index.vecfile import vec_path
from memoryd.shared.log.checkpoints import fold
from memoryd.shared.log.eventlog import EventLog
from memoryd.shared.log.fold import LogState, Until
from memoryd.shared.rebuild.materialize import Counts, Target, materialize, start_index
from memoryd.shared.rebuild.sidebyside import adopt, ensure_rebuildable, rebuild_slice, swap_in, temp_beside

SNAPSHOTS = "snapshots"


def replay(settings: Settings, agent: str, *, until: Until | None = None, into: Path | None = None,
           reembed: bool = False) -> dict[str, Any]:
    """Fold the agent's log into an index (see the module doc). → what was done, for ``--json``."""
    settings.agent(agent)
    ensure_rebuildable(settings, agent)
    started = time.monotonic()
    stores = EventLog(settings)
    try:
        adopt(settings, agent, stores)
        state = fold(settings, agent, until)
        target = (Target.configured(settings, agent, embed=reembed) if until is None or reembed
                  else historical(state))
        if not reembed:
            refuse_mismatch(agent, state, target)
        if into is None:
            if until is not None:
                raise BadRequest("--until builds the index of a past moment: give it a place with --into PATH "
                                 "(the live index always holds the latest state)")
            result = rebuild_slice(settings, agent, force=True, embed=reembed)
            if result.get("busy"):
                raise MemorydError(f"agent {agent}: a rebuild is running now; replay when it is done "
                                   "(`memoryd status` shows its job)")
            counts = {k: v for k, v in result.items() if k not in ("done", "busy", "rebuilt", "seconds")}
            written = settings.index_path(agent)
        else:
            counts = build(settings, agent, state, target, into, stores).as_dict()
            written = into
    finally:
        stores.close()
    return {"agent": agent, "into": str(written), "swapped": into is None, "until": until.label() if until else None,
            "events": state.events, **counts, "seconds": round(time.monotonic() - started, 3)}


def historical(state: LogState) -> Target:
    """The index as it was: each path's chunks as logged, vectors of the embedder most of them used."""
    bodies = [s.chunks for s in state.live().values() if s.chunks]
    embedders = Counter(b["embedder"] for b in bodies)
    embedder = embedders.most_common(1)[0][0] if embedders else "none"
    sample = next((b for b in bodies if b["embedder"] == embedder), {"provider": "none", "model": ""})
    return Target(None, embedder, sample["provider"], sample["model"])


def refuse_mismatch(agent: str, state: LogState, target: Target) -> None:
    """A replay without embedding cannot turn the log into an index of another chunker or model."""
    bodies = [(p, s.chunks) for p, s in state.live().items() if s.chunks]
    chunked = [p for p, b in bodies if target.chunker and b["chunker"] != target.chunker]
    embedded = [p for p, b in bodies if target.embedder != "none" and b["embedder"] != target.embedder]
    if chunked or embedded:
        what = []
        if chunked:
            what.append(f"{len(chunked)} files were chunked otherwise than {target.chunker!r} (e.g. {chunked[0]})")
        if embedded:
            what.append(f"{len(embedded)} files have vectors of another model than {target.embedder!r} "
                        f"(e.g. {embedded[0]})")
        raise BadRequest(f"agent {agent}: {'; '.join(what)}. Replay with --reembed to re-chunk and embed them "
                         "(vectors already stored are reused)")


def build(settings: Settings, agent: str, state: LogState, target: Target, into: Path,
          stores: EventLog) -> Counts:
    """Write ``state`` into a new index file at ``into`` (built beside it, then renamed)."""
    into.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_beside(into, "replay")
    counts = Counts()
    writer = IndexWriter(temp)
    try:
        start_index(writer, target.fingerprint(state), target.embedder)
        with writer.transaction():  # one commit: the vector file is written (and fitted) once
            materialize(settings, agent, state, writer, target, stores, counts)
        writer.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        writer.close()
    swap_in(temp, into)
    return counts


def as_of_index(settings: Settings, agent: str, as_of: str) -> Path:
    """The agent's index as it was at ``as_of`` (ISO time or sequence number), built if needed."""
    until = Until.parse(as_of)
    state = fold(settings, agent, until)
    if not state.files:
        raise BadRequest(f"agent {agent}: nothing was indexed by {as_of}; ask for a later moment "
                         f"(`memoryd log stats --agent {agent}` shows what the log holds)")
    target = historical(state)
    key = hashlib.sha256(json.dumps([target.embedder, sorted(
        (p, s.seq, s.status, s.chunks["chunks"] if s.chunks else None,
         s.chunks["vectors_missing"] if s.chunks else None) for p, s in state.files.items())]).encode()).hexdigest()
    folder = settings.data_dir / SNAPSHOTS / agent
    path = folder / f"{key[:24]}.sqlite"
    if path.exists():
        os.utime(path)
        return path
    stores = EventLog(settings)
    try:
        build(settings, agent, state, target, path, stores)
    finally:
        stores.close()
    kept = sorted(folder.glob("*.sqlite"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[settings.memoryd.log.as_of_snapshots:]:
        for side in (old, Path(f"{old}-wal"), Path(f"{old}-shm"), vec_path(old)):
            side.unlink(missing_ok=True)
    return path
