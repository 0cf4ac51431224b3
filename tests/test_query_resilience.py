"""memory_search while the embedding provider hangs, over a real uvicorn server and the loopback stub.

A search waits for its query's embedding at most ``embedTimeoutMs`` and never under the
agent's lock, then answers from keywords with ``mode: keyword-only`` and a ``reason``;
another agent's searches go on with vectors meanwhile; once the breaker has opened, searches
do not wait at all; memory_get of a FIFO named ``x.md`` is refused at once, 45 at a time.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.http import create_app
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from tests.openai_stub import OpenAIStub
from tests.support import serving, wait_until

#: A search that waited for the hung provider would take at least its timeout; one that kept to
#: its budget (0.3 s) takes far less. The bound is liveness with room for a loaded machine.
PROVIDER_TIMEOUT = 10.0
ANSWERED_WITHOUT_WAITING = 5.0


def _settings(tmp_path: Path, stub: OpenAIStub, **slow: object) -> Settings:
    agents = []
    for agent in ("slow", "other"):
        ws = tmp_path / agent
        (ws / "memory").mkdir(parents=True)
        (ws / "memory" / "2026-05-01.md").write_text(
            f"# {agent}\n\nThe deploy window is Tuesday at 10:00.\n\nError E-409 means a double booking.\n")
        (ws / "MEMORY.md").write_text("Prefers short answers. The cat is called Miso.\n")
        agents.append({"id": agent, "workspace": str(ws)})
    remote = {"baseUrl": stub.base_url, "timeoutSeconds": PROVIDER_TIMEOUT, "cooldownSeconds": 60}
    agents[0]["memorySearch"] = {"provider": "openai-compatible", "model": "stub-embed",
                                 "remote": {**remote, **slow.pop("remote", {})},  # type: ignore[dict-item]
                                 "query": {"embedTimeoutMs": 300, **slow}}
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "hash"}}, "list": agents},
                                  "memoryd": {"stateDir": str(tmp_path / "state")}}))
    settings = load_settings(config)
    for agent in ("slow", "other"):
        index_now(settings, agent)
    return settings


def serve(settings: Settings) -> AbstractContextManager[str]:
    return serving(create_app(settings))


def _search(client: httpx.Client, agent: str, query: str, **extra: object) -> tuple[float, dict]:
    started = time.monotonic()
    r = client.post(f"/v1/agents/{agent}/memory_search", json={"query": query, **extra})
    assert r.status_code == 200, r.text
    return time.monotonic() - started, r.json()


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def test_searches_answer_from_keywords_within_the_budget_while_the_provider_hangs(
        tmp_path: Path, stub: OpenAIStub, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _settings(tmp_path, stub)
    with serve(settings) as base, httpx.Client(base_url=base, timeout=60) as client:
        _, warm = _search(client, "slow", "deploy window")
        assert warm["mode"] == "hybrid"
        stub.set(embeddings="hang")
        with ThreadPoolExecutor(max_workers=12) as pool:
            slow = [pool.submit(_search, client, "slow", f"deploy window {i}", minScore=0) for i in range(8)]
            other = [pool.submit(_search, client, "other", f"deploy window {i}") for i in range(4)]
            health = pool.submit(lambda: client.get("/healthz").status_code)
            answered = [f.result(timeout=60) for f in slow]
            unaffected = [f.result(timeout=60) for f in other]
            assert health.result(timeout=60) == 200
        for seconds, body in answered:
            assert seconds < ANSWERED_WITHOUT_WAITING
            assert body["mode"] == "keyword-only" and "embedTimeoutMs" in body["reason"]
            assert body["results"][0]["path"] == "memory/2026-05-01.md"  # the keyword side still finds it
        assert all(body["mode"] == "hybrid" for _, body in unaffected)  # another agent is not held up
        stub.set(embeddings="ok")
        with capsys.disabled():
            times = sorted(s for s, _ in answered)
            print(f"\nsearch while the provider hangs (budget 300 ms, 8 concurrent): "
                  f"p50 {times[len(times) // 2] * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms")


def test_once_the_hung_call_timed_out_searches_do_not_wait_and_vectors_return_after_the_cooldown(
        tmp_path: Path, stub: OpenAIStub) -> None:
    settings = _settings(tmp_path, stub, remote={"timeoutSeconds": 1, "cooldownSeconds": 1})
    service = QueryService(settings)
    try:
        stub.set(embeddings="hang")
        before = len(stub.requests("/embeddings"))
        first = service.search("slow", SearchRequest(query="the cat"))
        assert first.mode == "keyword-only" and "embedTimeoutMs" in (first.reason or "")
        wait_until(lambda: "not called until" in (service.search("slow", SearchRequest(query="cat?")).reason or ""),
                   timeout=30, what="the breaker to open after the hung call's timeout")
        assert len(stub.requests("/embeddings")) == before + 1  # one hung call, then none
        stub.set(embeddings="ok")
        wait_until(lambda: service.search("slow", SearchRequest(query="cat called")).mode == "hybrid",
                   timeout=30, interval=0.2, what="vectors once the cooldown passed and the probe answered")
    finally:
        service.close()


def test_the_agent_lock_is_free_while_a_search_waits_for_its_embedding(tmp_path: Path, stub: OpenAIStub) -> None:
    settings = _settings(tmp_path, stub, embedTimeoutMs=20_000)
    service = QueryService(settings)
    try:
        stub.set(embeddings="hang")
        waiting = ThreadPoolExecutor(max_workers=1)
        hybrid = waiting.submit(service.search, "slow", SearchRequest(query="double booking"))
        wait_until(lambda: len(stub.requests("/embeddings")) >= 1, timeout=30, what="the query's embedding call")
        keyword = service.search("slow", SearchRequest(query="double booking", fusion="keyword"))
        assert keyword.results and not hybrid.done()  # answered while the other search still waits
        stub.set(embeddings="ok")
        assert hybrid.result(timeout=60).mode == "hybrid"
        waiting.shutdown()
    finally:
        service.close()


def test_memory_get_of_a_fifo_is_refused_at_once_and_the_server_keeps_answering(
        tmp_path: Path, stub: OpenAIStub) -> None:
    settings = _settings(tmp_path, stub)
    os.mkfifo(tmp_path / "slow" / "memory" / "x.md")
    with (serve(settings) as base, httpx.Client(base_url=base, timeout=60) as client,
          ThreadPoolExecutor(max_workers=45) as pool):
        gets = [pool.submit(client.post, "/v1/agents/slow/memory_get", json={"path": "memory/x.md"})
                for _ in range(45)]
        assert client.get("/healthz").status_code == 200
        answers = [f.result(timeout=60) for f in gets]
        assert {a.status_code for a in answers} == {403}
        assert "FIFO" in answers[0].json()["error"]["message"]
        ok = client.post("/v1/agents/slow/memory_get", json={"path": "MEMORY.md"})
        assert ok.status_code == 200 and "Miso" in ok.json()["text"]
