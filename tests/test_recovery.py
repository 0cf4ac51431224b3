"""When recovery re-drives from the log, and when it must not: a real Redis, in one process
(the fault suite's tests/faults/test_log_recovery.py runs the real workers through it)."""

from __future__ import annotations

from pathlib import Path

import redis

from memoryd.shared.config.workspace import Workspace
from memoryd.shared.rebuild.recovery import Recovery, redrive
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.survey import changed_event


def _queued(bus: Bus, stage: str) -> int:
    return sum(q.count for q in bus.lanes(stage))


def test_a_flush_is_seen_even_when_an_emit_refilled_the_marker_first_and_redriven_once(
        workspace: Path, make_settings, redis_url: str) -> None:
    (workspace / "memory" / "a.md").write_text("- a fact\n")
    (workspace / "memory" / "b.md").write_text("- another fact\n")
    settings, _ = make_settings(workspace, redis=redis_url)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    first, second = Recovery(bus), Recovery(bus)  # two indexer processes of one node
    assert first.check(settings) == {"main": {"index": 0, "embed": 0, "chunk": 0}}  # an empty Redis: looked
    assert bus.leases.owner("main").node == settings.node  # and took the agent nobody held
    assert second.check(settings) == {}
    files = list(Workspace(settings.agent("main")).scan())
    bus.emit("chunk", [changed_event(bus, "main", files[0], origin="watch")])
    assert first.check(settings) == {} and _queued(bus, "chunk") == 1  # queued, not lost: nothing to do
    bus.conn.flushdb()  # the queued change is lost, and the lease; the watcher emits another change at once
    bus.emit("chunk", [changed_event(bus, "main", files[1], origin="watch")])
    assert _queued(bus, "chunk") == 1
    redriven = first.check(settings)
    assert redriven == {"main": {"index": 0, "embed": 0, "chunk": 1}}  # the lost one; the other is queued
    assert _queued(bus, "chunk") == 2 and second.check(settings) == {}  # the node's other indexer leaves it
    elsewhere = settings.model_copy(update={"memoryd": settings.memoryd.model_copy(update={"node": "elsewhere"})})
    assert first.owned(settings) == ["main"] and Recovery(Bus(bus.conn, elsewhere)).owned(elsewhere) == []


def test_an_indexer_starting_on_a_redis_that_holds_work_does_not_redo_it(workspace: Path, make_settings,
                                                                          redis_url: str) -> None:
    (workspace / "memory" / "a.md").write_text("- a fact\n")
    settings, _ = make_settings(workspace, redis=redis_url)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    (found,) = Workspace(settings.agent("main")).scan()
    bus.emit("chunk", [changed_event(bus, "main", found, origin="index")])  # `memoryd index` queued it
    assert Recovery(bus).check(settings) == {} and _queued(bus, "chunk") == 1


def test_an_indexer_whose_first_look_falls_inside_an_emit_finds_nothing_lost(workspace: Path, make_settings,
                                                                             redis_url: str) -> None:
    """A fresh Redis: the watcher's first emit has logged its event but not queued it yet when a
    starting indexer looks (CI saw it with the Procfile: "re-driven … after Redis lost its queues")."""
    (workspace / "memory" / "a.md").write_text("- a fact\n")
    settings, _ = make_settings(workspace, redis=redis_url)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    (found,) = Workspace(settings.agent("main")).scan()
    indexer, looked = Recovery(bus), []
    append = bus.record.append

    def append_then_look(events, fences):  # the indexer's first check, between the log append and the enqueue
        append(events, fences)
        looked.append(indexer.check(settings))

    bus.record.append = append_then_look
    bus.emit("chunk", [changed_event(bus, "main", found, origin="watch")])
    assert looked == [{}] and _queued(bus, "chunk") == 1  # queued once, nothing re-driven


def test_a_re_drive_leaves_what_a_queue_holds(workspace: Path, make_settings, redis_url: str) -> None:
    """The log holds a change the index lacks: while its job waits on a queue (an emit between its
    append and its enqueue, a dead node's jobs moved to the shared lanes) it is not queued again."""
    (workspace / "memory" / "a.md").write_text("- a fact\n")
    settings, _ = make_settings(workspace, redis=redis_url)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    (found,) = Workspace(settings.agent("main")).scan()
    bus.emit("chunk", [changed_event(bus, "main", found, origin="watch")])
    assert redrive(settings, bus, "main") == {"index": 0, "embed": 0, "chunk": 0}
    assert _queued(bus, "chunk") == 1
    bus.queues["chunk"].empty()  # now it is lost
    assert redrive(settings, bus, "main") == {"index": 0, "embed": 0, "chunk": 1}
    assert _queued(bus, "chunk") == 1


def test_a_re_drive_leaves_a_job_a_worker_has_taken_but_not_started(workspace: Path, make_settings,
                                                                     redis_url: str) -> None:
    """RQ 3 moves a job it takes to the queue's intermediate list before its started registry holds
    it (a worker forking its work horse): that job is not lost, its events are not queued again."""
    (workspace / "memory" / "a.md").write_text("- a fact\n")
    settings, _ = make_settings(workspace, redis=redis_url)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    (found,) = Workspace(settings.agent("main")).scan()
    bus.emit("chunk", [changed_event(bus, "main", found, origin="watch")])
    queue = bus.queues["chunk"]
    assert bus.conn.lmove(queue.key, queue.intermediate_queue_key) is not None  # as a worker's dequeue does
    assert _queued(bus, "chunk") == 0
    assert redrive(settings, bus, "main") == {"index": 0, "embed": 0, "chunk": 0}
    bus.conn.delete(queue.intermediate_queue_key)  # the job gone with it: now it is lost
    assert redrive(settings, bus, "main") == {"index": 0, "embed": 0, "chunk": 1}


def test_an_emit_racing_the_first_look_at_a_fresh_redis_is_not_lost_work(workspace: Path, make_settings,
                                                                         redis_url: str) -> None:
    """The indexer finds no marker; before it folds the log, the watcher's first emit sets the marker,
    logs its change and queues it, and a chunker has already taken the job (CI saw it: "re-driven from
    the log" at start). Only what was logged before the indexer looked is lost work."""
    (workspace / "memory" / "a.md").write_text("- a fact\n")
    settings, _ = make_settings(workspace, redis=redis_url)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    (found,) = Workspace(settings.agent("main")).scan()
    indexer = Recovery(bus)
    owned = indexer.owned

    def emit_then_owned(settings, *, take=False):  # between the indexer's look and its fold
        bus.emit("chunk", [changed_event(bus, "main", found, origin="watch")])
        bus.queues["chunk"].empty()  # a chunker took it
        return owned(settings, take=take)

    indexer.owned = emit_then_owned
    assert indexer.check(settings) == {"main": {"index": 0, "embed": 0, "chunk": 0}}
    assert _queued(bus, "chunk") == 0
