"""The CLI answers like the server: through a running ``memoryd serve`` when there is one, in-process
otherwise, loading only what the request needs; ``memoryd --help`` imports nothing heavy."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import get_args

import pytest
from retrieval_set import build
from support import wait_until

from memoryd.services.cli import app, locate, remote
from memoryd.services.cli import query as cli_query
from memoryd.services.query.models import Fusion
from memoryd.shared.config.settings import Settings

HEAVY = ("numpy", "pydantic", "rq", "redis", "onnxruntime", "fastapi", "uvicorn", "tiktoken")
#: Standard-library modules a search answered by a running server does without (each 2–14 ms).
LIGHT = ("logging", "socket", "typing", "shutil", "datetime")
#: Runs the CLI in a fresh interpreter, then reports which heavy modules it imported and
#: whether it mapped a vector file.
PROBE = f"""
import json, sys
from memoryd.services.cli.app import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
maps = open("/proc/self/maps").read()
print(json.dumps({{"code": code, "heavy": sorted(m for m in {HEAVY!r} if m in sys.modules),
                  "light": sorted(m for m in {LIGHT!r} if m in sys.modules),
                  "vec_mapped": ".vec" in maps}}), file=sys.stderr)
"""


def cli(settings: Settings, *argv: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                                    dict]:
    full = [*argv, "--config", settings.source_file or "", "--state-dir", str(settings.state_dir)]
    out = subprocess.run([sys.executable, "-c", PROBE, *full], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})})
    report = json.loads(out.stderr.strip().splitlines()[-1])
    return out, report


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return build(tmp_path_factory.mktemp("transport"), provider="hash")


def test_the_command_table_is_what_the_modules_register() -> None:
    sub = next(a for a in app.build_parser()._actions if a.dest == "command")
    registered = {c.dest: c.help for c in sub._choices_actions}
    assert registered == {name: help_text for name, (_, help_text) in app.COMMANDS.items()}
    for name in app.COMMANDS:  # the module the table names registers the command
        alone = next(a for a in app.build_parser(name)._actions if a.dest == "command")
        assert name in alone.choices
    assert get_args(Fusion) == cli_query.FUSIONS


def test_help_imports_nothing_heavy(settings: Settings) -> None:
    out, report = cli(settings, "--help")
    assert report["code"] == 0 and "search" in out.stdout and "memory_search" in out.stdout
    assert report["heavy"] == []
    out, report = cli(settings, "search", "--help")
    assert report["code"] == 0 and "--fusion" in out.stdout
    assert report["heavy"] == []


def test_keyword_search_in_process_maps_no_vectors_and_loads_no_model(tmp_path: Path) -> None:
    local = build(tmp_path, provider="hash")
    data = json.loads(Path(local.source_file or "").read_text())
    data["agents"]["defaults"]["memorySearch"]["provider"] = "local"  # the model, were it needed
    Path(local.source_file or "").write_text(json.dumps(data))
    out, report = cli(local, "search", "E-404", "--fusion", "keyword", "--json")
    assert report["code"] == 0, out.stderr
    assert json.loads(out.stdout)["mode"] == "keyword-only"
    assert "onnxruntime" not in report["heavy"] and not report["vec_mapped"]


def test_search_and_get_go_to_a_running_server_then_fall_back(settings: Settings) -> None:
    server = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "serve", "--port", "0", "--config",
                               settings.source_file or "", "--state-dir", str(settings.state_dir)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    announced = settings.state_dir / locate.SERVER_FILE
    try:
        wait_until(announced.exists, timeout=60, what="serve.json")
        url = json.loads(announced.read_text())["url"]
        request = urllib.request.Request(f"{url}/v1/agents/main/memory_search", b'{"query": "E-404"}',
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            over_http = json.loads(response.read())
        # an environment this process cannot load settings from: only the server can answer
        broken = {"MEMORYD_PROVIDER": "no-such-provider"}
        out, report = cli(settings, "search", "E-404", "--json", env=broken)
        assert report["code"] == 0, out.stderr
        assert json.loads(out.stdout) == over_http
        assert report["heavy"] == [] and not report["vec_mapped"]
        assert report["light"] == []
        out, report = cli(settings, "get", "MEMORY.md", "--from", "1", "--lines", "1", env=broken)
        assert report["code"] == 0 and out.stdout == "# MEMORY.md — long-term memory\n"
        out, report = cli(settings, "get", "../outside.md", env=broken)  # the server's error, as an exit code
        assert report["code"] == app.EXIT_ERROR and "climbs out" in out.stderr
    finally:
        server.send_signal(signal.SIGTERM)  # as `memoryd up` or a service manager stops it
        server.wait(timeout=30)
    assert not announced.exists()  # withdrawn on exit
    out, report = cli(settings, "search", "E-404", "--json")  # no server: answered in-process
    assert report["code"] == 0 and json.loads(out.stdout) == over_http
    out, report = cli(settings, "search", "E-404", "--json", env={"MEMORYD_PROVIDER": "no-such-provider"})
    assert report["code"] == app.EXIT_CONFIG  # in-process, so the broken environment counts


def _announce(settings: Settings, port: int, pid: int | None = None) -> Path:
    """The address file a running server writes, naming ``port`` (and ``pid``, this process by default)."""
    announced = settings.state_dir / locate.SERVER_FILE
    announced.write_text(json.dumps({"url": f"http://127.0.0.1:{port}", "pid": pid or os.getpid(),
                                     "config": settings.source_file}))
    return announced


def test_a_stale_or_silent_address_file_is_ignored(settings: Settings) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for pid, port in ((int(dead.stdout), 9), (os.getpid(), 9)):  # a dead server; a live pid, nothing listening
        announced = _announce(settings, port, pid)
        out, report = cli(settings, "search", "E-404", "--json")
        assert report["code"] == 0 and json.loads(out.stdout)["results"], out.stderr
    announced.unlink()


def test_a_server_that_does_not_accept_is_given_up_after_the_connect_timeout(settings: Settings) -> None:
    """A listening socket whose backlog is full drops new connections: without remote.CONNECT_TIMEOUT
    the CLI would wait for the kernel's SYN retries (~2 minutes, past this test's 120 s)."""
    with socket.socket() as listener, socket.socket() as first:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        first.connect(listener.getsockname())  # fills the backlog; nothing is ever accepted
        announced = _announce(settings, listener.getsockname()[1])
        try:
            out, report = cli(settings, "search", "E-404", "--json")
        finally:
            announced.unlink()
    assert report["code"] == 0 and json.loads(out.stdout)["results"], out.stderr  # answered in-process


def test_a_server_that_accepts_and_never_answers_is_given_up_after_the_answer_timeout(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """remote.ANSWER_TIMEOUT (300 s: a first search loads an agent's index) ends the wait on a server
    that took the request and went silent; shortened here, the real socket times out."""
    monkeypatch.setattr(remote, "ANSWER_TIMEOUT", 0.5)
    accepted: list[socket.socket] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        holder = threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True)
        holder.start()
        announced = _announce(settings, listener.getsockname()[1])
        args = argparse.Namespace(config=settings.source_file, state_dir=str(settings.state_dir), agent="main")
        try:
            assert remote.ask(args, "memory_search", {"query": "E-404"}) is None  # → answered in-process
        finally:
            announced.unlink()
            holder.join(timeout=5)
            for conn in accepted:
                conn.close()
    assert accepted  # the server did take the request


@pytest.mark.parametrize("url", ["http://127.0.0.1:36129", "http://[::1]:8080", "http://localhost:1/ignored"])
def test_the_announced_address_is_read_as_urllib_reads_it(url: str) -> None:
    import urllib.parse

    from memoryd.services.cli.remote import _address

    parts = urllib.parse.urlsplit(url)
    assert _address(url) == (parts.hostname, parts.port)


@pytest.mark.parametrize("agent", ["main", "a b/c", "ünï-_.~x", "%41", "агент"])
def test_an_agent_id_is_quoted_as_urllib_quotes_it(agent: str) -> None:
    import urllib.parse

    from memoryd.services.cli.remote import _quote

    assert _quote(agent) == urllib.parse.quote(agent, safe="")
