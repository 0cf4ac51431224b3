"""Redis: queues between stages, per-agent sequence numbers, the event log, run counters.

Stages never call each other; they enqueue the next stage's job by its dotted name
(``memoryd.services.pipeline.embedder.embed_job``) with the event as JSON. Every emitted event is first
appended to the agent's durable log on disk (``memoryd.shared.eventlog``): Redis carries the work,
the log keeps the record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import redis
from rq import Queue, Retry

from memoryd.shared import defaults as d
from memoryd.shared.config import Settings
from memoryd.shared.eventlog import EventLog
from memoryd.shared.events import Event

#: One queue per stage, so each scales and retries on its own.
QUEUES = {
    "chunk": "memoryd-chunk",
    "embed": "memoryd-embed",
    "index": "memoryd-index",
    "session": "memoryd-session",
}
JOBS = {
    "chunk": "memoryd.services.pipeline.chunker.chunk_job",
    "embed": "memoryd.services.pipeline.embedder.embed_job",
    "backfill": "memoryd.services.pipeline.embedder.backfill_job",
    "index": "memoryd.services.pipeline.indexer.index_job",
    "fill": "memoryd.services.pipeline.indexer.fill_job",
    # a side-by-side rebuild from the log, a slice at a time, on the index queue
    "rebuild": "memoryd.services.pipeline.rebuild.rebuild_job",
    # the session service's jobs take ids, not events (services/session.py)
    "flush": "memoryd.services.session.service.flush_job",
    "compact": "memoryd.services.session.service.compact_job",
    "session_memory": "memoryd.services.session.service.session_memory_job",
}
#: The queue of each job that is not named after its stage.
JOB_STAGE = {"backfill": "embed", "fill": "index", "rebuild": "index", "flush": "session", "compact": "session",
             "session_memory": "session"}

# seq = max(last + 1, now in µs): strictly increasing, and still increasing after Redis
# lost its data, so an old event can never look newer than what the index holds.
_NEXT_SEQ = """
local now = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local nxt = math.max(last + 1, now)
redis.call('SET', KEYS[1], nxt)
return nxt
"""


class Bus:
    """What a stage needs of Redis: emit events, number them, count a run's progress."""

    def __init__(self, conn: redis.Redis, settings: Settings) -> None:
        self.conn = conn
        self.settings = settings
        self._next_seq = conn.register_script(_NEXT_SEQ)
        self.record = EventLog(settings)
        self.queues = {stage: Queue(name, connection=conn) for stage, name in QUEUES.items()}

    def next_seq(self, agent: str) -> int:
        return int(self._next_seq(keys=[f"memoryd:seq:{agent}"], args=[int(time.time() * 1_000_000)]))

    def log(self, events: Sequence[Event]) -> None:
        """Append ``events`` to their agents' durable logs (texts and vectors stored by hash)."""
        self.record.append(events)

    def enqueue(self, job: str, *args: object, job_id: str | None = None) -> None:
        """Queue ``JOBS[job]`` on its stage's queue with the configured retries, timeout and TTLs."""
        stage = JOB_STAGE.get(job, job)
        m = self.settings.memoryd
        self.queues[stage].enqueue(
            JOBS[job],
            *args,
            job_id=job_id,
            retry=Retry(max=m.job_retries, interval=d.RETRY_INTERVALS) if m.job_retries else None,
            job_timeout=m.job_timeout_seconds,
            result_ttl=60,
            failure_ttl=m.failure_ttl_seconds,
        )

    def emit(self, job: str, events: Sequence[Event], *, job_id: str | None = None) -> None:
        """Log ``events`` and enqueue them, as one batch, for the job ``job`` (a key of JOBS)."""
        if not events:
            return
        self.log(events)
        payloads = [e.model_dump_json() for e in events]
        self.enqueue(job, payloads, job_id=job_id)

    # --- a run of `memoryd index`: counters the stages bump, the CLI reads ---------------
    def count(self, run: str | None, **fields: int) -> None:
        if not run:
            return
        pipe = self.conn.pipeline(transaction=False)
        for name, value in fields.items():
            if value:
                pipe.hincrby(f"memoryd:run:{run}", name, value)
        pipe.expire(f"memoryd:run:{run}", 24 * 3600)
        pipe.execute()

    def run_counts(self, run: str) -> dict[str, int]:
        raw = self.conn.hgetall(f"memoryd:run:{run}")
        return {k.decode(): int(v) for k, v in raw.items()}

    def note_reconciled(self, agent: str) -> None:
        self.conn.hset("memoryd:reconciled", agent, time.time())

    def plant_marker(self) -> None:
        """Set the key whose absence later tells the watcher that Redis lost its data."""
        self.conn.set(self.key("marker"), time.time())

    def marker_gone(self) -> bool:
        """Whether Redis lost its data (restarted without saving, ``FLUSHALL``) since :meth:`plant_marker`."""
        return not self.conn.exists(self.key("marker"))

    def last_reconciled(self) -> dict[str, float]:
        return {k.decode(): float(v) for k, v in self.conn.hgetall("memoryd:reconciled").items()}

    def note_provider_error(self, agent: str, error: str | None) -> None:
        """The embedder's last provider failure for ``agent`` (None: it worked again)."""
        if error is None:
            self.conn.hdel("memoryd:provider-errors", agent)
        else:
            self.conn.hset("memoryd:provider-errors", agent, json.dumps({"at": time.time(), "error": error}))

    def provider_errors(self) -> dict[str, dict[str, object]]:
        return {k.decode(): json.loads(v) for k, v in self.conn.hgetall("memoryd:provider-errors").items()}

    def note_missing_vectors(self, agent: str, missing: int) -> None:
        self.conn.hset("memoryd:missing-vectors", agent, missing)

    def agents_missing_vectors(self) -> dict[str, int]:
        raw = self.conn.hgetall("memoryd:missing-vectors")
        return {k.decode(): int(v) for k, v in raw.items() if int(v) > 0}
