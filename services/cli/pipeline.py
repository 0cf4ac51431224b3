"""Pipeline commands: ``up``, ``watcher``, ``worker``, ``index``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

import redis

import memoryd.services.pipeline  # noqa: F401  (the stages register their jobs with the bus)
import memoryd.services.session  # noqa: F401  (so do the session jobs)
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.redact import redact
from memoryd.shared.runtime import bus as busmod
from memoryd.shared.runtime import redis_server
from memoryd.shared.runtime.worker import run_worker, set_context


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("up", parents=[common])
    p.add_argument("--no-http", action="store_true", help="do not start the HTTP query service")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("redis", parents=[common],
                       description="Run a private Redis for this state dir in the foreground, noted in "
                       "<state>/redis/url so the services started without a configured Redis use it (the "
                       "Procfile's `redis` line). With a Redis configured it notes that one instead and only waits, "
                       "so `honcho start` keeps the other services.")
    p.set_defaults(func=cmd_redis)

    p = sub.add_parser("watcher", parents=[common])
    p.set_defaults(func=cmd_watcher)

    p = sub.add_parser("worker", parents=[common])
    p.add_argument("stage", choices=busmod.STAGES, help="the queue to work")
    p.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("index", parents=[common],
                       description="Push every memory file of an agent's workspace through the pipeline. Without "
                       "running workers this process works the stages (with a live progress bar on a terminal); "
                       "with running workers (`memoryd up`) it queues the files and returns, or follows them "
                       "with --wait. It exits non-zero naming the job as soon as one fails for good.")
    p.add_argument("--agent", default="main", help="agent id (registered with --workspace if new)")
    p.add_argument("--workspace", help="the agent's workspace folder (registers or moves the agent)")
    p.add_argument("--wait", action="store_true",
                   help="when running workers take the files (`memoryd up`), follow them until indexed instead "
                        "of returning once queued (without running workers the command always waits)")
    p.add_argument("--create", action="store_true",
                   help="create the workspace if it does not exist (standard files, memory/, git init)")
    p.add_argument("--stall-seconds", type=float, metavar="S",
                   help="give up (exit 1) when no file or chunk moved for S seconds (default: a job's timeout "
                        "plus the retry backoff plus a minute)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=cmd_index)


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.cli.up import supervise

    return supervise(settings, http=not args.no_http)


def _log_jobs() -> None:
    """A service logs one INFO line per job (or reconcile) to stderr; other commands stay quiet."""
    logging.getLogger("memoryd").setLevel(logging.INFO)


def service_redis(settings: Settings, who: str) -> redis.Redis:
    """The Redis of a long-running service, said on stderr: the configured one; else the one noted
    in the state dir (by `memoryd up` or `memoryd redis`, waited for REDIS_NOTE_WAIT_SECONDS: the
    Procfile starts them together); else one answering on 127.0.0.1:6379."""
    if settings.memoryd.redis_url:
        url, why = settings.memoryd.redis_url, "configured"
    else:
        noted = settings.state_dir / redis_server.PRIVATE_URL_FILE
        deadline = time.monotonic() + d.REDIS_NOTE_WAIT_SECONDS
        url, why = d.DEFAULT_REDIS_URL, f"none configured and none noted in {noted}: the default"
        while time.monotonic() < deadline:
            found = noted.read_text(encoding="utf-8").strip() if noted.exists() else ""
            if found and redis_server.answers(found):
                url, why = found, f"noted in {noted}"
                break
            time.sleep(0.1)
    conn = redis_server.connect(url)
    print(f"memoryd {who}: Redis {redact(url)} ({why})", file=sys.stderr, flush=True)
    return conn


def cmd_redis(args: argparse.Namespace, settings: Settings) -> int:
    noted = settings.state_dir / redis_server.PRIVATE_URL_FILE
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    existing = settings.memoryd.redis_url
    if existing:
        redis_server.connect(existing)
        noted.parent.mkdir(parents=True, exist_ok=True)
        noted.write_text(existing, encoding="utf-8")
        print(f"memoryd redis: using the configured {redact(existing)}; nothing to start", flush=True)
        try:
            stop.wait()
        finally:
            noted.unlink(missing_ok=True)
        return 0
    private = redis_server.start_private_redis(settings.state_dir)
    print(f"memoryd redis: private Redis at {private.url} ({private.binary}); ready", flush=True)
    try:
        while not stop.wait(1.0):
            if private.process.poll() is not None:
                raise MemorydError(f"the private redis-server exited with {private.process.returncode}; see "
                                   f"{settings.state_dir / 'redis' / 'redis.log'}")
    finally:
        private.stop()
    return 0


def cmd_watcher(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.pipeline import watcher

    _log_jobs()
    conn = service_redis(settings, "watcher")
    watcher.run(settings, busmod.Bus(conn, settings))
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    _log_jobs()
    conn = service_redis(settings, f"worker {args.stage}")
    if args.stage == "session":
        from memoryd.services.session import service as session

        session.run(settings, conn)
        return 0
    if args.stage == "embed" and not args.burst:
        from memoryd.services.pipeline.embedder import backfill_scheduler

        backfill_scheduler(set_context(settings, conn)).start()
    if args.stage == "index" and not args.burst:
        from memoryd.services.pipeline.indexer import recovery_scheduler

        recovery_scheduler(set_context(settings, conn)).start()
    run_worker(args.stage, settings, conn, burst=args.burst)
    return 0


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.cli.index import cmd_index as run_index

    return run_index(args, settings)
