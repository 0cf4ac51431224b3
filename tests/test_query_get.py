"""memory_get: exact lines, the read cap, and every refusal (each with a message that says why)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import GetRequest, dump
from memoryd.shared.exceptions import MemoryFileMissing, PathRefused, UnknownAgent


@pytest.fixture
def agents(tmp_path: Path, make_settings):
    """Two agents, main and work, each with its own workspace; main has a kb extraPath outside it."""
    main, work, kb = tmp_path / "clawd", tmp_path / "clawd-work", tmp_path / "kb"
    for ws in (main, work):
        (ws / "memory").mkdir(parents=True)
    kb.mkdir()
    (main / "MEMORY.md").write_text("".join(f"line {n}\n" for n in range(1, 11)), encoding="utf-8")
    (main / "memory" / "2026-01-20.md").write_text("# 2026-01-20\n## API\nREST over GraphQL\n", encoding="utf-8")
    (main / "memory" / "notes.txt").write_text("not markdown\n", encoding="utf-8")
    (main / "AGENTS.md").write_text("# identity, not memory\n", encoding="utf-8")
    (main / "memory" / ".drafts").mkdir()
    (main / "memory" / ".drafts" / "x.md").write_text("hidden\n", encoding="utf-8")
    (kb / "runbook.md").write_text("# Runbook\nstep one\nstep two\n", encoding="utf-8")
    (work / "MEMORY.md").write_text("work's secret plans\n", encoding="utf-8")
    (work / "memory" / "2026-02-01.md").write_text("work only\n", encoding="utf-8")
    settings, _ = make_settings(main, extra={"agents": {
        "defaults": {"memorySearch": {"provider": "hash", "extraPaths": [{"path": str(kb), "source": "kb"}],
                                      "query": {"maxReadLines": 4}}},
        "list": [{"id": "main", "workspace": str(main)}, {"id": "work", "workspace": str(work)}],
    }})
    return QueryService(settings), main, work


def get(service: QueryService, path: str, agent: str = "main", **kw: object):
    return service.get(agent, GetRequest(path=path, **kw))


def test_exactly_the_requested_lines(agents) -> None:
    service, _, _ = agents
    answer = get(service, "MEMORY.md", from_=3, lines=2)
    assert dump(answer) == {"path": "MEMORY.md", "text": "line 3\nline 4"}


def test_the_wire_names_from_and_lines(agents) -> None:
    service, _, _ = agents
    answer = service.get("main", GetRequest.model_validate({"path": "memory/2026-01-20.md", "from": 2, "lines": 1}))
    assert answer.text == "## API"


def test_a_read_past_the_end_is_empty_and_says_so(agents) -> None:
    service, _, _ = agents
    answer = get(service, "memory/2026-01-20.md", from_=9)
    assert answer.text == "" and "3 lines" in answer.note


def test_extra_path_files_are_readable_under_their_source_name(agents) -> None:
    service, _, _ = agents
    assert get(service, "kb/runbook.md", from_=2, lines=2).text == "step one\nstep two"


def test_a_long_read_is_capped_and_says_where_to_continue(agents) -> None:
    service, _, _ = agents
    answer = get(service, "MEMORY.md", from_=2)
    assert answer.text == "line 2\nline 3\nline 4\nline 5"
    assert answer.truncated is True and answer.next_from == 6 and "4 lines" in answer.note
    assert dump(get(service, "MEMORY.md", from_=7)) == {"path": "MEMORY.md", "text": "line 7\nline 8\nline 9\nline 10"}


@pytest.mark.parametrize("path, why", [
    ("../clawd-work/MEMORY.md", "'..'"),
    ("memory/../../clawd-work/MEMORY.md", "'..'"),
    ("memory/%2e%2e/%2e%2e/clawd-work/MEMORY.md", "encoded"),
    ("memory%2F2026-01-20.md", "encoded"),
    ("memory\\2026-01-20.md", "escaped"),
    ("~/clawd-work/MEMORY.md", "absolute"),
    ("memory/notes.txt", "not a Markdown"),
    ("AGENTS.md", "not a memory file"),
    ("memory/.drafts/x.md", "not a memory file"),
    ("secrets/keys.md", "not a memory file"),
    ("   ", "empty"),
])
def test_refusals_say_why(agents, path: str, why: str) -> None:
    service, _, _ = agents
    with pytest.raises(PathRefused, match=why):
        get(service, path)


def test_an_absolute_path_into_another_agents_workspace_is_refused(agents) -> None:
    service, _, work = agents
    with pytest.raises(PathRefused, match="absolute"):
        get(service, str(work / "MEMORY.md"))


def test_another_agents_file_is_not_reachable_by_its_relative_path(agents) -> None:
    """``memory/2026-02-01.md`` exists only in work's workspace: for main it does not exist."""
    service, _, _ = agents
    with pytest.raises(MemoryFileMissing):
        get(service, "memory/2026-02-01.md")
    assert get(service, "memory/2026-02-01.md", agent="work").text == "work only"


def test_a_symlinked_file_is_refused(agents) -> None:
    service, main, work = agents
    os.symlink(work / "MEMORY.md", main / "memory" / "link.md")
    with pytest.raises(PathRefused, match="symlink"):
        get(service, "memory/link.md")


def test_a_symlinked_memory_folder_is_refused(agents) -> None:
    service, main, work = agents
    (main / "memory" / "2026-01-20.md").unlink()
    (main / "memory" / "notes.txt").unlink()
    (main / "memory" / ".drafts" / "x.md").unlink()
    (main / "memory" / ".drafts").rmdir()
    (main / "memory").rmdir()
    os.symlink(work / "memory", main / "memory")
    with pytest.raises(PathRefused, match="symlink"):
        get(service, "memory/2026-02-01.md")


def test_a_missing_file_and_an_unknown_agent(agents) -> None:
    service, _, _ = agents
    with pytest.raises(MemoryFileMissing, match="does not exist"):
        get(service, "memory/2031-01-01.md")
    with pytest.raises(UnknownAgent):
        get(service, "MEMORY.md", agent="nobody")
