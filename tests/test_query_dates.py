"""The ``after`` / ``before`` date filters of memory_search at each edge: HTTP, MCP (official client) and CLI.

The retrieval fixture's daily notes run from 2026-01-12 to 2026-02-26; ``MEMORY.md`` and the
``kb`` files have no date, so a window leaves them out.
"""

from __future__ import annotations

import datetime as dt
import json

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from retrieval_set import build

from memoryd.services.cli import app as cli
from memoryd.services.query.dates import path_date
from memoryd.services.query.http import create_app
from memoryd.services.query.mcp import build_server
from memoryd.shared.config.settings import Settings

QUERY = "deploy release API decision"
AFTER, BEFORE = dt.date(2026, 1, 14), dt.date(2026, 1, 22)


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return build(tmp_path_factory.mktemp("dates"), provider="hash")


def assert_inside(paths: list[str]) -> None:
    assert paths, "the window holds notes that match: something must be found"
    for path in paths:
        day = path_date(path)
        assert day is not None and AFTER <= day <= BEFORE, path


def test_http(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        body = {"query": QUERY, "minScore": 0, "maxResults": 20}
        everything = client.post("/v1/agents/main/memory_search", json=body).json()["results"]
        assert any(path_date(r["path"]) is None for r in everything)
        window = client.post("/v1/agents/main/memory_search",
                             json={**body, "after": AFTER.isoformat(), "before": BEFORE.isoformat()})
        assert window.status_code == 200
        assert_inside([r["path"] for r in window.json()["results"]])
        bad = client.post("/v1/agents/main/memory_search", json={**body, "after": "2026-02-01", "before": "2026-01-01"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "bad_request"
        assert "swap them" in bad.json()["error"]["message"]


def test_mcp(settings: Settings) -> None:
    server = build_server(settings, "main")

    async def main() -> None:
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"after", "before"} <= set(tools["memory_search"].input_schema["properties"])
            found = await client.call_tool("memory_search", {"query": QUERY, "minScore": 0, "maxResults": 20,
                                                             "after": AFTER.isoformat(), "before": BEFORE.isoformat()})
            assert not found.is_error
            assert_inside([r["path"] for r in found.structured_content["results"]])
            bad = await client.call_tool("memory_search", {"query": QUERY, "after": "soon"})
            assert bad.is_error and "bad_request: after" in bad.content[0].text

    anyio.run(main)


def test_cli(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["search", QUERY, "--min-score", "0", "--max-results", "20", "--after", AFTER.isoformat(),
                     "--before", BEFORE.isoformat(), "--json", "--config", settings.source_file,
                     "--state-dir", str(settings.state_dir)])
    out, _ = capsys.readouterr()
    assert code == 0
    assert_inside([r["path"] for r in json.loads(out)["results"]])


@pytest.mark.parametrize("day,exit_code,message", [
    ("2026-13-01", 2, "'2026-13-01' is not a day: write it as YYYY-MM-DD"),  # refused while parsing arguments
    ("2026-02-30", 1, "bad search: after: Input should be a valid date"),  # refused by the request model
])
def test_cli_refuses_a_day_that_is_not_one(settings: Settings, capsys: pytest.CaptureFixture[str], day: str,
                                           exit_code: int, message: str) -> None:
    argv = ["search", QUERY, "--after", day, "--config", settings.source_file, "--state-dir", str(settings.state_dir)]
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own exit
        code = int(exc.code or 0)
    _, err = capsys.readouterr()
    assert code == exit_code
    assert message in err
