"""`memoryd up`: every service as a real process; a saved file is found over HTTP; Ctrl-C stops all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support import foreign_packages_dir, free_port, wait_until

pytestmark = pytest.mark.integration


def test_up_runs_all_services_and_stops_them(workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    _, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"server": {"port": port}}})
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    # started from a folder with its own `services` and `shared` packages: up and its children ignore them
    project = foreign_packages_dir(tmp_path / "project")
    up = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "up"],
                          stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ), cwd=project)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ok(f"{base}/healthz"), timeout=90)
        names = {" ".join(c.cmdline()[3:]) for c in psutil.Process(up.pid).children()}
        assert names == {"watcher", "worker chunk", "worker embed", "worker index", "worker session", "serve"}
        (workspace / "memory" / "2026-06-01.md").write_text("Decided: the release train leaves on Thursdays.\n")

        def found() -> list[str]:
            r = httpx.post(f"{base}/v1/agents/main/memory_search", json={"query": "release train Thursdays"})
            return [hit["path"] for hit in r.json()["results"]] if r.status_code == 200 else []

        assert wait_until(found, timeout=60)[0] == "memory/2026-06-01.md"
        children = psutil.Process(up.pid).children()
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert not alive
    finally:
        if up.poll() is None:
            up.kill()
        log.close()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
