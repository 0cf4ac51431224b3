"""What the index holds against what is on disk: the one survey, and the events it emits.

:func:`plan` walks an agent's workspace, compares every file with what its index holds and
returns the events that bring the index up to date: files changed (or every file, for
``memoryd index``), files gone, and what the walk skipped with the reason. The watcher's
reconcile and ``memoryd index`` both use it, so they find the same changes by the same rules,
and every event is numbered by the bus (:meth:`Bus.next_seq`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.workspace import MemoryFile, Skipped, Workspace, file_sha256
from memoryd.shared.events import FileChanged, FileDeleted, FileSkipped
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.index.chunking import read_file
from memoryd.shared.index.store import IndexReader
from memoryd.shared.runtime.bus import Bus


def indexed_hashes(settings: Settings, agent_id: str) -> dict[str, str]:
    try:
        reader = IndexReader(settings.index_path(agent_id))
    except IndexMissing:
        return {}
    try:
        return reader.live_hashes()
    finally:
        reader.close()


def skipped_event(agent_id: str, skipped: Skipped, seq: int, run: str | None = None) -> FileSkipped:
    """The index entry for what a workspace survey skipped (a name that is not UTF-8, a folder too
    deep): ``memoryd status`` lists it with the reason. Its sha256 is "", so a reconcile that finds
    it recorded already emits nothing."""
    return FileSkipped(agent=agent_id, path=skipped.path, seq=seq, run=run, source=skipped.source, sha256="",
                       size=0, mtime=0.0, reason=skipped.reason)


def changed_event(bus: Bus, agent_id: str, found: MemoryFile, *, origin: str,
                  run: str | None = None) -> FileChanged | None:
    """A FileChanged for ``found`` as it is on disk now; None if it vanished or is no file."""
    try:
        st = os.lstat(found.absolute)
        if not stat.S_ISREG(st.st_mode):
            return None
        sha = file_sha256(found.absolute)
    except OSError:
        return None
    return FileChanged(agent=agent_id, path=found.path, seq=bus.next_seq(agent_id), run=run, root=str(found.root),
                       rel=found.rel, source=found.source, sha256=sha, size=st.st_size, mtime=st.st_mtime,
                       origin=origin)


def emit_changed(bus: Bus, settings: Settings, events: Sequence[FileChanged], *, bulk: bool | None = None) -> None:
    """Read each changed file here, on the node whose workspace holds it, and send its text to the
    chunkers (which need no workspace: any node's will do); what the reading found skipped or gone
    goes to the index."""
    read: list[FileChanged] = []
    other: list[FileSkipped | FileDeleted] = []
    for event in events:
        result = read_file(event, settings)
        (read if isinstance(result, FileChanged) else other).append(result)
    bus.emit("chunk", read, bulk=bulk)
    bus.emit("index", other, bulk=bulk)


@dataclass
class Plan:
    """The events that make an agent's index match its workspace."""

    changed: list[FileChanged] = field(default_factory=list)
    gone: list[FileDeleted] = field(default_factory=list)
    skipped: list[FileSkipped] = field(default_factory=list)
    #: Every file on disk → its sha256 now (changed or not), for a caller that remembers what it sent.
    on_disk: dict[str, str] = field(default_factory=dict)

    @property
    def files(self) -> int:
        """How many files the plan's events are about."""
        return len(self.changed) + len(self.gone) + len(self.skipped)


def plan(bus: Bus, settings: Settings, agent_id: str, *, origin: str, run: str | None = None, every: bool = False,
         between: Callable[[], None] | None = None) -> Plan:
    """Survey the agent's workspace against its index.

    - changed: the files whose sha256 is not the one the index holds (``every``: all files);
    - gone: the paths the index holds that are no longer on disk nor skipped;
    - skipped: what the walk skipped (a name that is not UTF-8, a folder too deep), unless the
      index records it as skipped already (``every``: all of them).

    ``between`` is called after every FILES_PER_CHUNK_JOB files hashed: the watcher settles
    other agents' edits there, so surveying a 10,000-file import does not hold them up.
    """
    indexed = indexed_hashes(settings, agent_id)
    survey = Workspace(settings.agent(agent_id)).survey()
    found = Plan(skipped=[skipped_event(agent_id, s, bus.next_seq(agent_id), run) for s in survey.skipped
                          if every or indexed.get(s.path) != ""])  # "" = recorded as skipped already
    for n, file in enumerate(survey.files, start=1):
        event = changed_event(bus, agent_id, file, origin=origin, run=run)
        if event is not None:
            found.on_disk[file.path] = event.sha256
            if every or indexed.get(file.path) != event.sha256:
                found.changed.append(event)
        if between is not None and n % d.FILES_PER_CHUNK_JOB == 0:
            between()
    present = {f.path for f in survey.files} | {s.path for s in survey.skipped}
    found.gone = [FileDeleted(agent=agent_id, path=path, seq=bus.next_seq(agent_id), run=run, origin=origin)
                  for path in sorted(set(indexed) - present)]
    return found
