"""The heartbeat and promotion with real parts: a real Redis, the session queue's real RQ worker,
the local MiniLM model, the event log on disk, the CLI as a subprocess, git in the workspace."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date, datetime
from pathlib import Path

import pytest
import redis

from memoryd.services.session.heartbeat import Heartbeat
from memoryd.services.session.promote_api import IdentityRefused, accept_as_agent, listing
from memoryd.services.session.promotion import ProposalDecided, ledger_path, reject
from memoryd.shared.config.settings import Settings
from memoryd.shared.runtime.bus import Bus
from tests.openai_stub import OpenAIStub
from tests.session_support import FACT, RULE, drain, llm_extra, logged, write_day

ROOT = Path(__file__).resolve().parents[1]
TODAY = datetime(2026, 3, 3, 12, 0).astimezone()


def _day(workspace: Path, day: int, *lines: str) -> None:
    write_day(workspace, date(2026, 3, day), *lines)


def _setup(workspace: Path, make_settings, redis_url: str, **kw: object) -> tuple[Settings, Bus, Heartbeat]:
    (workspace / "HEARTBEAT.md").write_text("# Heartbeat\n\n- Look for what repeats in the daily logs.\n")
    settings, _ = make_settings(workspace, redis=redis_url, **kw)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    return settings, bus, Heartbeat(settings, bus, clock=lambda: TODAY)


def _git(workspace: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(workspace), *argv], check=True, capture_output=True,
                          text=True).stdout


def _cli(config: Path, *argv: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "memoryd.services.cli", *argv, "--config", str(config), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_fact_on_two_days_is_proposed_once_with_both_sources_by_the_scheduled_job(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, bus, beat = _setup(workspace, make_settings, redis_url)
    _day(workspace, 1, FACT[0], "- Lunch with the design team, talked about the new office plants.")
    _day(workspace, 2, "- Reviewed the quarterly roadmap draft with Priya and left comments.", FACT[1])
    assert beat.tick() == ["main"] and beat.tick() == []  # one job per agent and interval
    drain(settings, redis_url)
    [proposal] = listing(settings, bus, "main", "pending")
    assert proposal["target"] == "MEMORY.md"
    assert proposal["sources"] == ["memory/2026-03-01.md:3", "memory/2026-03-02.md:4"]
    assert "[待晋升]" in (workspace / "PROMOTIONS.md").read_text(encoding="utf-8")
    assert beat.run("main")["proposed"] == []  # proposed once
    assert logged(redis_url).count("promotion.proposed") == 1
    assert logged(redis_url).count("heartbeat.ran") == 2


def test_accept_appends_to_memory_md_and_commits_naming_the_sources(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, bus, beat = _setup(workspace, make_settings, redis_url)
    person = "# MEMORY.md\n\n- Prefers short answers (written by hand)\n"
    (workspace / "MEMORY.md").write_text(person, encoding="utf-8")
    _git(workspace, "init", "-q")
    _git(workspace, "add", "-A")
    _git(workspace, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    _day(workspace, 1, FACT[0])
    _day(workspace, 2, FACT[1])
    [made] = beat.run("main")["proposed"]
    config = workspace.parent / "memoryd.json"
    done = _cli(config, "promote", "accept", made["id"])
    memory = (workspace / "MEMORY.md").read_text(encoding="utf-8")
    assert memory.startswith(person) and done["status"] == "accepted"
    assert memory.splitlines()[done["line"] - 1].startswith(f"- {made['text']} (promoted ")
    message = _git(workspace, "log", "-1", "--format=%B")
    assert "memory/2026-03-01.md:3" in message and "memory/2026-03-02.md:3" in message
    assert done["commit"] == _git(workspace, "rev-parse", "HEAD").strip()
    assert _git(workspace, "status", "--porcelain", "MEMORY.md") == ""
    assert _cli(config, "promote", "list")["proposals"] == []
    assert beat.run("main")["proposed"] == []  # MEMORY.md holds it now
    with pytest.raises(ProposalDecided):
        reject(settings, bus, "main", made["id"])


def test_a_rejected_statement_never_comes_back_not_even_on_a_third_day(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, bus, beat = _setup(workspace, make_settings, redis_url)
    _day(workspace, 1, RULE[0])
    _day(workspace, 2, RULE[1])
    beat.clock = lambda: TODAY.replace(day=2)
    [made] = beat.run("main")["proposed"]
    reject(settings, bus, "main", made["id"], "not a rule of mine")
    _day(workspace, 3, RULE[2])
    beat.clock = lambda: TODAY
    assert beat.run("main")["proposed"] == []
    ledger_path(settings, "main").unlink()  # the ledger is folded again from the event log
    [again] = listing(settings, bus, "main", None)
    assert again["status"] == "rejected" and again["reason"] == "not a rule of mine"
    assert beat.run("main")["proposed"] == []


def test_three_days_propose_for_soul_md_and_nothing_is_written_there_before_accept(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, bus, beat = _setup(workspace, make_settings, redis_url)
    soul = "# SOUL.md\n\nBe precise.\n"
    (workspace / "SOUL.md").write_text(soul, encoding="utf-8")
    for day, line in enumerate(RULE, start=1):
        _day(workspace, day, line)
    [made] = beat.run("main")["proposed"]
    assert made["target"] == "SOUL.md" and len(made["sources"]) == 3
    assert (workspace / "SOUL.md").read_text(encoding="utf-8") == soul
    with pytest.raises(IdentityRefused):  # an agent (MCP, HTTP without the admin token) cannot accept it
        accept_as_agent(settings, bus, "main", made["id"], person=False)
    assert (workspace / "SOUL.md").read_text(encoding="utf-8") == soul
    done = accept_as_agent(settings, bus, "main", made["id"], person=True)
    text = (workspace / "SOUL.md").read_text(encoding="utf-8")
    assert text.startswith(soul) and made["text"] in text.splitlines()[done.line - 1]
    assert done.commit is None  # not a git repository: appended, not committed


NOISE = [
    "- HEARTBEAT_OK: nothing needs attention right now, all scheduled checks came back green",
    "- NO_REPLY",
    "```",
    "$ kubectl get pods --namespace billing-production --output wide --show-labels",
    "billing-api-7d9f   1/1   Running   0   3d   app=billing-api,tier=backend,team=alpha",
    "```",
    "- [tool result: exec] deployed billing-api to production in 42 seconds without errors",
    "- The staging database password: hunter2-very-secret-value for the billing service account",
    "- ok, sounds good to me",
    "## Notes from agent work",
    "- The work agent keeps the quarterly tax filing checklist in its own shared folder.",
]


def test_noise_secrets_and_other_agents_lines_are_never_proposed(
        workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> None:
    other = tmp_path / "work-ws"
    (other / "memory").mkdir(parents=True)
    agents = {"list": [{"id": "main", "workspace": str(workspace)}, {"id": "work", "workspace": str(other)}]}
    settings, bus, beat = _setup(workspace, make_settings, redis_url, extra={"agents": agents})
    (other / "HEARTBEAT.md").write_text("- check\n")
    for day in (1, 2, 3):
        _day(workspace, day, *NOISE, "- [work]: the tax checklist for the quarterly filing is in the shared folder")
        _day(other, day, FACT[day % 2])
    result = beat.run("main")
    assert result["ran"] and result["proposed"] == [] and result["lines"] == 0
    [theirs] = beat.run("work")["proposed"]
    assert all(s.startswith("memory/") for s in theirs["sources"])
    assert listing(settings, bus, "main", None) == []
    assert not (workspace / "PROMOTIONS.md").exists()


def test_an_empty_heartbeat_md_runs_nothing(workspace: Path, make_settings, redis_url: str) -> None:
    settings, bus, beat = _setup(workspace, make_settings, redis_url)
    (workspace / "HEARTBEAT.md").write_text("# HEARTBEAT.md\n\n<!-- nothing to check -->\n", encoding="utf-8")
    _day(workspace, 1, FACT[0])
    _day(workspace, 2, FACT[1])
    assert beat.tick() == []
    assert bus.queues["session"].count == 0
    assert beat.run("main") == {"agent": "main", "ran": False, "reason": "HEARTBEAT.md is empty or missing",
                                "proposed": []}
    (workspace / "HEARTBEAT.md").unlink()
    assert not beat.run("main")["ran"]
    assert "heartbeat.ran" not in logged(redis_url)
    assert not ledger_path(settings, "main").exists() and not (workspace / "PROMOTIONS.md").exists()


def test_the_llm_phrases_the_merged_note_and_a_secret_in_its_reply_is_redacted(
        workspace: Path, make_settings, redis_url: str) -> None:
    with OpenAIStub() as stub:
        stub.set(reply="Dana Reyes (team-alpha) is the billing service's on-call lead; token: abc123secret")
        _, _, beat = _setup(workspace, make_settings, redis_url, extra=llm_extra(stub.base_url))
        _day(workspace, 1, FACT[0])
        _day(workspace, 2, FACT[1])
        [made] = beat.run("main")["proposed"]
        [request] = stub.requests("chat/completions")
    assert made["text"] == "Dana Reyes (team-alpha) is the billing service's on-call lead; token: [redacted]"
    assert FACT[0][2:] in request["body"]["messages"][1]["content"]


def test_a_statement_accepted_for_memory_md_is_proposed_once_more_for_soul_md_on_its_third_day(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, bus, beat = _setup(workspace, make_settings, redis_url)
    _day(workspace, 1, RULE[0])
    _day(workspace, 2, RULE[1])
    beat.clock = lambda: TODAY.replace(day=2)
    [first] = beat.run("main")["proposed"]
    assert first["target"] == "MEMORY.md"
    accept_as_agent(settings, bus, "main", first["id"], person=False)  # MEMORY.md: the agent may
    _day(workspace, 3, RULE[2])
    beat.clock = lambda: TODAY
    [second] = beat.run("main")["proposed"]
    assert second["target"] == "SOUL.md" and len(second["sources"]) == 3
    assert beat.run("main")["proposed"] == []
    assert not (workspace / "SOUL.md").exists()
