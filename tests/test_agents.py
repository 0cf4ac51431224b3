"""Agents as data: ``memoryd agents add|list|remove|token``, the registry beside the config
file (and its 0.1 shape), refusals, and running services that follow it without a restart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import ExtraPath
from memoryd.shared.config.tokens import Tokens
from memoryd.shared.events import FileDeleted
from memoryd.shared.exceptions import ConfigError, UnknownAgent
from memoryd.shared.log.eventlog import log_dir
from memoryd.shared.rebuild.replay import as_of_index
from memoryd.shared.rebuild.sidebyside import swap_lock
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.roster import add_agent, register_agent, remove_agent
from memoryd.shared.runtime.worker import WorkerContext
from tests.agents_support import two_agents
from tests.pipeline_harness import Pipeline, wait_until

REPO = Path(__file__).resolve().parent.parent


def memoryd(config: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=check)


def test_add_list_token_remove(tmp_path: Path, redis_url: str) -> None:
    settings, config = two_agents(tmp_path, redis=redis_url)
    kb = tmp_path / "wiki"
    kb.mkdir()
    added = json.loads(memoryd(config, "agents", "add", "c", "--workspace", str(tmp_path / "c"),
                               "--extra-path", f"wiki={kb}", "--provider", "none", "--json").stdout)
    assert added["workspaceCreated"] and added["definedIn"] == "registry" and added["provider"] == "none"
    assert (tmp_path / "c" / ".gitignore").read_text().splitlines()[-1] == "sessions/"
    listed = {a["id"]: a for a in json.loads(memoryd(config, "agents", "list", "--json").stdout)["agents"]}
    assert sorted(listed) == ["a", "b", "c"] and listed["c"]["extraPaths"] == [{"path": str(kb), "source": "wiki"}]
    assert listed["a"]["definedIn"] == "config"

    issued = memoryd(config, "agents", "token", "c").stdout.strip().splitlines()[-1]
    assert Tokens(settings.state_dir).verify(issued) == "agent:c"
    (tmp_path / "c" / "memory" / "2026-01-02.md").write_text("c's note\n")
    settings = load_settings(config)
    index_now(settings, "c")
    conn = redis.Redis.from_url(redis_url)
    bus = Bus(conn, settings)
    bus.log([FileDeleted(agent="c", path="memory/gone.md", seq=bus.next_seq("c"))])
    assert settings.index_path("c").exists() and log_dir(settings, "c").is_dir()
    with swap_lock(settings, "c").held(exclusive=False):  # what the indexer leaves: the lock file
        pass
    snapshot = as_of_index(settings, "c", str(bus.next_seq("c")))  # what an asOf search leaves
    assert snapshot.exists() and swap_lock(settings, "c").path.exists()

    removed = json.loads(memoryd(config, "agents", "remove", "c", "--json").stdout)
    assert str(settings.index_path("c")) in removed["removed"] and removed["kept"] == str(tmp_path / "c")
    assert not settings.index_path("c").exists() and not log_dir(settings, "c").exists()
    assert not list(settings.index_path("c").parent.glob("c.*"))  # nor the files beside the index
    assert not snapshot.parent.exists()  # nor its as-of snapshots
    assert (tmp_path / "c" / "memory" / "2026-01-02.md").read_text() == "c's note\n"  # Markdown stays
    assert Tokens(settings.state_dir).verify(issued) is None
    assert not conn.exists(Bus(conn, settings).key("seq", "c"))
    assert "c" not in {a["id"] for a in json.loads(memoryd(config, "agents", "list", "--json").stdout)["agents"]}


@pytest.mark.parametrize("args, says", [
    (["a", "--workspace", "{tmp}/new"], "exists already"),
    (["c", "--workspace", "{tmp}/a/sub"], "overlapping workspaces"),
    (["c", "--workspace", "{tmp}"], "overlapping workspaces"),
    (["c", "--workspace", "{tmp}/new", "--extra-path", "{tmp}/b/memory"], "overlaps the workspace"),
    (["c", "--workspace", "{tmp}/new", "--extra-path", "kb={tmp}"], "overlaps the workspace"),
    (["../c", "--workspace", "{tmp}/new"], "not valid"),
    (["c/../../x", "--workspace", "{tmp}/new"], "not valid"),
    (["ｃ", "--workspace", "{tmp}/new"], "not valid"),
])
def test_add_refuses(tmp_path: Path, args: list[str], says: str) -> None:
    settings, config = two_agents(tmp_path)
    done = memoryd(config, "agents", "add", *[a.format(tmp=tmp_path) for a in args], check=False)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    registry = settings.state_dir / "agents.json"
    assert not registry.exists() or json.loads(registry.read_text())["agents"] == {}
    assert not (tmp_path / "new").exists()


def test_remove_refuses_an_agent_of_the_config_file(tmp_path: Path) -> None:
    settings, config = two_agents(tmp_path)
    done = memoryd(config, "agents", "remove", "a", check=False)
    assert done.returncode == 2 and "config file" in done.stderr
    with pytest.raises(UnknownAgent):
        remove_agent(settings, "nobody")


def test_the_old_registry_shape_is_read_and_rewritten(tmp_path: Path) -> None:
    settings, config = two_agents(tmp_path)
    (tmp_path / "old").mkdir()
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    (settings.state_dir / "agents.json").write_text(json.dumps({"old": str(tmp_path / "old")}))
    assert load_settings(config).agent("old").workspace == tmp_path / "old"
    memoryd(config, "agents", "add", "c", "--workspace", str(tmp_path / "c"))
    data = json.loads((settings.state_dir / "agents.json").read_text())
    assert data["version"] == 2 and set(data["agents"]) == {"old", "c"}
    assert data["agents"]["old"] == {"workspace": str(tmp_path / "old")}


def test_memoryd_index_keeps_an_agents_other_registered_fields(tmp_path: Path) -> None:
    settings, _ = two_agents(tmp_path)
    kb = tmp_path / "kb"
    kb.mkdir()
    settings = add_agent(settings, "c", tmp_path / "c", [ExtraPath(path=str(kb), source="kb")], provider="none")
    (tmp_path / "c2").mkdir()
    register_agent(settings, "c", tmp_path / "c2")  # `memoryd index --agent c --workspace c2`
    moved = load_settings(settings.source_file).agent("c")
    assert moved.workspace == tmp_path / "c2" and [e.path for e in moved.extra_paths] == [str(kb)]
    assert moved.memory_search.provider == "none"
    with pytest.raises(ConfigError, match="overlapping"):
        register_agent(settings, "c", tmp_path / "a")


def test_the_query_service_and_workers_follow_the_registry(tmp_path: Path) -> None:
    settings, _ = two_agents(tmp_path)
    service = QueryService(settings)
    worker = WorkerContext(settings=settings)
    with pytest.raises(UnknownAgent):
        service.search("c", SearchRequest(query="x"))
    add_agent(settings, "c", tmp_path / "c", [])
    (tmp_path / "c" / "memory").mkdir(parents=True)
    (tmp_path / "c" / "MEMORY.md").write_text("c keeps the ferry timetable\n")
    index_now(load_settings(settings.source_file), "c")
    assert service.search("c", SearchRequest(query="ferry timetable")).results[0].path == "MEMORY.md"
    worker.ensure_agent("c")
    assert worker.settings.agent("c").workspace == tmp_path / "c"
    remove_agent(service.settings, "c")
    with pytest.raises(UnknownAgent):
        service.search("c", SearchRequest(query="ferry"))
    with pytest.raises(UnknownAgent):
        worker.ensure_agent("c")


def test_running_services_pick_up_an_added_agent(tmp_path: Path, redis_url: str) -> None:
    settings, config = two_agents(tmp_path, redis=redis_url)
    p = Pipeline(config, redis_url, settings, tmp_path)
    service = QueryService(settings)  # started before the agent exists, like `memoryd serve`
    try:
        p.start()
        wait_until(lambda: p.conn.hget(p.bus.key("reconciled"), "a"), timeout=60, what="the first reconcile")
        memoryd(config, "agents", "add", "late", "--workspace", str(tmp_path / "late"))
        (tmp_path / "late" / "memory" / "2026-02-02.md").write_text("late joiner: the heron project starts\n")

        def found() -> list[str]:
            try:
                return [r.path for r in service.search("late", SearchRequest(query="heron project")).results]
            except Exception:  # noqa: BLE001 - the index may not exist yet; the wait names the last value
                return []

        assert wait_until(found, timeout=60, what="the new agent's file searchable") == ["memory/2026-02-02.md"]
    finally:
        p.stop()
        service.close()
