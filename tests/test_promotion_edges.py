"""Promotion at the edges: the HTTP routes with bearer tokens, the agent's MCP tool through the
official client (a real ``memoryd mcp`` process), and the scheduler of a real ``memoryd worker
session`` process running a heartbeat on its own."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import anyio
import redis
from fastapi.testclient import TestClient
from mcp import Client, StdioServerParameters

from memoryd.services.query.http import create_app
from memoryd.services.session import promote_api
from memoryd.services.session.heartbeat import Heartbeat
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.tokens import ADMIN, Tokens, agent_principal
from memoryd.shared.runtime.bus import Bus
from tests.session_support import FACT, RULE, write_day
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[1]
TODAY = datetime(2026, 3, 3, 12, 0).astimezone()


def _proposals(workspace: Path, make_settings, redis_url: str) -> tuple[Settings, Path, dict[str, str]]:
    """A MEMORY.md proposal (the fact, 2 days) and a SOUL.md one (the rule, 3 days); → their ids by target."""
    (workspace / "HEARTBEAT.md").write_text("- look for what repeats\n", encoding="utf-8")
    for n, rule in enumerate(RULE):
        write_day(workspace, (TODAY - timedelta(days=2 - n)).date(), rule, *FACT[n:n + 1])
    settings, config = make_settings(workspace, redis=redis_url)
    made = Heartbeat(settings, Bus(redis.Redis.from_url(redis_url), settings), clock=lambda: TODAY).run("main")
    ids = {p["target"]: p["id"] for p in made["proposed"]}
    assert set(ids) == {"MEMORY.md", "SOUL.md"}
    return settings, config, ids


def test_http_routes_list_accept_reject_and_only_the_admin_token_accepts_for_soul_md(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, _, ids = _proposals(workspace, make_settings, redis_url)
    tokens = Tokens(settings.state_dir)
    agent = {"Authorization": f"Bearer {tokens.issue(agent_principal('main'))}"}
    admin = {"Authorization": f"Bearer {tokens.issue(ADMIN)}"}
    soul = (workspace / "SOUL.md").exists() and (workspace / "SOUL.md").read_bytes()
    app = create_app(settings, routers=[promote_api.build_router(settings)], require_token=True)
    with TestClient(app) as c:
        assert c.get("/v1/agents/main/promotions").status_code == 401
        listed = c.get("/v1/agents/main/promotions", params={"status": "pending"}, headers=agent).json()
        assert {p["id"] for p in listed["proposals"]} == set(ids.values())
        r = c.post(f"/v1/agents/main/promotions/{ids['SOUL.md']}/accept", headers=agent)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert ((workspace / "SOUL.md").exists() and (workspace / "SOUL.md").read_bytes()) == soul
        r = c.post(f"/v1/agents/main/promotions/{ids['SOUL.md']}/accept", headers=admin)
        assert r.status_code == 200 and r.json()["status"] == "accepted"
        assert r.json()["line"] and "support inbox" in (workspace / "SOUL.md").read_text(encoding="utf-8")
        r = c.post(f"/v1/agents/main/promotions/{ids['MEMORY.md']}/reject", json={"reason": "known"}, headers=agent)
        assert r.status_code == 200 and r.json()["reason"] == "known"
        r = c.post(f"/v1/agents/main/promotions/{ids['MEMORY.md']}/accept", headers=admin)
        assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"
        r = c.post("/v1/agents/main/promotions/nope/reject", headers=agent)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        beat = c.post("/v1/agents/main/heartbeat", headers=agent).json()
        assert beat["ran"] and beat["proposed"] == []  # the clock is today's: those days are past


def test_the_agents_mcp_tool_accepts_for_memory_md_and_refuses_soul_md(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, config, ids = _proposals(workspace, make_settings, redis_url)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memoryd.services.cli", "mcp", "--agent", "main", "--config", str(config)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            listed = await client.call_tool("memory_promotions", {})
            assert {p["id"] for p in listed.structured_content["proposals"]} == set(ids.values())
            refused = await client.call_tool("memory_promotions", {"action": "accept", "id": ids["SOUL.md"]})
            assert refused.is_error and refused.content[0].text.startswith("forbidden: ")
            done = await client.call_tool("memory_promotions", {"action": "accept", "id": ids["MEMORY.md"]})
            assert not done.is_error and done.structured_content["target"] == "MEMORY.md"
            missing = await client.call_tool("memory_promotions", {"action": "reject"})
            assert missing.is_error and missing.content[0].text.startswith("bad_request: ")

    anyio.run(main)
    assert "team-alpha" in (workspace / "MEMORY.md").read_text(encoding="utf-8")
    assert not (workspace / "SOUL.md").exists()


def test_the_session_worker_process_runs_the_heartbeat_on_its_own(
        workspace: Path, make_settings, redis_url: str) -> None:
    (workspace / "HEARTBEAT.md").write_text("- look for what repeats\n", encoding="utf-8")
    today = datetime.now().astimezone().date()
    write_day(workspace, today - timedelta(days=1), FACT[0])
    write_day(workspace, today, FACT[1])
    _, config = make_settings(workspace, redis=redis_url)
    worker = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "worker", "session", "--config",
                               str(config)], cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    review = workspace / "PROMOTIONS.md"
    try:
        wait_until(lambda: review.exists() and "[待晋升]" in review.read_text(encoding="utf-8"), timeout=90,
                   interval=0.2, what="the worker's first heartbeat proposing the fact")
    finally:
        worker.terminate()
        output = worker.communicate(timeout=30)[0].decode(errors="replace")
    assert "Traceback" not in output, output
    assert f"memory/{today - timedelta(days=1)}.md:3" in review.read_text(encoding="utf-8")
