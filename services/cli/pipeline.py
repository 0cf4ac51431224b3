"""Pipeline commands: ``up``, ``watcher``, ``worker``, ``index``."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
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
from memoryd.shared.runtime.worker import run_worker, set_context, stop_on_signals


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("up", parents=[common])
    p.add_argument("--no-http", action="store_true", help="do not start the HTTP query service")
    p.add_argument("--host", help="interface of the HTTP query service (default memoryd.server.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port of the HTTP query service (default memoryd.server.port, 8765)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("redis", parents=[common],
                       description="Choose this state dir's Redis by the rule `memoryd up` uses (configured; an "
                       "existing one on 127.0.0.1:6379; else a private redis-server, run in the foreground), note it "
                       "in <state>/redis/url for the services unless it is configured, and wait (the Procfile's "
                       "`redis` line): with nothing to start it only waits, so `honcho start` keeps the other "
                       "services.")
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

    return supervise(settings, http=not args.no_http, host=args.host, port=args.port)


def _log_jobs() -> None:
    """A service logs one INFO line per job (or reconcile) to stderr; other commands stay quiet."""
    logging.getLogger("memoryd").setLevel(logging.INFO)


def service_redis(settings: Settings, who: str) -> redis.Redis:
    """The Redis of a long-running service, said on stderr: the configured one; else the one noted
    in the state dir (by `memoryd up` or `memoryd redis`, waited for REDIS_NOTE_WAIT_SECONDS: the
    Procfile starts them together); else one answering on 127.0.0.1:6379."""
    url, why, step = redis_server.choose(settings)
    deadline = time.monotonic() + d.REDIS_NOTE_WAIT_SECONDS
    while step not in ("configured", "noted") and time.monotonic() < deadline:
        time.sleep(0.1)
        url, why, step = redis_server.choose(settings)
    conn = redis_server.connect(url)
    print(f"memoryd {who}: Redis {redact(url)} ({why})", file=sys.stderr, flush=True)
    return conn


def cmd_redis(args: argparse.Namespace, settings: Settings) -> int:
    stop = stop_on_signals()
    (url, why, step), private = redis_server.ensure_redis(settings, "memoryd redis")
    if private is None:
        if step == "local":  # a configured one the services find where this process did
            redis_server.note(settings.state_dir, url, f"chosen by memoryd redis (pid {os.getpid()}): {why}")
        print(f"memoryd redis: using {redact(url)} ({why}); nothing to start", flush=True)
        try:
            stop.wait()
        finally:
            redis_server.forget_note(settings.state_dir)
        return 0
    print(f"memoryd redis: private Redis at {private.url} ({private.binary}); ready", flush=True)
    bus = busmod.Bus(redis_server.connect(private.url), settings)
    served: set[int] = set()
    try:
        while not stop.wait(1.0):
            if private.process.poll() is not None:
                raise MemorydError(f"the private redis-server exited with {private.process.returncode}; see "
                                   f"{settings.state_dir / 'redis' / 'redis.log'}")
            served |= _worker_pids(bus)
        _outlive_workers(bus, served)
    finally:
        private.stop()
    return 0


def _worker_pids(bus: busmod.Bus) -> set[int]:
    """The pids of this machine's workers registered on the installation's queues."""
    from rq import Worker

    host = socket.gethostname()
    return {w.pid for queue in bus.queues.values() for w in Worker.all(queue=queue) if w.hostname == host and w.pid}


def _running(pid: int) -> bool:
    """Whether process ``pid`` of this machine still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _outlive_workers(bus: busmod.Bus, served: set[int]) -> None:
    """Asked to stop, as the services are by the same signal: wait (REDIS_STOP_GRACE_SECONDS at
    most) until no worker is registered and the processes of this host's that it served have
    ended (a worker deregisters before its last words), so they stop with their Redis there."""
    from rq import Worker

    deadline = time.monotonic() + d.REDIS_STOP_GRACE_SECONDS
    while time.monotonic() < deadline:
        try:
            served |= _worker_pids(bus)
            served = {pid for pid in served if _running(pid)}
            if not served and not any(Worker.all(queue=queue) for queue in bus.queues.values()):
                return
        except redis.RedisError:
            return
        time.sleep(0.1)
    print(f"memoryd redis: workers still running after {d.REDIS_STOP_GRACE_SECONDS:.0f}s; stopping Redis anyway",
          flush=True)


def cmd_watcher(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.pipeline import watcher

    _log_jobs()
    stop = stop_on_signals()  # a stopped watcher releases its leases: another node takes its agents at once
    conn = service_redis(settings, "watcher")
    watcher.run(settings, busmod.Bus(conn, settings), stop)
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    _log_jobs()
    conn = service_redis(settings, f"worker {args.stage}")
    if args.stage == "session":
        from memoryd.services.session import service as session

        session.run(settings, conn)
        return 0
    if args.stage == "index" and not args.burst:
        from memoryd.services.pipeline.indexer import backfill_scheduler, recovery_scheduler

        ctx = set_context(settings, conn)
        recovery_scheduler(ctx).start()
        backfill_scheduler(ctx).start()
    run_worker(args.stage, settings, conn, burst=args.burst)
    return 0


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.cli.index import cmd_index as run_index

    return run_index(args, settings)
