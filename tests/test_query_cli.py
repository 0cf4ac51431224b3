"""``memoryd search`` / ``memoryd get``: JSON output, --explain, errors as exit codes, help on every command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from retrieval_set import build

from memoryd.services.cli import app as cli
from memoryd.shared.config.settings import Settings


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return build(tmp_path_factory.mktemp("cli"), provider="hash")


def run(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--config", settings.source_file, "--state-dir", str(settings.state_dir)])
    out, err = capsys.readouterr()
    return code, out, err


def test_search_json(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(settings, capsys, "search", "api/v2/users", "--agent", "main", "--max-results", "2",
                       "--min-score", "0.5", "--fusion", "rrf", "--source", "memory", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["fusion"] == "rrf" and 1 <= len(answer["results"]) <= 2
    assert all(r["source"] == "memory" and r["score"] >= 0.5 for r in answer["results"])
    assert "api/v2/users" in answer["results"][0]["snippet"]


def test_search_explain_shows_the_parts_of_each_score(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(settings, capsys, "search", "E-404", "--explain")
    assert code == 0
    assert "vector " in out and "text 1.000 (#1)" in out and "fused " in out
    code, out, _ = run(settings, capsys, "search", "E-404", "--explain", "--json")
    assert set(json.loads(out)["results"][0]["explain"]) == {"vector", "vectorRank", "text", "textRank", "bm25",
                                                             "fused"}


def test_get_json_and_plain(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(settings, capsys, "get", "MEMORY.md", "--agent", "main", "--from", "31", "--lines", "1",
                       "--json")
    assert code == 0
    assert json.loads(out)["text"].startswith("- E-404 means")
    code, out, _ = run(settings, capsys, "get", "MEMORY.md", "--from", "1", "--lines", "1")
    assert out == "# MEMORY.md — long-term memory\n"


def test_errors_become_exit_codes_with_the_reason(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(settings, capsys, "get", "../outside.md")
    assert code == cli.EXIT_ERROR and "climbs out" in err
    code, _, err = run(settings, capsys, "search", "x", "--agent", "nobody")
    assert code == cli.EXIT_ERROR and "unknown agent" in err


def test_a_deleted_index_is_answered_with_replay_when_the_log_is_there(workspace: Path, make_settings,
                                                                       redis_url: str) -> None:
    (workspace / "memory" / "2026-01-20.md").write_text("- shipped the E-404 fix\n")
    settings, config = make_settings(workspace, redis=redis_url)
    env = dict(os.environ, MEMORYD_CONFIG=str(config))

    def memoryd(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memoryd.services.cli", *argv], env=env, capture_output=True,
                              text=True, timeout=120)

    search = memoryd("search", "E-404 fix", "--json")
    assert search.returncode == 1 and "`memoryd index --agent main`" in search.stderr  # no index, no log yet
    assert "replay" not in search.stderr
    assert memoryd("index", "--agent", "main").returncode == 0
    settings.index_path("main").unlink()
    search = memoryd("search", "E-404 fix", "--json")
    assert search.returncode == cli.EXIT_ERROR and "`memoryd replay --agent main` rebuilds the index" in search.stderr
    assert memoryd("replay", "--agent", "main").returncode == 0
    assert json.loads(memoryd("search", "E-404 fix", "--json").stdout)["results"]


@pytest.mark.parametrize("command", ["search", "get", "serve", "mcp"])
def test_every_query_command_has_help(command: str) -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices[command].description or any(
        c.dest == command and c.help for c in sub._choices_actions)
    for action in sub.choices[command]._actions:
        assert action.help, f"memoryd {command} {action.option_strings or action.dest} has no help text"
