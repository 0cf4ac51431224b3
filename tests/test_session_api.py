"""The HTTP routes through the Python client, over a real uvicorn server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.services.session.client import SessionApiError, SessionClient
from tests.openai_stub import OpenAIStub
from tests.session_support import llm_extra, logged, session_routes


@pytest.fixture
def served(workspace: Path, make_settings, redis_url: str) -> Iterator[tuple[SessionClient, OpenAIStub]]:
    with OpenAIStub() as stub:
        settings, _ = make_settings(workspace, redis=redis_url, extra=llm_extra(stub.base_url))
        with session_routes(settings) as url, SessionClient(url, agent="main") as client:
            yield client, stub


def test_append_show_context_compact_and_new_over_http(served: tuple[SessionClient, OpenAIStub],
                                                       workspace: Path, redis_url: str) -> None:
    client, stub = served
    first = client.append("api", "user", "Always confirm before deleting mail.")
    assert first["entry"]["role"] == "user" and first["tokens"] == first["entry"]["tokens"] > 0
    client.append("api", "assistant", "Running ls.", toolCalls=[{"id": "c1", "name": "exec", "arguments": "{}"}])
    client.append("api", "tool", "a.txt b.txt", name="exec", toolCallId="c1")
    context = client.context("api")
    assert [m["role"] for m in context["messages"]] == ["user", "assistant", "tool"]
    assert context["messages"][1]["tool_calls"][0]["function"]["name"] == "exec"
    assert context["messages"][2]["tool_call_id"] == "c1"
    assert context["tokens"] == client.show("api")["tokens"]
    shown = client.show("api")
    assert (shown["compactionCount"], shown["memoryFlushCompactionCount"], shown["messages"]) == (0, None, 3)

    assert client.compact("api", focus="decisions") == {"compacted": False}  # everything is recent

    ended = client.new("api")
    assert ended["reset"] and ended["files"][0].startswith("memory/")
    assert (workspace / ended["files"][0]).exists()
    assert client.show("api")["messages"] == 0
    assert "session.memory_saved" in logged(redis_url)


def test_errors_carry_the_code_and_status(served: tuple[SessionClient, OpenAIStub]) -> None:
    client, _ = served
    with SessionClient(str(client.http.base_url), agent="nobody") as stranger, \
            pytest.raises(SessionApiError) as unknown:
        stranger.append("s", "user", "hi")
    assert unknown.value.http_status == 404 and unknown.value.code == "unknown_agent"
    with pytest.raises(SessionApiError) as bad:
        client.append("s", "robot", "hi")
    assert bad.value.http_status == 422 and bad.value.code == "bad_request" and "role" in str(bad.value)
    with pytest.raises(SessionApiError) as bad_id:
        client.show("..hidden")
    assert bad_id.value.http_status == 400 and bad_id.value.code == "bad_request"
