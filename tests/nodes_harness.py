"""A node for multi-node tests and bench/nodes.py: memoryd services as one process group with
its own state dir and node name (the agents' data dir and Redis are what nodes share)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import wait_until

SERVICES = {"watcher": ["watcher"], "chunk": ["worker", "chunk"], "embed": ["worker", "embed"],
            "index": ["worker", "index"], "serve": ["serve", "--port", "0"]}


class Node:
    """One node: its services as processes of one process group, its own state dir and name."""

    def __init__(self, name: str, root: Path, config: Path, redis_url: str, **env: str) -> None:
        self.name = name
        self.root = root
        self.state = root / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, REDIS_URL=redis_url, MEMORYD_CONFIG=str(config), MEMORYD_NODE=name,
                        MEMORYD_STATE_DIR=str(self.state), **env)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.group: int | None = None

    def start(self, *services: str) -> None:
        for service in services:
            # the query service's log is new at each start: its first line says where it listens
            log = open(self.root / f"{service}.log", "wb" if service == "serve" else "ab")  # noqa: SIM115
            proc = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", *SERVICES[service]], env=self.env,
                                    stdout=log, stderr=subprocess.STDOUT, process_group=self.group or 0)
            self.group = self.group or proc.pid
            self.procs[service] = proc

    def url(self) -> str:
        found: list[str] = []

        def listening() -> bool:
            found[:] = re.findall(r"HTTP API at (http://\S+) ", (self.root / "serve.log").read_text())
            return bool(found)

        wait_until(listening, timeout=60, what=f"{self.name}'s query service listening\n{self.logs()}")
        return found[0]

    def stop(self, service: str) -> None:
        proc = self.procs.pop(service)
        proc.terminate()
        proc.wait(timeout=20)

    def kill(self) -> None:
        """The node dies: SIGKILL to its whole process group."""
        if self.group is not None:
            os.killpg(self.group, signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(timeout=20)
        self.procs.clear()
        self.group = None

    def shutdown(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()

    def logs(self) -> str:
        return "\n".join(f"--- {self.name} {p.name}\n{p.read_text(errors='replace')[-2500:]}"
                         for p in sorted(self.root.glob("*.log")))


