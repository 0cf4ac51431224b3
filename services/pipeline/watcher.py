"""Watcher service: file changes in every agent's workspace → ``FileChanged`` / ``FileDeleted``.

watchdog (inotify) reports changes; each file is debounced (default 1.5 s after its last
write) so a burst of writes is one event; editors' atomic saves (write a temp file,
rename it over the original) arrive as a move onto a memory file and are seen as a
change. Symlinks are never followed. On start, and every ``reconcileSeconds`` (5 min),
a reconcile compares every memory file's sha256 with what the index holds and emits
the differences — inotify can silently miss events or run out of watches.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from memoryd.shared import defaults as d
from memoryd.shared.bus import Bus
from memoryd.shared.config import Settings
from memoryd.shared.events import FileChanged, FileDeleted
from memoryd.shared.indexing import changed_event, indexed_hashes, skipped_event
from memoryd.shared.workspace import Workspace, is_utf8

log = logging.getLogger("memoryd.watcher")


class AgentWatch(FileSystemEventHandler):
    """One agent: its debounce table, what it last emitted, its reconcile."""

    def __init__(self, settings: Settings, agent_id: str, bus: Bus) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self.bus = bus
        self.workspace = Workspace(settings.agent(agent_id))
        sync = settings.agent(agent_id).memory_search.sync
        self.debounce = sync.watch_debounce_ms / 1000
        self.reconcile_every = sync.reconcile_seconds
        self.pending: dict[Path, float] = {}
        self.emitted: dict[str, str] = {}  # path → sha last emitted ("" = deleted)
        self.lock = threading.Lock()
        self.reconcile_wanted = threading.Event()

    # --- watchdog callbacks (observer thread) -----------------------------------------
    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory:
            if event.event_type in ("moved", "deleted", "created"):
                self.reconcile_wanted.set()  # a folder came or went: look at everything
            return
        paths = [event.src_path, getattr(event, "dest_path", "") or ""]
        now = time.monotonic()
        with self.lock:
            for raw in paths:
                if raw:
                    path = Path(os.fsdecode(raw))
                    if self.workspace.classify(path) is not None:
                        self.pending[path] = now + self.debounce
                    elif path.suffix.lower() == ".md" and not is_utf8(str(path)):
                        self.reconcile_wanted.set()  # a name that is not UTF-8: the reconcile reports it

    # --- the debounce loop (main thread) ----------------------------------------------
    def due(self) -> list[Path]:
        now = time.monotonic()
        with self.lock:
            ready = [p for p, deadline in self.pending.items() if deadline <= now]
            for p in ready:
                del self.pending[p]
        return ready

    def settle(self, path: Path) -> None:
        found = self.workspace.classify(path)
        if found is None:
            return
        event = changed_event(self.bus, self.agent_id, found, origin="watch")
        if event is None:
            if self.emitted.get(found.path, None) == "" or (
                found.path not in self.emitted and found.path not in indexed_hashes(self.settings, self.agent_id)
            ):
                return
            self.emitted[found.path] = ""
            self.bus.emit("index", [FileDeleted(agent=self.agent_id, path=found.path,
                                                seq=self.bus.next_seq(self.agent_id))])
            return
        if self.emitted.get(found.path) == event.sha256:
            return  # touched, not changed
        self.emitted[found.path] = event.sha256
        self.bus.emit("chunk", [event])

    def reconcile(self) -> tuple[int, int]:
        """Emit every file whose sha256 differs from the index, delete what is gone. → (changed, deleted)."""
        indexed = indexed_hashes(self.settings, self.agent_id)
        changed: list[FileChanged] = []
        survey = self.workspace.survey()
        present = {s.path for s in survey.skipped}
        skipped = [skipped_event(self.agent_id, s, self.bus.next_seq(self.agent_id))
                   for s in survey.skipped if indexed.get(s.path) != ""]  # "" = recorded as skipped already
        for found in survey.files:
            present.add(found.path)
            event = changed_event(self.bus, self.agent_id, found, origin="reconcile")
            if event is not None and indexed.get(found.path) != event.sha256:
                changed.append(event)
                self.emitted[found.path] = event.sha256
            elif event is not None:
                self.emitted[found.path] = event.sha256
        for start in range(0, len(changed), d.FILES_PER_CHUNK_JOB):
            self.bus.emit("chunk", changed[start:start + d.FILES_PER_CHUNK_JOB])
        gone = [FileDeleted(agent=self.agent_id, path=p, seq=self.bus.next_seq(self.agent_id), origin="reconcile")
                for p in sorted(set(indexed) - present)]
        for p in gone:
            self.emitted[p.path] = ""
        self.bus.emit("index", [*skipped, *gone])
        self.bus.note_reconciled(self.agent_id)
        if changed or gone or skipped:
            log.info("agent %s: reconcile emitted %d changed, %d deleted, %d skipped", self.agent_id, len(changed),
                     len(gone), len(skipped))
        return len(changed), len(gone)


def run(settings: Settings, bus: Bus, stop: threading.Event | None = None) -> None:
    """Watch every configured agent until ``stop`` is set (or forever)."""
    from memoryd.shared.bootstrap import ensure_workspace

    stop = stop or threading.Event()
    # watchdog adds inotify watches with os.walk, which recurses once per folder level
    # here: a tree ~1,000 levels deep must not raise RecursionError in its threads.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), d.WATCH_RECURSION_LIMIT))
    observer = Observer()
    watches: list[AgentWatch] = []
    for agent_id in settings.agent_ids():
        ensure_workspace(settings.agent(agent_id))
        watch = AgentWatch(settings, agent_id, bus)
        watches.append(watch)
        if not settings.agent(agent_id).memory_search.sync.watch:
            log.warning("agent %s: sync.watch is off; only the periodic reconcile sees changes", agent_id)
            continue
        for directory in watch.workspace.watch_dirs():
            if directory.is_dir():
                observer.schedule(watch, str(directory), recursive=True)
            else:
                log.warning("agent %s: %s does not exist; it is not watched", agent_id, directory)
    observer.start()
    try:
        next_reconcile = {w.agent_id: 0.0 for w in watches}
        while not stop.is_set():
            now = time.monotonic()
            for w in watches:
                if now >= next_reconcile[w.agent_id] or w.reconcile_wanted.is_set():
                    w.reconcile_wanted.clear()
                    w.reconcile()
                    next_reconcile[w.agent_id] = time.monotonic() + w.reconcile_every
                for path in w.due():
                    w.settle(path)
            if not observer.is_alive():
                raise RuntimeError("the file observer thread died; restart `memoryd watcher`")
            stop.wait(d.WATCH_TICK_SECONDS)
    finally:
        observer.stop()
        observer.join(timeout=5)
