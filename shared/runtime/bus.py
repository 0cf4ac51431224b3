"""Redis: queues between stages, per-agent sequence numbers, the event log, run counters.

Stages never call each other; they enqueue the next stage's job by its name (``"embed"``,
registered by the service that owns it: :func:`register_jobs`) with the event as JSON. Every emitted event is first
appended to the agent's durable log on disk (``memoryd.shared.log.eventlog``): Redis carries the work,
the log keeps the record.

**One Redis, several installations.** Every queue and key carries the installation's
namespace (``Settings.namespace``: ``memoryd.namespace``, else derived from the state dir),
so two ``memoryd up`` on one Redis never take each other's jobs or numbers.

**Two lanes per stage.** Each stage has an *edit* queue and a *bulk* queue, and workers
take the edit queue first (RQ dequeues its queues in order). A person's or an agent's edit
(the watcher) goes on the edit lane; ``memoryd index``, reconciles and backfills on the bulk
lane; a job's follow-up work stays in its lane. So a 10,000-file import of one agent delays
another agent's edit by at most one bulk job per stage.

**The index stage is the owner's.** An agent's index and log are written only by the node
that holds its lease (shared/runtime/lease.py). Index-stage jobs go to that node's own lanes,
``memoryd-<namespace>-index@<node>`` (``…-bulk``); while nobody holds the lease, to the shared
lanes, which every indexer takes after its own (and passes on what another node owns).
Chunkers and embedders only read and compute, on any node: they queue their output
(:meth:`Bus.send`) and log nothing; :meth:`Bus.emit` (the owner's watcher, its indexer, the
session service) logs under the agent's fencing token first.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence

import redis
from rq import Queue, Retry, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import AgentEntry, Settings
from memoryd.shared.events import Event
from memoryd.shared.log.eventlog import EventLog
from memoryd.shared.runtime.lease import Leases

#: One queue per stage and lane, so each scales and retries on its own.
STAGES = ("chunk", "embed", "index", "session")
#: The lanes of every stage, in the order workers take them.
LANES = ("edit", "bulk")


#: The stage whose jobs run on the agent's owner.
OWNED_STAGE = "index"


def queue_name(namespace: str, stage: str, lane: str = "edit", node: str | None = None) -> str:
    """``memoryd-<namespace>-<stage>`` (the edit lane) or ``…-bulk``; a node's own lanes of the
    owned stage: ``memoryd-<namespace>-index@<node>`` and ``…@<node>-bulk``."""
    return f"memoryd-{namespace}-{stage}" + (f"@{node}" if node else "") + ("" if lane == "edit" else f"-{lane}")


#: Job name → the dotted name of its function. The services that own the jobs fill it when
#: imported (``memoryd.services.pipeline``, ``memoryd.services.session``): shared/ names no service.
JOBS: dict[str, str] = {}
#: Job name → the stage whose queues carry it.
JOB_STAGE: dict[str, str] = {}


def register_jobs(jobs: dict[str, tuple[str, str]]) -> None:
    """Make ``name → (stage, dotted function)`` jobs known to every :meth:`Bus.enqueue` of this process."""
    for name, (stage, function) in jobs.items():
        if stage not in STAGES:
            raise ValueError(f"job {name!r}: unknown stage {stage!r}; the stages are {', '.join(STAGES)}")
        JOBS[name], JOB_STAGE[name] = function, stage


#: The key whose value changes when Redis lost its data (shared/rebuild/recovery.py): set by the
#: first emit into an empty Redis, watched by the indexers.
LOG_EPOCH = "log-epoch"
# seq = max(last + 1, now in µs): strictly increasing, and still increasing after Redis
# lost its data, so an old event can never look newer than what the index holds.
_NEXT_SEQ = """
local now = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local nxt = math.max(last + 1, now)
redis.call('SET', KEYS[1], nxt)
return nxt
"""


def in_bulk_lane() -> bool:
    """Whether the job running in this process now came from a bulk lane (False outside a job)."""
    current = get_current_job()
    return current is not None and current.origin.endswith("-bulk")


class Bus:
    """What a stage needs of Redis: emit events and number them (a run's counters: runtime/runs.py)."""

    def __init__(self, conn: redis.Redis, settings: Settings) -> None:
        self.conn = conn
        self.settings = settings
        self.namespace = settings.namespace
        self._next_seq = conn.register_script(_NEXT_SEQ)
        self.record = EventLog(settings)
        self.leases = Leases(conn, self.namespace, settings.node)
        #: The (shared) edit lane of each stage; ``lanes(stage)`` gives what a worker takes, in order.
        self.queues = {stage: Queue(queue_name(self.namespace, stage), connection=conn) for stage in STAGES}
        self.bulk = {stage: Queue(queue_name(self.namespace, stage, "bulk"), connection=conn) for stage in STAGES}

    def node_lanes(self, node: str) -> tuple[Queue, Queue]:
        """The edit and bulk lanes of ``node``'s own index stage."""
        return (Queue(queue_name(self.namespace, OWNED_STAGE, "edit", node), connection=self.conn),
                Queue(queue_name(self.namespace, OWNED_STAGE, "bulk", node), connection=self.conn))

    def lanes(self, stage: str) -> list[Queue]:
        """A worker's queues of ``stage`` in the order it takes them: edit before bulk, and for the
        index stage this node's own lane before the shared one."""
        if stage != OWNED_STAGE:
            return [self.queues[stage], self.bulk[stage]]
        edit, bulk = self.node_lanes(self.settings.node)
        return [edit, self.queues[stage], bulk, self.bulk[stage]]

    def key(self, *parts: str) -> str:
        """This installation's Redis key ``memoryd:<namespace>:<part>:…``."""
        return ":".join(("memoryd", self.namespace, *parts))

    def job_id(self, name: str) -> str:
        """A deterministic job id (at most one such job at a time) of this installation."""
        return f"{self.namespace}-{name}"

    def pending(self, job_id: str) -> bool:
        """Whether the job ``job_id`` is queued, running, scheduled or deferred (one such job at a time)."""
        try:
            status = Job.fetch(job_id, connection=self.conn).get_status()
        except NoSuchJobError:
            return False
        return status in (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.SCHEDULED, JobStatus.DEFERRED)

    def next_seq(self, agent: str) -> int:
        return int(self._next_seq(keys=[self.key("seq", agent)], args=[int(time.time() * 1_000_000)]))

    def log(self, events: Sequence[Event]) -> None:
        """Append ``events`` to their agents' durable logs (texts and vectors stored by hash), each
        agent's under this node's fencing token: NotOwner if another node holds its lease."""
        fences = {agent: self.leases.token(agent) for agent in dict.fromkeys(e.agent for e in events)}
        self.record.append(events, fences)

    def owner_node(self, agent: str) -> str | None:
        """The node whose index lanes take ``agent``'s jobs (None: nobody holds its lease; the shared lanes)."""
        owner = self.leases.owner(agent)
        return owner.node if owner else None

    def enqueue(self, job: str, *args: object, job_id: str | None = None, bulk: bool | None = None,
                node: str | None = None) -> None:
        """Queue ``JOBS[job]`` on its stage's queue with the configured retries, timeout and TTLs.

        ``bulk``: the lane; None = the lane of the job running now (the edit lane outside a job).
        ``node``: that node's own lanes (index-stage jobs; see :meth:`send`)."""
        if job not in JOBS:
            raise LookupError(f"no service registered the job {job!r} in this process: the service that owns it "
                              "registers its jobs when its package is imported; import it before enqueueing")
        stage = JOB_STAGE[job]
        m = self.settings.memoryd
        if bulk is None:
            bulk = in_bulk_lane()
        if node is not None and stage == OWNED_STAGE:
            queue = self.node_lanes(node)[1 if bulk else 0]
        else:
            queue = (self.bulk if bulk else self.queues)[stage]
        queue.enqueue(
            JOBS[job],
            *args,
            job_id=job_id,
            retry=Retry(max=m.job_retries, interval=d.RETRY_INTERVALS) if m.job_retries else None,
            job_timeout=m.job_timeout_seconds,
            result_ttl=60,
            failure_ttl=m.failure_ttl_seconds,
        )

    def send(self, job: str, events: Sequence[Event], *, job_id: str | None = None,
             bulk: bool | None = None) -> None:
        """Enqueue ``events`` for ``job`` without logging them (a chunker's or embedder's output):
        an index-stage job goes to each agent's owner, one batch per owner (``job_id`` and
        ``-2``, ``-3``… after it for the others)."""
        if not events:
            return
        if JOB_STAGE.get(job) != OWNED_STAGE:
            self.enqueue(job, [e.model_dump_json() for e in events], job_id=job_id, bulk=bulk)
            return
        owners = {agent: self.owner_node(agent) for agent in dict.fromkeys(e.agent for e in events)}
        for n, node in enumerate(dict.fromkeys(owners.values())):
            self.enqueue(job, [e.model_dump_json() for e in events if owners[e.agent] == node], bulk=bulk, node=node,
                         job_id=job_id if job_id is None or n == 0 else f"{job_id}-{n + 1}")

    def emit(self, job: str, events: Sequence[Event], *, job_id: str | None = None,
             bulk: bool | None = None) -> None:
        """Log ``events`` (under this node's fencing tokens) and :meth:`send` them for the job ``job``."""
        if not events:
            return
        # Redis is about to hold queued work: a new value here after a flush tells recovery it lost some.
        # Set before the log append, so an indexer looking between the append and the enqueue does not
        # take this emit's logged event for lost work.
        self.conn.set(self.key(LOG_EPOCH), uuid.uuid4().hex, nx=True)
        self.log(events)
        self.send(job, events, job_id=job_id, bulk=bulk)

    def publish_agents(self, settings: Settings, agents: Sequence[str], said: dict[str, str]) -> None:
        """Publish the configuration of ``agents`` (their owner's, defaults applied) for the chunkers
        and embedders of nodes that do not mount the data dir and its agent registry; ``said``: what
        this process published last (only changes are written, and recorded there)."""
        changed = {}
        for agent in agents:
            c = settings.agent(agent)
            entry = AgentEntry(id=agent, workspace=str(c.workspace), extra_paths=list(c.extra_paths),
                               context_window=c.context_window, compaction=c.compaction,
                               memory_search=c.memory_search, heartbeat=c.heartbeat,
                               cjk_memory=c.cjk_memory or None)
            text = entry.model_dump_json(by_alias=True, exclude_none=True)
            if said.get(agent) != text:
                changed[agent] = text
        if changed:
            self.conn.hset(self.key("agent-config"), mapping=changed)
            said.update(changed)

    def published_agent(self, agent: str) -> AgentEntry | None:
        """The configuration the agent's owner published (None: none did)."""
        raw = self.conn.hget(self.key("agent-config"), agent)
        return AgentEntry.model_validate_json(raw) if raw else None

    def note_reconciled(self, agent: str) -> None:
        self.conn.hset(self.key("reconciled"), agent, time.time())

    def plant_marker(self) -> None:
        """Set the key whose absence later tells the watcher that Redis lost its data."""
        self.conn.set(self.key("marker"), time.time())

    def marker_gone(self) -> bool:
        """Whether Redis lost its data (restarted without saving, ``FLUSHALL``) since :meth:`plant_marker`."""
        return not self.conn.exists(self.key("marker"))

    def last_reconciled(self) -> dict[str, float]:
        return {k.decode(): float(v) for k, v in self.conn.hgetall(self.key("reconciled")).items()}

    def note_provider_error(self, agent: str, error: str | None) -> None:
        """The embedder's last provider failure for ``agent`` (None: it worked again)."""
        if error is None:
            self.conn.hdel(self.key("provider-errors"), agent)
        else:
            self.conn.hset(self.key("provider-errors"), agent, json.dumps({"at": time.time(), "error": error}))

    def provider_errors(self) -> dict[str, dict[str, object]]:
        return {k.decode(): json.loads(v) for k, v in self.conn.hgetall(self.key("provider-errors")).items()}

    def note_missing_vectors(self, agent: str, missing: int) -> None:
        self.conn.hset(self.key("missing-vectors"), agent, missing)

    def agents_missing_vectors(self) -> dict[str, int]:
        raw = self.conn.hgetall(self.key("missing-vectors"))
        return {k.decode(): int(v) for k, v in raw.items() if int(v) > 0}

    def forget(self, agent: str) -> None:
        """Drop what Redis holds for ``agent`` (``memoryd agents remove``): its sequence number
        and its fields in the status hashes."""
        pipe = self.conn.pipeline(transaction=False)
        pipe.delete(self.key("seq", agent))
        for table in ("reconciled", "provider-errors", "missing-vectors", "agent-config"):
            pipe.hdel(self.key(table), agent)
        pipe.execute()
