"""Watcher service: file changes in every agent's workspace → ``FileChanged`` / ``FileDeleted``.

watchdog (inotify) reports changes; each file is debounced (default 1.5 s after its last
write) so a burst of writes is one event; editors' atomic saves (write a temp file,
rename it over the original) arrive as a move onto a memory file and are seen as a
change. Symlinks are never followed. On start, and every ``reconcileSeconds`` (5 min),
a reconcile compares every memory file's sha256 with what the index holds and emits
the differences — inotify can silently miss events or run out of watches.

A node's watcher watches the agents whose lease its node holds (shared/rebuild/takeover.py):
every LEASE_RENEW_SECONDS it renews them, takes the free ones it can serve — a takeover
re-drives the agent's lost work from its log and reconciles it at once — and stops
watching the ones another node took.

The watcher follows the agent list while it runs: when the agent registry
(``<stateDir>/agents.json``) or the config file changes, it starts watching new agents
(and reconciles them) and stops watching removed ones. It outlives Redis: when an emit
fails it waits for Redis with backoff and then reconciles every agent, so a change saved
during the outage is emitted once Redis is back; and it notices a Redis that lost its
data (restarted empty, ``FLUSHALL``) by a marker key it keeps there, and reconciles at once.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from memoryd.shared import defaults as d
from memoryd.shared.config import registry
from memoryd.shared.config.bootstrap import ensure_workspace
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.workspace import Workspace, is_utf8
from memoryd.shared.events import FileChanged, FileDeleted
from memoryd.shared.exceptions import ConfigError, NotOwner
from memoryd.shared.index import languages
from memoryd.shared.rebuild.takeover import Keeper
from memoryd.shared.redact import redact
from memoryd.shared.runtime import runs
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.redis_server import wait_for_redis
from memoryd.shared.runtime.survey import changed_event, emit_changed, indexed_hashes, plan

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
        #: The edit lane's budget (shared/runtime/bus.py): files this agent may still put on it now.
        self.edit_budget = d.EDIT_LANE_FILES_PER_SECOND
        self.budget_at = time.monotonic()
        self.bulk_batch: list[FileChanged] = []  # settled files for the bulk lane, sent by flush()

    def edit_lane(self) -> bool:
        """Whether one more settled file may take the edit lane: at most EDIT_LANE_FILES_PER_SECOND
        a second (as many at once). Past it the agent is importing or copying files, which go on
        the bulk lane, so one agent's flood never delays another agent's edit."""
        now = time.monotonic()
        rate = d.EDIT_LANE_FILES_PER_SECOND
        self.edit_budget = min(rate, self.edit_budget + (now - self.budget_at) * rate)
        self.budget_at = now
        if self.edit_budget < 1:
            return False
        self.edit_budget -= 1
        return True

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
            self.bus.emit("index", [FileDeleted(agent=self.agent_id, path=found.path,
                                                seq=self.bus.next_seq(self.agent_id))])
            self.emitted[found.path] = ""
            return
        if self.emitted.get(found.path) == event.sha256:
            return  # touched, not changed
        if not self.edit_lane():
            self.bulk_batch.append(event)
            return
        emit_changed(self.bus, self.settings, [event])
        self.emitted[found.path] = event.sha256

    def flush(self) -> None:
        """Send the settled files held for the bulk lane, FILES_PER_CHUNK_JOB to a job."""
        while self.bulk_batch:
            batch = self.bulk_batch[:d.FILES_PER_CHUNK_JOB]
            emit_changed(self.bus, self.settings, batch, bulk=True)
            del self.bulk_batch[:len(batch)]
            self.emitted.update((e.path, e.sha256) for e in batch)

    def reconcile(self, between: Callable[[], None] | None = None) -> tuple[int, int]:
        """Emit every file whose sha256 differs from the index, delete what is gone. → (changed, deleted).

        ``between`` is called after every FILES_PER_CHUNK_JOB files: the watcher settles the
        other agents' edits there, so reconciling a 10,000-file import does not hold them up."""
        found = plan(self.bus, self.settings, self.agent_id, origin="reconcile", between=between)
        self.emitted.update(found.on_disk)
        changed, gone, skipped = found.changed, found.gone, found.skipped
        for start in range(0, len(changed), d.FILES_PER_CHUNK_JOB):
            emit_changed(self.bus, self.settings, changed[start:start + d.FILES_PER_CHUNK_JOB], bulk=True)
            if between is not None:
                between()
        for p in gone:
            self.emitted[p.path] = ""
        self.bus.emit("index", [*skipped, *gone], bulk=True)
        self.bus.note_reconciled(self.agent_id)
        if changed or gone or skipped:
            log.info("agent %s: reconcile emitted %d changed, %d deleted, %d skipped", self.agent_id, len(changed),
                     len(gone), len(skipped))
        return len(changed), len(gone)


def _stamp(settings: Settings) -> tuple[object, ...]:
    """What changes when the agent list may have: the registry's stamp, the config file's (inode, size, mtime)."""
    try:
        st = os.stat(settings.source_file) if settings.source_file else None
    except FileNotFoundError:
        st = None
    return registry.stamp(settings.data_dir), (st.st_ino, st.st_size, st.st_mtime_ns) if st else None


class Watcher:
    """Every agent's :class:`AgentWatch` on one observer, kept in step with the agent list."""

    def __init__(self, settings: Settings, bus: Bus) -> None:
        self.settings = settings
        self.bus = bus
        # watchdog adds inotify watches with os.walk, which recurses once per folder level
        # here: a tree ~1,000 levels deep must not raise RecursionError in its threads.
        sys.setrecursionlimit(max(sys.getrecursionlimit(), d.WATCH_RECURSION_LIMIT))
        self.observer = Observer()
        self.watches: dict[str, AgentWatch] = {}
        self.observed: dict[str, list[ObservedWatch]] = {}
        self.next_reconcile: dict[str, float] = {}
        self.stamp: tuple[object, ...] = ()  # none yet: the first follow_agents reads the agents again
        self.keeper = Keeper(bus)

    def keep(self) -> None:
        """Renew this node's leases and take the free ones (keeper.py); watch what it holds, only that."""
        gained, lost = self.keeper.tick(self.settings)
        for agent_id in lost:
            if agent_id in self.watches:
                self.remove(agent_id)
        for agent_id in gained:
            if agent_id not in self.watches:
                self.add(agent_id)
                log.info("agent %s: now watched on this node (%s)", agent_id,
                            self.settings.agent(agent_id).workspace)

    def add(self, agent_id: str) -> None:
        agent = self.settings.agent(agent_id)
        ensure_workspace(agent)
        # Before this node emits a file of the agent: the model its memory's languages call for
        # (shared/index/languages.py), so the embedders never embed it with the other one first.
        self.settings = languages.at_open(self.settings, agent_id)
        watch = self.watches[agent_id] = AgentWatch(self.settings, agent_id, self.bus)
        self.next_reconcile[agent_id] = 0.0  # reconcile it at once
        self.observed[agent_id] = []
        if not agent.memory_search.sync.watch:
            log.warning("agent %s: sync.watch is off; only the periodic reconcile sees changes", agent_id)
            return
        for directory in watch.workspace.watch_dirs():
            if directory.is_dir():
                self.observed[agent_id].append(self.observer.schedule(watch, str(directory), recursive=True))
            else:
                log.warning("agent %s: %s does not exist; it is not watched", agent_id, directory)

    def remove(self, agent_id: str) -> None:
        for observed in self.observed.pop(agent_id, []):
            self.observer.unschedule(observed)
        del self.watches[agent_id], self.next_reconcile[agent_id]

    def follow_agents(self) -> None:
        """Reload the agent list if the registry or the config file changed; watch what is new."""
        stamp = _stamp(self.settings)
        if stamp == self.stamp:
            return
        self.stamp = stamp
        try:
            fresh = load_settings(self.settings.source_file, self.settings.state_dir)
        except ConfigError as exc:
            log.warning("agent list not reloaded (the running agents stay watched): %s", exc)
            return
        old, self.settings = self.settings, fresh
        for agent_id in list(self.watches):
            if agent_id not in fresh.agent_ids() or old.agent(agent_id) != fresh.agent(agent_id):
                self.remove(agent_id)
                log.warning("agent %s: no longer watched as it was (removed or changed)", agent_id)
        self.keeper.held &= set(self.watches)  # a changed agent is taken again: watched anew
        self.keep()

    def reconcile_all(self) -> None:
        for agent_id in self.next_reconcile:
            self.next_reconcile[agent_id] = 0.0

    def tick(self) -> None:
        """Reconcile the agents that are due, emit the files that have settled."""
        now = time.monotonic()
        for w in list(self.watches.values()):
            if now >= self.next_reconcile[w.agent_id] or w.reconcile_wanted.is_set():
                if runs.covering(self.bus, w.agent_id):  # `memoryd index` queues every file of it now
                    self.next_reconcile[w.agent_id] = now + d.RUN_COVER_RECHECK_SECONDS
                    continue
                w.reconcile_wanted.clear()
                w.reconcile(between=self.settle_due)
                self.next_reconcile[w.agent_id] = time.monotonic() + w.reconcile_every
        self.settle_due()

    def settle_due(self) -> None:
        """Emit every agent's files that have settled."""
        for w in list(self.watches.values()):
            for path in w.due():
                w.settle(path)
            w.flush()


def run(settings: Settings, bus: Bus, stop: threading.Event | None = None) -> None:
    """Watch every agent until ``stop`` is set (or forever), through agent changes and Redis outages."""
    stop = stop or threading.Event()
    watcher = Watcher(settings, bus)
    watcher.observer.start()
    next_check = {"agents": 0.0, "marker": 0.0, "leases": 0.0}
    try:
        while not stop.is_set():
            try:
                now = time.monotonic()
                if now >= next_check["agents"]:
                    watcher.follow_agents()
                    next_check["agents"] = now + d.AGENT_RELOAD_SECONDS
                if now >= next_check["leases"]:
                    watcher.keep()
                    next_check["leases"] = now + d.LEASE_RENEW_SECONDS
                if now >= next_check["marker"]:
                    if bus.marker_gone():  # first start, or Redis lost its data: queued work is gone
                        bus.plant_marker()
                        watcher.reconcile_all()
                    next_check["marker"] = now + d.REDIS_MARKER_SECONDS
                watcher.tick()
            except NotOwner as exc:  # another node took an agent since the last keep: stop watching it
                log.warning("%s", exc)
                watcher.keep()
            except redis.RedisError as exc:
                log.warning("watcher lost Redis (%s); what it sees meanwhile is reconciled once Redis is back",
                            redact(str(exc)))
                if not wait_for_redis(bus.conn, stop, who="watcher"):
                    break
                watcher.reconcile_all()
            if not watcher.observer.is_alive():
                raise RuntimeError("the file observer thread died; restart `memoryd watcher`")
            stop.wait(d.WATCH_TICK_SECONDS)
    finally:
        watcher.observer.stop()
        watcher.observer.join(timeout=5)
        try:
            watcher.keeper.release_all()
        except redis.RedisError as exc:  # they expire in LEASE_TTL_SECONDS
            log.info("leases not released at stop: %s", redact(str(exc)))
