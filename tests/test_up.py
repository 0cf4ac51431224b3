"""`memoryd up`: every service as a real process; a saved file is found over HTTP; Ctrl-C stops all."""

from __future__ import annotations

import json
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
        _stop_tree(up)
        log.close()


def test_up_brings_the_query_processes_back_after_the_first_is_killed(workspace: Path, make_settings,
                                                                       redis_url: str, tmp_path: Path) -> None:
    """kill -9 of ``memoryd serve``'s first query process under ``up``: its helper stops with it
    (the kernel tells it), ``up`` starts the query service again, which binds the port once the
    helper let go of it and starts its own helper (services/cli/serveprocs.py)."""
    port = free_port()
    _, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"server": {"port": port,
                                                                                       "processes": 2}}})
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    up = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "up"],
                          stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"

    def query_processes() -> tuple[psutil.Process, list[psutil.Process]] | None:
        try:  # a process may end while it is looked at
            first = [c for c in psutil.Process(up.pid).children() if c.cmdline()[3:4] == ["serve"]]
            helpers = first[0].children() if first else []
        except psutil.Error:
            return None
        return (first[0], helpers) if first and helpers else None

    try:
        wait_until(lambda: _ok(f"{base}/healthz"), timeout=90, what="the query service")
        first, helpers = wait_until(query_processes, timeout=90, what="the query service's helper")
        first.kill()
        gone, alive = psutil.wait_procs(helpers, timeout=30)
        assert not alive  # the helper stopped with its first process
        again = wait_until(lambda: (q := query_processes()) and q[0].pid != first.pid and q, timeout=60,
                           what="a new first query process with its helper")
        answered = set()
        wait_until(lambda: answered.add(httpx.get(f"{base}/healthz", timeout=5).json()["pid"]) or
                   {again[0].pid, again[1][0].pid} <= answered, timeout=60, what="answers from both new processes")
        assert "memoryd: query exited with -9" in (tmp_path / "up.log").read_text()
    finally:
        _stop_tree(up)
        log.close()


def test_up_stops_within_one_deadline_however_many_services_hang(workspace: Path, make_settings, redis_url: str,
                                                                 tmp_path: Path) -> None:
    """Three services that do not stop on SIGTERM (stopped with SIGSTOP: they act on no signal but
    SIGKILL) are killed together at UP_STOP_SECONDS after it, not one after another (30 s)."""
    from memoryd.shared import defaults as d

    port = free_port()
    _, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"server": {"port": port}}})
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    up = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "up"],
                          stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _ok(f"http://127.0.0.1:{port}/healthz"), timeout=90, what="up's HTTP service")
        hung = [c for c in psutil.Process(up.pid).children() if c.cmdline()[3:4] == ["worker"]][:3]
        stages = [c.cmdline()[4] for c in hung]
        for child in hung:
            child.send_signal(signal.SIGSTOP)
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=2 * d.UP_STOP_SECONDS + 5) == 0  # one after another: 3 × 10 s
        assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in hung)
        said = (tmp_path / "up.log").read_text()
        for stage in stages:  # each hung one named (another, still starting when told to stop, may be too)
            name = {"chunk": "chunker", "embed": "embedder", "index": "indexer", "session": "session"}[stage]
            assert f"memoryd: {name} did not stop within {d.UP_STOP_SECONDS:.0f}s of SIGTERM; killed" in said
    finally:
        _stop_tree(up)
        log.close()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _memoryd(config: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_up_uses_an_existing_redis_notes_it_and_every_reason_is_true(workspace: Path, make_settings, redis_url: str,
                                                                     tmp_path: Path) -> None:
    """Items 1, 2, 6 of issue 22: no Redis configured and one answering at the local address
    (here the tests' server, as memoryd.localRedisUrl): `up` uses it, notes it in <state>/redis/url,
    and the workers and `status` say why truthfully; `status` lists the live workers and the
    server, and says plainly when nothing runs; `up --port` is the server's port."""
    port = free_port()
    settings, config = make_settings(workspace)  # no redisUrl
    env = dict(os.environ, MEMORYD_LOCAL_REDIS_URL=redis_url)
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    up = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "up",
                           "--host", "127.0.0.1", "--port", str(port)],
                          stdout=log, stderr=subprocess.STDOUT, env=env)
    noted = settings.state_dir / "redis" / "url"
    try:
        wait_until(lambda: _ok(f"http://127.0.0.1:{port}/healthz"), timeout=90, what="up's HTTP service")
        assert noted.read_text().splitlines()[0] == redis_url
        status = json.loads(_memoryd(config, "status", "--json", env=env).stdout)
        assert status["redis"]["url"] == redis_url and "chosen by memoryd up" in status["redis"]["why"]
        assert "existing Redis answering" in status["redis"]["why"]
        assert status["running"]["server"] == f"http://127.0.0.1:{port}" and not status["running"]["nothing"]
        assert status["running"]["upPid"] == up.pid

        def workers() -> dict | None:
            found = json.loads(_memoryd(config, "status", "--json", env=env).stdout)["running"]["workers"]
            return found if all(found[stage] for stage in ("chunk", "embed", "index", "session")) else None

        found = wait_until(workers, timeout=60, interval=0.5, what="a live worker on every stage")
        pids = {c.pid for c in psutil.Process(up.pid).children()}
        assert {w["pid"] for stage in found.values() for w in stage} <= pids
        human = _memoryd(config, "status", env=env).stdout
        assert f"server  http://127.0.0.1:{port}" in human and "worker  chunk" in human
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0
    finally:
        _stop_tree(up)
        log.close()
    text = (tmp_path / "up.log").read_text(errors="replace")
    assert "memoryd worker chunk: Redis " in text and "(configured)" not in text and "noted in" in text
    assert not noted.exists()  # up removed the note it wrote
    stopped = json.loads(_memoryd(config, "status", "--json", env=env).stdout)["running"]
    assert stopped["nothing"] and stopped["server"] is None and not any(stopped["workers"].values())
    assert "running nothing" in _memoryd(config, "status", env=env).stdout


def test_a_second_up_or_serve_on_one_state_dir_is_refused_and_removes_nothing(
        workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> None:
    """Item 3 of issue 22: beside a running `up`, a second `up` and a `memoryd serve` are refused
    with the pid and the fix, and `<state>/serve.json` and `<state>/redis/config` stay the first's;
    `serve --another` runs beside it without taking its note."""
    port = free_port()
    settings, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"server": {"port": port}}})
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below
    up = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "up"],
                          stdout=log, stderr=subprocess.STDOUT)
    state = settings.state_dir
    try:
        wait_until(lambda: _ok(f"http://127.0.0.1:{port}/healthz"), timeout=90, what="up's HTTP service")
        before = (state / "serve.json").read_text(), (state / "redis" / "config").read_text()
        second = _memoryd(config, "up", "--port", str(free_port()))
        assert second.returncode == 1 and f"a memoryd up (pid {up.pid}) already runs" in second.stderr
        other = free_port()
        serve = _memoryd(config, "serve", "--port", str(other))
        assert serve.returncode == 1 and "already serves the state dir" in serve.stderr and "--another" in serve.stderr
        beside = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "serve",
                                   "--port", str(other), "--another"], stdout=subprocess.PIPE, text=True)
        try:
            assert "ready" in beside.stdout.readline()
            assert _ok(f"http://127.0.0.1:{other}/healthz")
        finally:
            beside.send_signal(signal.SIGTERM)
            beside.wait(timeout=30)
        assert ((state / "serve.json").read_text(), (state / "redis" / "config").read_text()) == before
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=30)
        log.close()


def _stop_tree(up: subprocess.Popen[bytes]) -> None:
    """A test that failed with ``up`` still running: stop it and every service it started, so none
    outlives the test (SIGKILL of ``up`` alone would orphan them)."""
    if up.poll() is not None:
        return
    children = psutil.Process(up.pid).children(recursive=True)
    up.send_signal(signal.SIGINT)
    try:
        up.wait(timeout=30)
    except subprocess.TimeoutExpired:
        up.kill()
    for child in children:
        if child.is_running():
            child.kill()
