"""The jobs on the queues as an operator sees them, and what keeps failed ones moving.

A job is *pending* (queued), *started*, *scheduled* (it failed and waits for its next
retry, 1, 5 then 20 s later) or *failed* (its retries are spent: the dead letter, kept
``failureTtlSeconds``). :func:`list_jobs` reads them per stage, with the agent their
events name and the last error; ``memoryd status`` and ``memoryd status --failed`` print
them, :func:`failed_jobs` answers "did a job of this run fail?" (for ``memoryd index``),
and :func:`retry_failed` puts dead letters back on their queue (``memoryd retry``).

Two duties run inside every worker process (``shared/worker.run_worker``):
:func:`note_error`, an RQ exception handler that writes each failed try's error on its
job (RQ keeps no error for a try that is retried), and :class:`RetryScheduler`, which
moves retries that are due back onto their queue. RQ's own scheduler would do the
latter in a forked process; that process dies on the first Redis error (the worker
restarts it only at its 10-minute maintenance) and outlives a worker killed with
``kill -9``, so memoryd runs the same RQ scheduler code in a thread instead.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

from rq import Queue
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job
from rq.registry import FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry
from rq.scheduler import RQScheduler
from rq.scripts import release_lock

from memoryd.shared.redact import redact
from memoryd.shared.runtime import bus as busmod

log = logging.getLogger("memoryd.jobs")

STATES = ("pending", "started", "scheduled", "failed")


@dataclass
class JobInfo:
    """One job as ``memoryd status`` shows it."""

    id: str
    stage: str
    state: str
    agent: str | None
    error: str | None = None  # the last try's error (scheduled, failed)
    failed_at: float | None = None  # when the last try failed (unix time)
    retry_at: float | None = None  # scheduled: when the next try is due
    retries_left: int | None = None
    runs: list[str] = field(default_factory=list)  # the `memoryd index` runs its events belong to

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["runs"]
        return out


def _events(job: Job) -> list[dict[str, Any]]:
    first = job.args[0] if job.args else None
    if not isinstance(first, list):
        return []
    events = []
    for raw in first:
        try:
            event = json.loads(raw)
        except (TypeError, ValueError):
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def job_agent(job: Job) -> str | None:
    """The agent a job works for: its events name it, other jobs take its id first."""
    events = _events(job)
    if events:
        agent = events[0].get("agent")
        return agent if isinstance(agent, str) else None
    first = job.args[0] if job.args else None
    return first if isinstance(first, str) else None


def last_error(job: Job) -> str | None:
    """The last try's error: what :func:`note_error` wrote, else the last line of RQ's traceback."""
    noted = job.meta.get("last_error")
    if noted:
        return str(noted)
    result = job.latest_result()
    text = (result.exc_string or "") if result is not None else ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return redact(lines[-1]) if lines else None


def _ids(stage_queues: Sequence[Queue], state: str) -> dict[str, float | None]:
    """job id → when its retry is due (scheduled) or None, over the stage's queues."""
    out: dict[str, float | None] = {}
    for queue in stage_queues:
        if state == "pending":
            out.update(dict.fromkeys(queue.get_job_ids()))
        elif state == "started":
            out.update(dict.fromkeys(StartedJobRegistry(queue=queue).get_job_ids()))
        elif state == "failed":
            out.update(dict.fromkeys(FailedJobRegistry(queue=queue).get_job_ids()))
        else:
            key = ScheduledJobRegistry(queue=queue).key
            out.update({k.decode(): float(s) for k, s in queue.connection.zrange(key, 0, -1, withscores=True)})
    return out


def list_jobs(bus: busmod.Bus, states: Iterable[str] = STATES) -> list[JobInfo]:
    """Every job of ``states`` on every stage's queues; errors only for scheduled and failed ones."""
    found: list[JobInfo] = []
    for stage in busmod.STAGES:
        lanes = bus.lanes(stage)
        for state in states:
            ids = _ids(lanes, state)
            for (job_id, due), job in zip(ids.items(), Job.fetch_many(list(ids), connection=bus.conn), strict=True):
                if job is None:
                    continue
                info = JobInfo(id=job_id, stage=stage, state=state, agent=job_agent(job), retry_at=due,
                               runs=sorted({e["run"] for e in _events(job) if isinstance(e.get("run"), str)}))
                if state in ("scheduled", "failed"):
                    info.error = last_error(job)
                    info.failed_at = job.meta.get("failed_at") or (job.ended_at.timestamp() if job.ended_at else None)
                    info.retries_left = job.retries_left
                found.append(info)
    return found


def failed_jobs(bus: busmod.Bus, *, run: str | None = None, agent: str | None = None,
                stage: str | None = None) -> list[JobInfo]:
    """Jobs whose retries are spent, optionally only those of a `memoryd index` run, an agent or a stage."""
    return [j for j in list_jobs(bus, ["failed"])
            if (run is None or run in j.runs) and (agent is None or j.agent == agent)
            and (stage is None or j.stage == stage)]


def retry_failed(bus: busmod.Bus, *, job_ids: Sequence[str] = (), agent: str | None = None,
                 stage: str | None = None) -> list[str]:
    """Put failed jobs back on their queue with the configured retries again; → the ids requeued.

    ``job_ids`` names them (ids not failed are skipped); otherwise every failed job of
    ``agent`` / ``stage`` (all of them without either)."""
    chosen = failed_jobs(bus, agent=agent, stage=stage)
    if job_ids:
        chosen = [j for j in chosen if j.id in set(job_ids)]
    requeued = []
    for info in chosen:
        try:
            job = Job.fetch(info.id, connection=bus.conn)
        except NoSuchJobError:
            continue  # its failure TTL ran out meanwhile
        job.retries_left = bus.settings.memoryd.job_retries or None
        job.meta.pop("last_error", None)
        try:
            FailedJobRegistry(job.origin, connection=bus.conn).requeue(job)
        except InvalidJobOperation:
            continue  # another `memoryd retry` took it first
        requeued.append(info.id)
        log.info("requeued failed job %s (%s, agent %s)", info.id, info.stage, info.agent)
    return requeued


# --- inside a worker ----------------------------------------------------------------------
def note_error(job: Job, exc_type: type[BaseException], exc_value: BaseException,
               traceback: TracebackType | None) -> bool:
    """RQ exception handler: keep this try's error and time on the job (RQ keeps no error for a
    try it retries), so ``memoryd status`` can say why a job waits for a retry."""
    job.meta["last_error"] = redact(f"{exc_type.__name__}: {exc_value}")[:2000]
    job.meta["failed_at"] = time.time()
    job.save_meta()
    return True  # go on to RQ's own handling (retry or the failed registry)


class RetryScheduler:
    """Moves a worker's retries that are due back onto their queues: RQ's scheduler, in-process.

    One process per queue holds RQ's scheduler lock, named after its worker: the orphan
    sweep (``shared/worker.requeue_orphans``) frees the lock of a worker that died with
    ``kill -9`` at once, instead of after RQ's 61-second lease.
    """

    def __init__(self, queues: Sequence[Queue], name: str) -> None:
        self.scheduler = RQScheduler(queues, connection=queues[0].connection, name=name, logging_level="WARNING")

    def promote(self) -> None:
        if self.scheduler.acquire_locks():
            self.scheduler.enqueue_scheduled_jobs()

    def release(self) -> None:
        self.scheduler.release_locks()


def scheduler_lock_holder(queue: Queue) -> str | None:
    holder = queue.connection.get(RQScheduler.get_locking_key(queue.name))
    return holder.decode() if holder else None


def release_lock_of(queue: Queue, holder: str) -> None:
    """Free ``queue``'s scheduler lock if ``holder`` (a dead worker) still holds it."""
    release_lock(queue.connection, RQScheduler.get_locking_key(queue.name), holder)
