"""What a person reads: status as tables with the config and Redis named, search snippets cut
with "…" and counted in words, `up` and `serve` saying where they listen and that they are
ready, one config for every command while `up` runs, /docs offline, clear refusals."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from fastapi.testclient import TestClient

from memoryd.services.cli.query import format_search
from memoryd.services.query.http import create_app
from memoryd.services.query.models import SearchResponse, SearchResult
from memoryd.services.session.api import build_router
from tests.support import free_port, wait_until

CLI = [sys.executable, "-m", "memoryd.services.cli"]


def _run(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env or dict(os.environ), capture_output=True, text=True, timeout=120,
                          check=check)


def _result(snippet: str, start: int, end: int) -> SearchResult:
    return SearchResult(path="memory/2026-01-20.md", start_line=start, end_line=end, score=0.9, snippet=snippet,
                        source="memory")


def test_search_output_counts_in_words_and_cuts_snippets_after_the_matching_line() -> None:
    long = "\n".join(f"line {i}" + (" the E-404 outage" if i == 12 else "") for i in range(1, 21))
    answer = SearchResponse(results=[_result(long, 1, 20)], provider="hash", model="m", mode="hybrid", fusion="rrf")
    text = format_search(answer, "E-404 outage")
    assert text.startswith("1 result · hybrid")
    shown = [line.strip() for line in text.splitlines()[2:]]
    assert shown == [*(f"line {i}" for i in range(1, 12)), "line 12 the E-404 outage", "…"]

    short = SearchResponse(results=[_result("a\nb", 4, 5), _result("c\nd", 7, 12)], provider="hash", model="m",
                           mode="hybrid", fusion="rrf")
    lines = [line.strip() for line in format_search(short, "zzz").splitlines()]
    assert lines[0].startswith("2 results")
    assert lines[2:4] == ["a", "b"] and lines[4].startswith("0.900")  # whole, nothing cut
    assert lines[5:] == ["c", "d", "…"]  # the snippet holds less than its chunk's lines
    none = SearchResponse(results=[], provider="hash", model="m", mode="hybrid", fusion="rrf")
    assert format_search(none).startswith("0 results")


def test_status_names_its_config_and_redis_and_draws_a_table_per_agent(
        workspace: Path, make_settings, redis_url: str) -> None:
    (workspace / "memory" / "2026-01-20.md").write_text("- shipped the E-404 fix\n")
    _, config = make_settings(workspace, redis=redis_url)
    env = dict(os.environ, MEMORYD_CONFIG=str(config))
    _run("index", "--agent", "main", "--json", env=env)
    shown = _run("status", env=env).stdout
    assert f"config  {config}  (--config or $MEMORYD_CONFIG)" in shown
    assert f"redis   {redis_url}  (configured" in shown
    assert "agent main  workspace" in shown and "index   1 file, 1 chunk;" in shown
    assert re.search(r"stage\s+pending\s+running\s+retrying\s+failed", shown)
    assert re.search(r"^\s+embed\s+0\s+0\s+0\s+0\s*$", shown, re.M)
    assert "{" not in shown  # no raw JSON for a person
    data = json.loads(_run("status", "--json", env=env).stdout)
    assert data["config"]["file"] == str(config) and data["redis"]["url"] == redis_url

    shutil.rmtree(workspace)  # the workspace is gone: status and search say so
    assert "MISSING" in _run("status", env=env).stdout
    answer = json.loads(_run("search", "E-404 fix", "--json", env=env).stdout)
    assert answer["results"] and "does not exist" in answer["warning"]
    assert "WARNING: agent main's workspace" in _run("search", "E-404 fix", env=env).stdout


def test_up_prints_where_it_listens_and_other_commands_use_its_config(
        workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    _, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"server": {"port": port}},
                                                              "agents": {"defaults": {"contextWindow": 50_000}}})
    env = dict(os.environ)
    up = subprocess.Popen([*CLI, "up", "--config", str(config)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(iter(up.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: any("memoryd: ready" in line for line in said), timeout=120, what="up's ready line")
        text = "".join(said)
        assert f"memoryd: config {config}" in text and f"Redis {redis_url}" in text
        assert f"HTTP API at http://127.0.0.1:{port} (docs at http://127.0.0.1:{port}/docs)" in text
        status = json.loads(_run("status", "--json", env=env).stdout)  # no --config, no $MEMORYD_CONFIG
        assert status["config"] == {"file": str(config.resolve()), "why": "the config of the running memoryd up"}

        # up's query service has the port (a second server must be asked for: --another)
        busy = _run("serve", "--another", "--config", str(config), env=env, check=False)
        assert busy.returncode == 1 and f"cannot listen on 127.0.0.1:{port}: Address already in use" in busy.stderr
        assert "Traceback" not in busy.stderr and "Errno" not in busy.stderr
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=60)
    assert not (tmp_path / "state" / "redis" / "config").exists()  # up removed its note


def test_up_refuses_a_busy_port_before_starting_anything(workspace: Path, make_settings, redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"server": {"port": port}}})
        out = _run("up", "--config", str(config), check=False)
    assert out.returncode == 1 and f"port {port} on 127.0.0.1 is in use" in out.stderr and "--no-http" in out.stderr


def test_docs_are_served_offline_and_the_schema_documents_the_real_error_body(make_settings, workspace: Path) -> None:
    settings, _ = make_settings(workspace)
    client = TestClient(create_app(settings, routers=[build_router(settings)]))
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assets = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert assets and all(a.startswith("/") for a in assets), assets  # nothing from a CDN
        assert "https://" not in html and "http://" not in html
        for asset in assets:
            assert client.get(asset).status_code == 200, asset
    schema = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in json.dumps(schema)
    responses = schema["paths"]["/v1/agents/{agent}/memory_search"]["post"]["responses"]
    for code in ("400", "403", "404", "422", "502", "503"):
        ref = responses[code]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorBody"), (code, ref)
    detail = schema["components"]["schemas"]["ErrorDetail"]["properties"]
    assert set(detail) == {"code", "message"}


def test_manual_compaction_with_nothing_to_compact_says_why(workspace: Path, make_settings, redis_url: str) -> None:
    _, config = make_settings(workspace, redis=redis_url)
    env = dict(os.environ, MEMORYD_CONFIG=str(config))
    _run("session", "append", "--session", "s1", "--role", "user", "--text", "hello there", env=env)
    out = _run("session", "compact", "--session", "s1", env=env).stdout
    assert out.startswith("nothing to compact: the session's ") and "compaction.keepRecentTokens = 20000" in out


def test_help_of_every_top_level_command_has_a_description_and_no_python_metavar() -> None:
    for command in ("index", "status", "search", "serve", "up", "redis"):
        text = _run(command, "--help").stdout
        body = text.split("\n\n", 2)[1]
        assert body and not body.startswith(("options:", "positional")), (command, text[:300])
    assert "FROM_" not in _run("get", "--help").stdout


def _field_names(value: object, under: str = "") -> set[str]:
    """Every field name in a JSON value; the keys of the ``agents`` map are agent ids, not field names."""
    if isinstance(value, list):
        return set().union(*(_field_names(v, under) for v in value))
    if not isinstance(value, dict):
        return set()
    names = set() if under == "agents" else set(value)
    return names.union(*(_field_names(v, k) for k, v in value.items()))


def test_results_read_as_text_and_successful_commands_log_nothing(workspace: Path, make_settings, redis_url: str,
                                                                   tmp_path: Path) -> None:
    (workspace / "memory" / "2026-01-20.md").write_text("- shipped the E-404 fix\n")
    _, config = make_settings(workspace, redis=redis_url)
    env = dict(os.environ, MEMORYD_CONFIG=str(config))
    _run("index", "--agent", "main", env=env)
    _run("session", "append", "--session", "s1", "--role", "user", "--text", "hello there", env=env)
    outputs = {
        "agents add": _run("agents", "add", "work", "--workspace", str(tmp_path / "ws-work"), env=env),
        "replay": _run("replay", "--agent", "main", env=env),
        "log stats": _run("log", "stats", "--agent", "main", env=env),
        "session show": _run("session", "show", "--session", "s1", env=env),
        "agents remove": _run("agents", "remove", "work", env=env),
    }
    for command, done in outputs.items():
        assert done.stderr == "", (command, done.stderr)  # no "WARNING … created workspace", "… swapped in"
        assert not re.search(r"\b(True|False|None)\b|\{'|\[\]", done.stdout), (command, done.stdout)
    assert "workspace created: yes" in outputs["agents add"].stdout
    assert "swapped: yes" in outputs["replay"].stdout and "until" not in outputs["replay"].stdout
    assert "memory flush compaction count" not in outputs["session show"].stdout  # None: left out
    assert re.search(r"^events by type: chunks\.embedded \d+, file\.changed \d+", outputs["log stats"].stdout, re.M)


def test_json_output_is_pure_json_with_camel_case_field_names(workspace: Path, make_settings, redis_url: str,
                                                               tmp_path: Path) -> None:
    (workspace / "memory" / "2026-01-20.md").write_text("- shipped the E-404 fix\n")
    _, config = make_settings(workspace, redis=redis_url)
    env = dict(os.environ, MEMORYD_CONFIG=str(config))
    commands = [("index", "--agent", "main"), ("agents", "add", "work_bot", "--workspace", str(tmp_path / "ws-bot")),
                ("replay", "--agent", "main"), ("log", "stats", "--agent", "main"),
                ("log", "diff", "--agent", "main", "--since", "0"), ("status",), ("status", "--failed"),
                ("doctor", "--agent", "main"), ("retry",), ("agents", "list"),
                ("session", "append", "--session", "s1", "--role", "user", "--text", "hi"),
                ("search", "E-404 fix"), ("agents", "remove", "work_bot")]
    for argv in commands:
        done = _run(*argv, "--json", env=env, check=False)
        assert done.returncode in (0, 1) and done.stderr == "", (argv, done.stderr)  # doctor: 1 without a provider
        names = _field_names(json.loads(done.stdout))  # the whole of stdout is one JSON object
        assert not {n for n in names if "_" in n}, (argv, names)
    status = json.loads(_run("status", "--json", env=env).stdout)
    index = status["agents"]["main"]["index"]
    assert {"stateDir", "indexRuns"} <= set(status) and {"files", "filesSkipped", "chunksWithoutVectors"} <= set(index)
