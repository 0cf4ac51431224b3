"""Run one stage's RQ worker, and give its job functions their process context.

Workers are RQ ``SimpleWorker`` s (no fork per job: ~5× the job rate of the forking
worker here, and models stay loaded). Job functions are plain top-level functions that
take event JSON; they reach the process's settings and Redis through :func:`context`,
which ``run_worker`` (or ``memoryd index``'s in-process burst workers) sets up.

A worker killed with ``kill -9`` leaves its job "started" until RQ's heartbeat expires
(≥ 60 s). Each worker therefore sweeps, at start and every few seconds, the jobs that a
dead worker *on this host* left started (its pid is gone) and requeues them at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.job import Job
from rq.registry import StartedJobRegistry

from shared.bus import QUEUES, Bus
from shared.config import Settings, load_settings

log = logging.getLogger("memoryd.worker")

#: How often a worker looks for jobs orphaned by a dead worker on this host.
ORPHAN_SWEEP_SECONDS = 3.0
HOST = socket.gethostname()


@dataclass
class WorkerContext:
    settings: Settings
    redis_bus: Bus | None = None
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def bus(self) -> Bus:
        if self.redis_bus is None:
            raise RuntimeError("this in-process run has no Redis bus")
        return self.redis_bus

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """A per-process object (a provider, an open index) made once."""
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    def ensure_agent(self, agent_id: str) -> None:
        """Reload the settings when an agent registered after this process started shows up."""
        if agent_id not in self.settings.agent_ids():
            self.settings = load_settings(self.settings.source_file, self.settings.state_dir)
            self.settings.agent(agent_id)  # still unknown: UnknownAgent names the fix


_context: WorkerContext | None = None


def set_context(settings: Settings, conn: redis.Redis) -> WorkerContext:
    global _context
    _context = WorkerContext(settings=settings, redis_bus=Bus(conn, settings))
    return _context


def context() -> WorkerContext:
    if _context is None:
        raise RuntimeError("job run outside a memoryd worker: start it with `memoryd worker STAGE`")
    return _context


def worker_name(stage: str) -> str:
    return f"memoryd-{stage}.{HOST}.{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def requeue_orphans(queue: Queue) -> int:
    """Requeue started jobs whose worker was a process on this host that no longer exists."""
    registry = StartedJobRegistry(queue=queue)
    moved = 0
    for job_id in registry.get_job_ids():
        try:
            job = Job.fetch(job_id, connection=queue.connection)
        except Exception:
            continue
        name = job.worker_name or ""
        parts = name.rsplit(".", 1)
        if len(parts) != 2 or not parts[1].isdigit() or not parts[0].endswith("." + HOST):
            continue
        if _pid_alive(int(parts[1])):
            continue
        registry.remove_executions(job)
        queue.enqueue_job(job)
        moved += 1
        log.warning("requeued job %s orphaned by dead worker %s", job.id, name)
    return moved


class _Sweeper(threading.Thread):
    def __init__(self, queue: Queue) -> None:
        super().__init__(daemon=True, name="orphan-sweeper")
        self.queue = queue
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(ORPHAN_SWEEP_SECONDS):
            try:
                requeue_orphans(self.queue)
            except redis.RedisError as exc:
                log.warning("orphan sweep failed: %s", exc)


def run_worker(stage: str, settings: Settings, conn: redis.Redis, *, burst: bool = False) -> None:
    """Work ``stage``'s queue until stopped (or until it is empty, with ``burst``)."""
    set_context(settings, conn)
    queue = Queue(QUEUES[stage], connection=conn)
    requeue_orphans(queue)
    worker = SimpleWorker([queue], connection=conn, name=worker_name(stage))
    sweeper = _Sweeper(queue)
    if not burst:
        sweeper.start()
    try:
        worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
    finally:
        sweeper.stop.set()
