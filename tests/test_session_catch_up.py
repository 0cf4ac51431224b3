"""Issue 22 item 15: the context an agent asks for never exceeds the window because the session
worker lags. Here no worker runs at all (the flush and compaction jobs wait in the queue, as on a
loaded machine): the context request does them itself, over real HTTP and the CLI, and says so
when its deadline (compaction.catchUpSeconds) passes before they finish."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.services.session.client import SessionClient
from tests.openai_stub import OpenAIStub
from tests.session_support import llm_extra, session_routes, words

pytestmark = pytest.mark.integration

WINDOW = {"contextWindow": 3000, "compaction": {"reserveTokensFloor": 1000, "keepRecentTokens": 100,
                                               "memoryFlush": {"softThresholdTokens": 500}}}


@pytest.fixture
def served(workspace: Path, make_settings, redis_url: str, request: pytest.FixtureRequest
           ) -> Iterator[tuple[SessionClient, OpenAIStub, Path]]:
    catch_up = getattr(request, "param", 30.0)
    with OpenAIStub() as stub:
        window = {**WINDOW, "compaction": {**WINDOW["compaction"], "catchUpSeconds": catch_up}}
        settings, config = make_settings(workspace, redis=redis_url,
                                         extra={**llm_extra(stub.base_url), "agents": {"defaults": window}})
        with session_routes(settings) as url, SessionClient(url, agent="main") as client:
            try:
                yield client, stub, config
            finally:
                stub.set(chat="ok", embeddings="ok")  # a hung chat request returns, its thread ends


def _past_the_window(client: SessionClient) -> None:
    client.append("s", "user", "Always confirm before deleting mail.")
    for turn in range(80):
        client.append("s", "assistant" if turn % 2 else "user", words(60, "work"))
    assert client.show("s")["tokens"] > 3000 and client.show("s")["compactionCount"] == 0  # nobody compacted


def test_a_lagging_compaction_is_done_before_the_context_is_answered(
        served: tuple[SessionClient, OpenAIStub, Path]) -> None:
    client, _, _ = served
    _past_the_window(client)
    context = client.context("s")
    assert context["tokens"] < 2000 and context["sessionTokens"] < 2000  # below the compaction threshold
    assert context["catchUp"]["compacted"] and not context["catchUp"]["deadlinePassed"]
    shown = client.show("s")
    assert shown["compactionCount"] == 1 and shown["memoryFlushCompactionCount"] == 0  # flushed, then compacted
    assert client.context("s")["catchUp"] is None  # nothing to catch up any more


@pytest.mark.parametrize("served", [1.0], indirect=True)
def test_past_its_deadline_the_context_says_the_compaction_is_still_pending(
        served: tuple[SessionClient, OpenAIStub, Path]) -> None:
    client, stub, config = served
    _past_the_window(client)
    stub.set(chat="hang", embeddings="hang")  # the LLM takes its time (the stub holds the request)
    context = client.context("s")
    assert context["catchUp"]["deadlinePassed"] and not context["catchUp"]["compacted"]
    assert context["catchUp"]["waitedSeconds"] < 10
    assert "did not finish within compaction.catchUpSeconds (1s)" in context["catchUp"]["message"]
    out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "session", "context",
                          "--agent", "main", "--session", "s", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["catchUp"]["deadlinePassed"]
    assert "did not finish within compaction.catchUpSeconds" in out.stderr
