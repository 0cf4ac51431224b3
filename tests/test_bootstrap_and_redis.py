"""A new workspace is created whole and versioned; a private Redis is found by other commands."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from support import silent_redis

from memoryd.shared.config.bootstrap import STANDARD_FILES, ensure_workspace
from memoryd.shared.exceptions import RedisUnavailable
from memoryd.shared.runtime.redis_server import answers, connect, redis_url, start_private_redis


def test_a_missing_workspace_is_created_with_the_standard_files_and_committed(make_settings, tmp_path: Path) -> None:
    ws = tmp_path / "clawd"
    settings, _ = make_settings(ws)
    assert ensure_workspace(settings.agent("main")) is True
    assert sorted(p.name for p in ws.iterdir() if p.name != ".git") == sorted([*STANDARD_FILES, "memory"])
    agents = (ws / "AGENTS.md").read_text()
    assert "memory_search" in agents and "memory/YYYY-MM-DD.md" in agents and "MEMORY.md" in agents
    log = subprocess.run(["git", "-C", str(ws), "log", "--oneline"], capture_output=True, text=True, check=True)
    assert "memoryd: new workspace" in log.stdout
    clean = subprocess.run(["git", "-C", str(ws), "status", "--porcelain"], capture_output=True, text=True)
    assert clean.stdout == ""


def test_an_empty_folder_gets_the_standard_files(make_settings, tmp_path: Path) -> None:
    """A container's bind mount of a workspace that did not exist: Docker made it, empty."""
    ws = tmp_path / "mounted"
    ws.mkdir()
    settings, _ = make_settings(ws)
    assert ensure_workspace(settings.agent("main")) is True
    assert sorted(p.name for p in ws.iterdir() if p.name != ".git") == sorted([*STANDARD_FILES, "memory"])


def test_a_folder_with_only_a_hidden_file_is_never_touched(make_settings, tmp_path: Path) -> None:
    ws = tmp_path / "dotted"
    ws.mkdir()
    (ws / ".keep").write_text("")
    settings, _ = make_settings(ws)
    assert ensure_workspace(settings.agent("main")) is False
    assert [p.name for p in ws.iterdir()] == [".keep"]


def test_an_existing_workspace_is_never_touched(make_settings, workspace: Path) -> None:
    (workspace / "MEMORY.md").write_text("mine\n")
    settings, _ = make_settings(workspace)
    assert ensure_workspace(settings.agent("main")) is False
    assert (workspace / "MEMORY.md").read_text() == "mine\n"
    assert not (workspace / "SOUL.md").exists()


@pytest.mark.integration
def test_the_private_redis_of_memoryd_up_is_found_by_other_commands(make_settings, workspace: Path) -> None:
    settings, _ = make_settings(workspace)  # no redisUrl configured
    private = start_private_redis(settings.state_dir)
    try:
        assert answers(private.url)
        assert redis_url(settings) == private.url
    finally:
        private.stop()
    assert redis_url(settings) == settings.memoryd.local_redis_url  # gone with it: the note is removed


def test_a_redis_that_accepts_and_never_answers_fails_the_connection_within_its_timeout() -> None:
    """A socket that takes connections and never replies (a paused or stopped Redis): memoryd's
    connections give up after their timeout and say where, never wait for good."""
    with silent_redis() as url:
        started = time.monotonic()
        with pytest.raises(RedisUnavailable, match="cannot reach Redis at redis://127.0.0.1"):
            connect(url, timeout=0.5)
        assert time.monotonic() - started < 5  # 0.5 s a try, redis-py's retries included
