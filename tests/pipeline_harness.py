"""Real service processes for integration tests: ``memoryd watcher`` and ``memoryd worker …``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis

from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.index.store import IndexReader
from memoryd.shared.log.eventlog import EventLog, hydrate, log_dir, read
from memoryd.shared.runtime.bus import Bus
from tests.support import match_expression, wait_until

__all__ = ["Pipeline", "wait_until"]

SERVICES = {
    "watcher": ["watcher"],
    "chunk": ["worker", "chunk"],
    "embed": ["worker", "embed"],
    "index": ["worker", "index"],
}


class Pipeline:
    """The services as subprocesses against one Redis database and one config file."""

    def __init__(self, config: Path, redis_url: str, settings: Settings, log_dir: Path) -> None:
        self.config = config
        self.redis_url = redis_url
        self.settings = settings
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.conn = redis.Redis.from_url(redis_url)
        self.bus = Bus(self.conn, settings)  # this installation's queue names and keys

    def env(self) -> dict[str, str]:
        return dict(os.environ, REDIS_URL=self.redis_url, MEMORYD_CONFIG=str(self.config))

    def start(self, *names: str) -> None:
        for name in names or tuple(SERVICES):
            log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "memoryd.services.cli", *SERVICES[name]],
                env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            )

    def kill9(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memoryd.services.cli", *args], env=self.env(),
                              capture_output=True, text=True, check=check, timeout=300)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.log_dir.glob("*.log"))

    # --- looking at the results ----------------------------------------------------------
    def events(self, agent: str, type_: str, path: str | None = None) -> list[Any]:
        """The agent's logged events of ``type_`` (on ``path``), from its log on disk, oldest first."""
        stores = EventLog(self.settings)
        try:
            return [hydrate(r.event, stores.content(agent), stores.vectors)
                    for r in read(log_dir(self.settings, agent))
                    if r.type == type_ and (path is None or r.path == path)]
        finally:
            stores.close()

    def query(self, agent: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            reader = IndexReader(self.settings.index_path(agent))
        except IndexMissing:
            return []
        try:
            return reader.conn.execute(sql, params).fetchall()
        finally:
            reader.close()

    def chunks(self, agent: str, path: str) -> list[tuple[Any, ...]]:
        return self.query(agent, "SELECT id, start_line, end_line, hash, text, has_vector FROM chunks "
                                 "WHERE path = ? ORDER BY start_line, id", (path,))

    def keyword(self, agent: str, phrase: str) -> list[str]:
        from memoryd.shared.index.fts import query_terms

        rows = self.query(agent, "SELECT c.path FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
                                 "WHERE chunks_fts MATCH ?", (match_expression(query_terms(phrase), operator="AND"),))
        return sorted({r[0] for r in rows})

    def drained(self) -> bool:
        """No job of the pipeline's stages queued, taken, running or waiting for its retry. RQ 3
        moves a job it takes to the queue's intermediate list before its started registry holds
        it (and leaves it there, done, until maintenance): a queue and registry both empty is not
        enough, the jobs of that list must be done too."""
        from rq.registry import ScheduledJobRegistry, StartedJobRegistry

        for q in (q for stage in ("chunk", "embed", "index") for q in self.bus.lanes(stage)):
            if (q.count or StartedJobRegistry(queue=q).count or ScheduledJobRegistry(queue=q).count
                    or any(self.bus.pending(job_id) for job_id in q.intermediate_queue.get_job_ids())):
                return False
        return True


def snapshot(settings: Settings, agent: str) -> dict[str, Any]:
    """What must be equal between two indexes of the same files."""
    reader = IndexReader(settings.index_path(agent))
    try:
        q = reader.conn.execute
        return {
            "files": sorted(q("SELECT path, hash, status FROM files WHERE status != 'deleted'").fetchall()),
            "chunks": sorted(q("SELECT path, start_line, end_line, hash, text, has_vector FROM chunks").fetchall()),
            "vectors": q("SELECT count(*) FROM chunk_vectors").fetchone()[0],
            "fts": q("SELECT count(*) FROM chunks_fts").fetchone()[0],
        }
    finally:
        reader.close()
