"""Run one stage's RQ worker, and give its job functions their process context.

Workers are RQ ``SimpleWorker`` s (no fork per job: ~5× the job rate of the forking
worker here, and models stay loaded). Job functions are plain top-level functions that
take event JSON; they reach the process's settings and Redis through :func:`context`,
which ``run_worker`` (or ``memoryd index``'s in-process burst workers) sets up.

A worker killed with ``kill -9`` leaves its job started, half-started or in RQ's
intermediate queue until RQ's heartbeat and maintenance intervals pass (minutes). Each
worker therefore sweeps, at start and every few seconds, the jobs held by dead workers
*on any host* and requeues them at once (:func:`requeue_orphans`). Dead means: the
process's heartbeat key in Redis expired (``shared/runtime/liveness.py``); worker names
carry a node name and a random part, never a pid, so containers that all run memoryd as
pid 1 neither collide nor look alive to each other.

An idle worker gives back the memory its work freed (``shared/runtime/settle.py``).

Failed jobs are retried 1, 5 and 20 s later: each worker records a failed try's error on
the job and moves retries that are due back onto the queue (``shared/runtime/retries.py``). A worker
outlives a Redis outage: it waits for Redis with backoff, requeues the job it was running
when Redis went away, and works on (:func:`run_worker`).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.defaults import DEFAULT_WORKER_TTL
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.results import Result
from rq.utils import as_text, now, parse_composite_key

from memoryd.shared import defaults as d
from memoryd.shared.config import registry
from memoryd.shared.config.loader import reload_agents, with_cjk_memory, with_published
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import ConfigError
from memoryd.shared.redact import redact
from memoryd.shared.runtime.bus import JOBS, Bus
from memoryd.shared.runtime.liveness import Heartbeat, alive, note_local, worker_name
from memoryd.shared.runtime.redis_server import wait_for_redis
from memoryd.shared.runtime.retries import RetryScheduler, note_error, release_lock_of, scheduler_lock_holder
from memoryd.shared.runtime.settle import Settler, one_blas_thread

log = logging.getLogger("memoryd.worker")

#: How long a worker's Redis connections wait for a reply: RQ blocks in BLPOP for up to its
#: dequeue timeout (the worker TTL − 15 s) and wants 10 s more (``rq.Worker.connection_timeout``).
WORKER_READ_TIMEOUT = max(1, DEFAULT_WORKER_TTL - 15) + 10


#: The memo keys of what an idle worker closes (:meth:`WorkerContext.release`).
RELEASED_WHEN_IDLE = ("writer:", "lru", "vector-store:")


@dataclass
class WorkerContext:
    settings: Settings
    redis_bus: Bus | None = None
    #: Per-process objects, least recently used first; at most WORKER_MEMO_ENTRIES.
    cache: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    registry_stamp: tuple[int, int, int] | None = registry.UNREAD
    #: ``memoryd index`` runs its stages as threads of one process, sharing this context.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: Agents known only from their owner's published configuration (:meth:`ensure_agent`).
    published: set[str] = field(default_factory=set)

    @property
    def bus(self) -> Bus:
        if self.redis_bus is None:
            raise RuntimeError("this in-process run has no Redis bus")
        return self.redis_bus

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """A per-process object (a provider, an open index) made once and kept while it is among
        the WORKER_MEMO_ENTRIES most recently used: one worker serves any number of agents
        without holding every agent's index open. An evicted object is closed if it can be."""
        with self.lock:
            if key in self.cache:
                self.cache.move_to_end(key)
                return self.cache[key]
        value = make()  # outside the lock: loading a model must not hold up the other stages
        with self.lock:
            self.cache[key] = value
            evicted = [self.cache.popitem(last=False)[1] for _ in range(len(self.cache) - d.WORKER_MEMO_ENTRIES)]
        for old in evicted:
            _close(old)
        return value

    def release(self) -> None:
        """Close what this process keeps open only to be faster: index writers, the vector cache
        and the vector store (each opens again on its next use). Providers (the model) stay."""
        with self.lock:
            gone = [self.cache.pop(k) for k in list(self.cache) if k.startswith(RELEASED_WHEN_IDLE)]
        for value in gone:
            _close(value)
        if self.redis_bus is not None:
            self.redis_bus.record.shrink()

    def ensure_agent(self, agent_id: str, *, reread: bool = False) -> None:
        """Follow the agent registry: reload the agents when it changed (``memoryd agents add`` /
        ``remove``, ``memoryd index --workspace``), when ``agent_id`` is unknown, or when told to
        (``reread``). An agent this node's registry and config do not know is taken as its owner
        published it (a chunker or embedder without the data dir), read again at each job. A removed
        agent's jobs fail with UnknownAgent; its writer, if open, ages out of :meth:`memo`."""
        if reread:
            self.registry_stamp = registry.UNREAD
        stamp = registry.stamp(self.settings.data_dir)
        if stamp != self.registry_stamp or agent_id not in self.settings.agent_ids() or agent_id in self.published:
            self.registry_stamp = stamp
            try:
                self.settings = reload_agents(self.settings)
            except ConfigError as exc:  # a hand edit gone wrong: the agents as they were go on
                log.warning("agent registry not reloaded: %s", exc)
            if agent_id not in self.settings.agent_ids() and self.redis_bus is not None:
                published = self.redis_bus.published_agent(agent_id)
                if published is not None:
                    self.settings = with_published(self.settings, published)
                    self.published.add(agent_id)
            self.settings.agent(agent_id)  # unknown (or removed): UnknownAgent names the fix
        if self.registry_stamp is None and self.redis_bus is not None and agent_id not in self.published \
                and not self.settings.agent(agent_id).cjk_memory:
            # No registry here (a node without the data dir): what the owner noted of the agent's
            # memory (shared/index/languages.py) comes with its published configuration.
            published = self.redis_bus.published_agent(agent_id)
            if published is not None and published.cjk_memory:
                self.settings = with_cjk_memory(self.settings, agent_id)


def _close(value: object) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()


_context: WorkerContext | None = None


def set_context(settings: Settings, conn: redis.Redis) -> WorkerContext:
    global _context
    _context = WorkerContext(settings=settings, redis_bus=Bus(conn, settings))
    return _context


def context() -> WorkerContext:
    if _context is None:
        raise RuntimeError("job run outside a memoryd worker: start it with `memoryd worker STAGE`")
    return _context


def _requeue(queue: Queue, job_id: str) -> bool:
    conn = queue.connection
    conn.lrem(queue.intermediate_queue_key, 0, job_id)
    try:
        job = Job.fetch(job_id, connection=conn)
    except NoSuchJobError:
        return False
    StartedJobRegistry(queue=queue).remove_executions(job)
    if job.get_status() in (JobStatus.FINISHED, JobStatus.FAILED) or job_id in queue.get_job_ids():
        return False
    queue.enqueue_job(job)
    return True


def release_jobs(worker: SimpleWorker) -> int:
    """Requeue every job ``worker`` holds on any of its queues and record its death; → how many.

    Only for a worker that runs no job: one whose process died, or this process's own
    worker after its loop ended on a lost Redis."""
    conn = worker.connection
    executions = {parse_composite_key(as_text(k))[0] for k in conn.smembers(worker.executions_key)}
    moved = 0
    for queue in worker.queues:
        held = set()
        for job_id in executions | set(StartedJobRegistry(queue=queue).get_job_ids(cleanup=False)):
            job = Job.fetch(job_id, connection=conn) if Job.exists(job_id, connection=conn) else None
            ours = job is not None and (job_id in executions or job.worker_name == worker.name)
            if ours and job.origin == queue.name:
                held.add(job_id)
        for job_id in sorted(held):
            if _requeue(queue, job_id):
                moved += 1
                log.warning("requeued job %s held by worker %s", job_id, worker.name)
    worker.register_death()
    return moved


def requeue_orphans(queue: Queue) -> int:
    """Requeue the jobs that dead memoryd workers (``kill -9``, on any host) were holding; free their retry lock.

    A dead worker can leave a job in three states: started with its name on the job;
    half-started (in the started registry and the worker's executions, status still
    queued); or only moved to RQ's intermediate queue. RQ itself recovers them after its
    heartbeat and maintenance intervals (minutes); this does it in seconds.
    """
    moved = 0
    conn = queue.connection
    for worker in SimpleWorker.all(queue=queue):
        if not alive(conn, worker.name):
            moved += release_jobs(worker)
    holder = scheduler_lock_holder(queue)
    if holder and not alive(conn, holder):
        release_lock_of(queue, holder)  # its retries are promoted by a live worker within a second
        log.warning("freed the retry scheduler lock of dead worker %s on %s", holder, queue.name)
    started = set(StartedJobRegistry(queue=queue).get_job_ids(cleanup=False))
    intermediate = queue.intermediate_queue
    for job_id in intermediate.get_job_ids():
        if job_id in started:
            continue
        intermediate.set_first_seen(job_id)
        seen = intermediate.get_first_seen(job_id)
        if seen and (now() - seen).total_seconds() > d.STUCK_INTERMEDIATE_SECONDS and _requeue(queue, job_id):
            moved += 1
            log.warning("requeued job %s stuck in the intermediate queue", job_id)
    return moved


#: Job names of memoryd 0.1, before the code moved into the ``memoryd`` package → today's job.
LEGACY_JOBS = {
    "services.chunker.chunk_job": "chunk",
    "services.embedder.embed_job": "embed",
    "services.embedder.backfill_job": "backfill",
    "services.indexer.index_job": "index",
    "services.indexer.fill_job": "fill",
    "services.session.flush_job": "flush",
    "services.session.compact_job": "compact",
    "services.session.session_memory_job": "session_memory",
}


def migrate_legacy_jobs(queue: Queue, bus: Bus) -> int:
    """Re-enqueue jobs queued under a pre-package dotted name (``services.…``) under today's name.

    A job whose old name has no successor is failed with a message saying what to do, so
    it never crashes a worker with an ImportError. → how many jobs were moved or failed.
    """
    touched = 0
    for job in Job.fetch_many(queue.get_job_ids(), connection=queue.connection):
        if job is None or job.func_name.startswith("memoryd."):
            continue
        queue.remove(job)
        touched += 1
        successor = LEGACY_JOBS.get(job.func_name)
        if successor is None:
            why = (f"job {job.id} names {job.func_name!r}, which this memoryd does not have; "
                   "re-run `memoryd index --agent AGENT` to queue its work again, then delete the job")
            ttl = bus.settings.memoryd.failure_ttl_seconds
            job.set_status(JobStatus.FAILED)
            Result.create_failure(job, ttl, exc_string=why)
            FailedJobRegistry(queue=queue).add(job, ttl=ttl, exc_string=why)
            log.warning("failed job %s: unknown job name %s", job.id, job.func_name)
            continue
        args = job.args
        job.delete()
        bus.enqueue(successor, *args, job_id=job.id)
        log.warning("moved job %s from %s to %s", job.id, job.func_name, JOBS[successor])
    return touched


class Periodic(threading.Thread):
    """Call ``action`` every ``every`` seconds until ``stop`` is set (at once first, with
    ``immediately``). An error of the ``errors`` kinds is logged and the loop goes on: a
    Redis blip must not end a background duty of a long-running process."""

    def __init__(self, name: str, every: float, action: Callable[[], object], *,
                 errors: tuple[type[BaseException], ...], immediately: bool = False) -> None:
        super().__init__(daemon=True, name=name)
        self.every = every
        self.action = action
        self.errors = errors
        self.immediately = immediately
        self.stop = threading.Event()

    def run(self) -> None:
        if not self.immediately and self.stop.wait(self.every):
            return
        while True:
            try:
                self.action()
            except self.errors as exc:
                log.warning("%s failed (next try in %.0fs): %s", self.name, self.every, exc)
            if self.stop.wait(self.every):
                return


class StageWorker(SimpleWorker):
    """RQ's SimpleWorker that remembers a stop request (SIGTERM, Ctrl-C), and while idle pings a
    lost Redis no more than REDIS_BACKOFF_MAX_SECONDS apart (RQ's own cap is a minute)."""

    max_connection_wait_time = d.REDIS_BACKOFF_MAX_SECONDS
    stop_requested = False
    #: Told when each job starts and ends, so that an idle worker gives memory back (settle.py).
    settler: Settler | None = None
    #: Set by run_worker's own handlers, in place until RQ's are (while the process starts, or makes
    #: a worker anew after Redis came back): a stop asked for then is not lost when RQ installs its own.
    asked_to_stop: threading.Event | None = None

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True
        super().request_stop(signum, frame)

    def _install_signal_handlers(self) -> None:
        super()._install_signal_handlers()
        if self.asked_to_stop is not None and self.asked_to_stop.is_set():
            self.stop_requested = self._stop_requested = True  # RQ's loop ends before its first job

    def subscribe(self) -> None:
        """RQ's, but its reader thread reads the command channel for at most
        WORKER_CHANNEL_READ_SECONDS at a time, not 60: the worker's stop waits for that thread."""
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(sleep_time=d.WORKER_CHANNEL_READ_SECONDS, daemon=True,
                                                       exception_handler=self._pubsub_exception_handler)

    def execute_job(self, job: Job, queue: Queue) -> Any:
        if self.settler is None:
            return super().execute_job(job, queue)
        self.settler.started()
        try:
            return super().execute_job(job, queue)
        finally:
            self.settler.finished()


def fit_read_timeout(conn: redis.Redis) -> None:
    """Give every connection of ``conn``'s pool WORKER_READ_TIMEOUT.

    RQ raises the pool's timeout for the connections made after a worker starts, not for the
    ones already open, and redis-py 8 gives those a 5 s read timeout: a BLPOP that drew one
    (the process's first ping, a duty thread's first call) failed after 5 s — "could not
    connect to Redis instance", then up to 5 s of backoff with jobs waiting — every few
    seconds in an idle indexer. The pool's connections are dropped and made anew."""
    pool = conn.connection_pool
    if (pool.connection_kwargs.get("socket_timeout") or 0) < WORKER_READ_TIMEOUT:
        pool.connection_kwargs["socket_timeout"] = WORKER_READ_TIMEOUT
        pool.reset()


def stop_on_signals(stopping: threading.Event | None = None) -> threading.Event:
    """``stopping`` (or a new event), set by SIGTERM or SIGINT from now on: the service asked to stop
    (``memoryd up``, a service manager, ``docker stop``, Ctrl-C) ends its loop and cleans up. Without
    a handler a container's pid 1 ignores SIGTERM (docker kills it 10 s later), and elsewhere the
    process dies at once."""
    stopping = stopping or threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    return stopping


def run_worker(stage: str, settings: Settings, conn: redis.Redis, *, burst: bool = False) -> None:
    """Work ``stage``'s queues, the edit lane first, until stopped (or until they are empty, with ``burst``).

    Beside the work loop run the orphan sweep and the retry scheduler (threads). Losing
    Redis does not end the process: RQ's loop waits out an outage while idle; when a job
    or RQ's bookkeeping hits it and the loop ends, the worker waits for Redis with backoff,
    requeues the job it held, and works on under the same name.
    """
    stopping = stop_on_signals()  # until RQ's handlers are in place: a stop asked while starting is kept
    fit_read_timeout(conn)
    one_blas_thread()
    queues = set_context(settings, conn).bus.lanes(stage)
    for queue in queues:
        migrate_legacy_jobs(queue, context().bus)
        requeue_orphans(queue)
    heartbeat = Heartbeat(conn, settings.node)
    heartbeat.beat()  # before the worker is born: no sweep may find it without a heartbeat
    name = worker_name(stage, settings.node)
    noted = note_local(stage, name)
    retries = RetryScheduler(queues, name)
    settler = Settler(release=context().release)
    duties = [Periodic("heartbeat", d.ALIVE_BEAT_SECONDS, heartbeat.beat, errors=(redis.RedisError,)),
              Periodic("settle", d.SETTLE_CHECK_SECONDS, settler.check, errors=()),
              Periodic("orphan-sweeper", d.ORPHAN_SWEEP_SECONDS, lambda: [requeue_orphans(q) for q in queues],
                       errors=(redis.RedisError,)),
              Periodic("retry-scheduler", d.RETRY_PROMOTE_SECONDS, retries.promote, errors=(redis.RedisError,),
                       immediately=True)]
    for duty in duties if not burst else duties[:1]:  # a burst worker beats too: its jobs are not orphans
        duty.start()
    worker: StageWorker | None = None
    try:
        while True:
            try:
                if worker is not None:
                    release_jobs(worker)  # the job it ran when Redis went away, if Redis kept it
                if stopping.is_set():
                    return
                worker = StageWorker(queues, connection=conn, name=name, exception_handlers=[note_error])
                worker.settler = settler
                worker.asked_to_stop = stopping
                worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
            except redis.RedisError as exc:
                if worker is not None and worker.stop_requested:  # asked to stop, and Redis stopped too
                    log.info("worker %s stopping; Redis is gone too: %s", name, redact(str(exc)))
                    return
                log.warning("worker %s lost Redis: %s", name, redact(str(exc)))
            if burst or (worker is not None and worker.stop_requested):
                return
            stop_on_signals(stopping)  # RQ's handlers end with its loop
            if stopping.wait(d.REDIS_BACKOFF_SECONDS) or not wait_for_redis(conn, stopping, who=name):
                return
    finally:
        noted.unlink(missing_ok=True)
        for duty in duties:
            duty.stop.set()
        try:
            if not burst:
                retries.release()
            heartbeat.clear()
        except redis.RedisError as exc:  # a stop (SIGTERM/SIGINT) is no fault: the lock and heartbeat expire
            stopped = stopping.is_set() or (worker is not None and worker.stop_requested)
            (log.info if stopped else log.warning)("could not release the retry scheduler lock and heartbeat of %s: %s",
                                                   name, redact(str(exc)))
