"""Pipeline commands: ``up``, ``watcher``, ``worker``, ``index``."""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

from rq import SimpleWorker

from memoryd.services.cli.status import index_counts, print_result
from memoryd.shared import bus as busmod
from memoryd.shared import defaults as d
from memoryd.shared import redis_server
from memoryd.shared.config import Settings, register_agent
from memoryd.shared.events import FileDeleted
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.worker import run_worker, set_context, worker_name

STAGES = ("chunk", "embed", "index", "session")


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


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.cli.up import supervise

    return supervise(settings, http=not args.no_http)


def cmd_watcher(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.pipeline import watcher

    conn = redis_server.connect(redis_server.redis_url(settings))
    watcher.run(settings, busmod.Bus(conn, settings))
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    conn = redis_server.connect(redis_server.redis_url(settings))
    if args.stage == "session":
        from memoryd.services.session import service as session

        session.run(settings, conn)
        return 0
    if args.stage == "embed" and not args.burst:
        from memoryd.services.pipeline.embedder import backfill_scheduler

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
    from memoryd.shared.bootstrap import ensure_workspace
    from memoryd.shared.indexing import changed_event, indexed_hashes, skipped_event
    from memoryd.shared.workspace import Workspace

    if args.workspace:
        workspace = Path(args.workspace).expanduser()
        if not workspace.is_dir():
            raise MemorydError(f"workspace {workspace} is not a folder; create it or fix --workspace")
        settings = register_agent(settings, args.agent, workspace)
    agent = settings.agent(args.agent)
    ensure_workspace(agent)
    started = time.monotonic()
    url, private = redis_server.ensure_redis(settings)
    try:
        conn = redis_server.connect(url)
        bus = busmod.Bus(conn, settings)
        set_context(settings, conn)
        run = uuid.uuid4().hex
        survey = Workspace(agent).survey()  # files, and what is skipped (names not UTF-8, too deep)
        files = survey.files
        events = [e for f in files if (e := changed_event(bus, agent.id, f, origin="index", run=run))]
        skipped = [skipped_event(agent.id, s, bus.next_seq(agent.id), run) for s in survey.skipped]
        gone = sorted(set(indexed_hashes(settings, agent.id)) - {f.path for f in files}
                      - {s.path for s in survey.skipped})
        for start in range(0, len(events), d.FILES_PER_CHUNK_JOB):
            bus.emit("chunk", events[start:start + d.FILES_PER_CHUNK_JOB])
        bus.emit("index", [*skipped, *(FileDeleted(agent=agent.id, path=p, seq=bus.next_seq(agent.id), run=run,
                                                   origin="index") for p in gone)])
        total = len(events) + len(gone) + len(skipped)
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
        "index": index_counts(settings, agent.id),
        "seconds": round(time.monotonic() - started, 3),
        "redis": "private" if private else url,
    }
    print_result(result, args.json)
    return 0
