"""What the index holds against what is on disk: the events a survey of a workspace emits."""

from __future__ import annotations

import os
import stat

from memoryd.shared.config.settings import Settings
from memoryd.shared.config.workspace import MemoryFile, Skipped, file_sha256
from memoryd.shared.events import FileChanged, FileSkipped
from memoryd.shared.exceptions import IndexMissing
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
