"""The MCP server, driven by the official ``mcp`` client: over stdio (a subprocess) and streamable HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from retrieval_set import build

from memoryd.services.query.mcp import MEMORY_GET_DESCRIPTION, MEMORY_SEARCH_DESCRIPTION
from memoryd.shared.config.settings import Settings
from tests.support import free_port, port_open, wait_until

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return build(tmp_path_factory.mktemp("mcp"), provider="hash")


def server_env(settings: Settings) -> dict[str, str]:
    return {**os.environ, "MEMORYD_STATE_DIR": str(settings.state_dir), "PYTHONPATH": str(REPO)}


async def round_trip(client: Client, workspace: Path) -> None:
    """What an agent does: list the tools, search, read the lines, get refused."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"memory_search", "memory_get", "memory_promotions"}
    assert tools["memory_search"].description == MEMORY_SEARCH_DESCRIPTION
    assert tools["memory_get"].description == MEMORY_GET_DESCRIPTION
    assert {"query", "maxResults", "minScore"} <= set(tools["memory_search"].input_schema["properties"])
    assert {"path", "from", "lines"} <= set(tools["memory_get"].input_schema["properties"])

    found = await client.call_tool("memory_search", {"query": "E-404", "maxResults": 3})
    assert not found.is_error
    answer = found.structured_content
    assert answer == json.loads(found.content[0].text)
    assert answer["mode"] == "hybrid" and 1 <= len(answer["results"]) <= 3
    top = answer["results"][0]
    assert "E-404" in top["snippet"]
    kb = await client.call_tool("memory_search", {"query": "E-503 calendar sync down", "source": "kb", "minScore": 0})
    assert {r["source"] for r in kb.structured_content["results"]} == {"kb"}

    read = await client.call_tool("memory_get", {"path": top["path"], "from": top["startLine"], "lines": 2})
    assert not read.is_error
    lines = (workspace / top["path"]).read_text(encoding="utf-8").split("\n")
    assert read.structured_content["text"] == "\n".join(lines[top["startLine"] - 1:top["startLine"] + 1])

    refused = await client.call_tool("memory_get", {"path": "../../etc/passwd.md"})
    assert refused.is_error and refused.content[0].text.startswith("path_refused: ")
    invalid = await client.call_tool("memory_search", {"query": "E-404", "maxResults": 1000})
    text = invalid.content[0].text
    assert invalid.is_error and text.startswith("bad_request: maxResults: "), text
    assert "pydantic" not in text and "http" not in text  # no raw pydantic text, no link
    for tool, arguments in (("memory_search", {"query": "E-404", "bogus": 1}),
                            ("memory_get", {"path": top["path"], "bogus": 1})):
        unknown = await client.call_tool(tool, arguments)  # HTTP answers 422; so does MCP, naming the field
        text = unknown.content[0].text
        assert unknown.is_error and text.startswith(f"bad_request: bogus: not an argument of {tool} (it takes "), text


def test_stdio_round_trip(settings: Settings) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd.services.cli", "mcp", "--agent", "main", "--config", settings.source_file],
        env=server_env(settings), cwd=str(REPO),
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            await round_trip(client, settings.agent("main").workspace)

    anyio.run(main)


def test_streamable_http_round_trip(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "mcp-http.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "memoryd.services.cli", "mcp", "--agent", "main", "--http", "--port", str(port),
         "--config", settings.source_file],
        env=server_env(settings), cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        def ready() -> bool:
            assert server.poll() is None, (tmp_path / "mcp-http.log").read_text()
            return "; ready" in (tmp_path / "mcp-http.log").read_text()

        wait_until(ready, timeout=30, what="the MCP HTTP server saying it is ready")
        said = (tmp_path / "mcp-http.log").read_text()
        assert f"MCP (streamable HTTP) for agent main at http://127.0.0.1:{port}/mcp; ready" in said
        assert port_open(port)

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=60) as client:
                await round_trip(client, settings.agent("main").workspace)

        anyio.run(main)
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def test_an_unknown_agent_fails_before_serving(settings: Settings) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", "mcp", "--agent", "nobody", "--config", settings.source_file],
        env=server_env(settings), cwd=str(REPO), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0 and "unknown agent 'nobody'" in done.stderr


def test_stdin_that_is_not_json_rpc_is_answered_named_and_fails_the_exit(settings: Settings) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", "mcp", "--agent", "main", "--config", settings.source_file],
        env=server_env(settings), cwd=str(REPO), capture_output=True, text=True, timeout=60,
        input='garbage here\n{"not": "json-rpc"}\n',
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["id"], r["error"]["code"]) for r in replies] == [(None, -32700), (None, -32600)], done.stdout
    assert "line 1 of stdin is not JSON" in replies[0]["error"]["message"]
    assert "line 1 of stdin is not JSON" in done.stderr and "line 2 of stdin is JSON, but not a JSON-RPC" in done.stderr
    assert done.returncode == 1 and "2 of its 2 lines were not JSON-RPC messages" in done.stderr
