"""``memoryd session …`` as a real subprocess, plus help text on every subcommand."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.services.cli.app import build_parser
from tests.openai_stub import OpenAIStub
from tests.session_support import llm_extra

ROOT = Path(__file__).resolve().parents[1]
SUBCOMMANDS = ("append", "context", "compact", "new", "reset", "show")


def _memoryd(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memoryd.services.cli", *args, "--config", str(config)],
                          input=stdin, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ), timeout=60)


def _json(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_every_session_subcommand_has_help() -> None:
    parser = build_parser()
    session = next(a for a in parser._subparsers._group_actions  # type: ignore[union-attr]
                   if isinstance(a, argparse._SubParsersAction)).choices["session"]
    commands = next(a for a in session._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == set(SUBCOMMANDS)
    for name, sub in commands.choices.items():
        assert sub.description, name
        for action in sub._actions:
            assert action.help, f"session {name} {action.option_strings}"


def test_append_context_show_compact_and_new_through_the_cli(workspace: Path, make_settings,
                                                             redis_url: str) -> None:
    with OpenAIStub() as stub:
        extra = {**llm_extra(stub.base_url), "agents": {"defaults": {
            "memorySearch": {"provider": "hash"}, "compaction": {"keepRecentTokens": 8}}}}
        _, config = make_settings(workspace, redis=redis_url, extra=extra)
        s = ["session"]
        one = _json(_memoryd(config, *s, "append", "--session", "cli", "--role", "user", "--text",
                             "Always confirm before deleting mail.", "--json"))
        assert one["entry"]["content"] == "Always confirm before deleting mail." and one["tokens"] > 0
        lines = "\n".join(json.dumps(m) for m in [{"role": "assistant", "text": "Noted: I will ask first."},
                                                 {"role": "user", "content": "Now list the inbox please."}])
        many = _json(_memoryd(config, *s, "append", "--session", "cli", "--json", stdin=lines))
        assert len(many["results"]) == 2

        context = _json(_memoryd(config, *s, "context", "--session", "cli", "--json"))
        assert [m["role"] for m in context["messages"]] == ["user", "assistant", "user"]
        assert context["tokens"] == sum(r["entry"]["tokens"] for r in [one, *many["results"]])
        shown = _json(_memoryd(config, *s, "show", "--session", "cli", "--json"))
        assert (shown["compactionCount"], shown["memoryFlushCompactionCount"]) == (0, None)

        compacted = _json(_memoryd(config, *s, "compact", "--session", "cli", "--focus",
                                   "decisions and open questions", "--json"))
        assert compacted["compacted"] and compacted["manual"] and compacted["kept"] == 1
        [request] = stub.requests("/chat/completions")
        assert request["body"]["messages"][0]["content"].endswith("Focus: decisions and open questions")
        shown = _json(_memoryd(config, *s, "show", "--session", "cli", "--json"))
        assert shown["compactionCount"] == 1 and shown["liveMessages"] == 1
        entries = [json.loads(x) for x in (workspace / "sessions" / "cli.jsonl").read_text().splitlines()]
        assert entries[-1]["type"] == "compaction" and entries[-1]["focus"] == "decisions and open questions"

        ended = _json(_memoryd(config, *s, "new", "--session", "cli", "--json"))
        assert ended["reset"] and (workspace / ended["files"][0]).is_file()
        plain = _memoryd(config, *s, "show", "--session", "cli")
        assert "compaction count: 0" in plain.stdout and "resets: 1" in plain.stdout


@pytest.mark.parametrize(("args", "stdin", "message"), [
    (["--role", "robot", "--text", "x"], None, "invalid choice"),
    ([], '{"role": "user"}', "not a message"),
    (["--text", "x"], None, "--text needs --role"),
])
def test_bad_input_is_refused_with_a_message(workspace: Path, make_settings, redis_url: str, args: list[str],
                                             stdin: str | None, message: str) -> None:
    _, config = make_settings(workspace, redis=redis_url)
    result = _memoryd(config, "session", "append", "--session", "x", *args, stdin=stdin)
    assert result.returncode != 0 and message in result.stderr
    assert not (workspace / "sessions" / "x.jsonl").exists()
