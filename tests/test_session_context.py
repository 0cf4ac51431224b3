"""Context assembly and pruning: pure functions with an injected clock, plus the JSONL check."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from memoryd.services.session.context import BOOTSTRAP_MAX_CHARS, assemble, prune, read_bootstrap
from memoryd.services.session.service import NewMessage
from memoryd.services.session.transcript import Compaction, Message, segment
from memoryd.shared.config.settings import ContextPruningSettings
from tests.session_support import UTC, Clock, sessions

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BIG = "B" * 1000 + "m" * 8000 + "E" * 1000  # 10,000 chars: head B…, tail …E


def _m(role: str, content: str, tokens: int = 10, at: datetime = NOW) -> Message:
    return Message(ts=at.isoformat(), role=role, content=content, tokens=tokens)  # type: ignore[arg-type]


def _prune(messages: list[Message], ratio: float, **settings: object):
    cfg = ContextPruningSettings(**settings)  # type: ignore[arg-type]
    return prune(messages, session_tokens=int(ratio * 100_000), window=100_000, settings=cfg, now=NOW,
                 last_request_at=None)


def _turns() -> list[Message]:
    """An old big tool result, then three assistant turns each with a big result of its own."""
    out = [_m("user", "build it"), _m("assistant", "running"), _m("tool", BIG)]
    for i in range(3):
        out += [_m("assistant", f"step {i}"), _m("tool", BIG), _m("user", f"ok {i}")]
    return out


def test_bootstrap_files_are_capped_with_head_tail_and_a_marker(workspace: Path) -> None:
    (workspace / "AGENTS.md").write_text("HEAD-START " + "a" * 30_000 + " TAIL-END", encoding="utf-8")
    (workspace / "SOUL.md").write_text("small soul", encoding="utf-8")
    files = read_bootstrap(workspace, "chat")
    agents = files[0]
    assert agents.name == "AGENTS.md" and agents.truncated and agents.chars == 30_020
    assert len(agents.text) <= BOOTSTRAP_MAX_CHARS
    assert agents.text.startswith("HEAD-START") and agents.text.endswith("TAIL-END")
    assert "cut here; read the file for the full text" in agents.text
    assert files[1].text == "small soul" and not files[1].truncated


def test_memory_md_is_injected_only_in_the_main_session(workspace: Path) -> None:
    (workspace / "MEMORY.md").write_text("private: the owner's address", encoding="utf-8")
    (workspace / "USER.md").write_text("user", encoding="utf-8")
    assert [f.name for f in read_bootstrap(workspace, "main")] == ["USER.md", "MEMORY.md"]
    assert [f.name for f in read_bootstrap(workspace, "group-chat")] == ["USER.md"]


def test_context_is_summary_then_the_turns_after_it(workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace)
    old, kept, new = _m("user", "old", 5), _m("user", "kept", 7), _m("assistant", "new", 3)
    summary = Compaction(ts=NOW.isoformat(), summary="we chose REST", first_kept_id=kept.id, tokens=4,
                         tokens_before=15, tokens_after=14, compaction_count=1)
    (workspace / "TOOLS.md").write_text("tools", encoding="utf-8")
    ctx = assemble(segment([old, kept, summary, new]), read_bootstrap(workspace, "x"), settings.agent("main"), NOW)
    assert [m["content"] for m in ctx.messages] == [
        "## TOOLS.md\n\ntools", "Summary of the earlier conversation (compacted):\nwe chose REST", "kept", "new"]
    assert ctx.summary == "we chose REST"
    assert ctx.tokens == ctx.session_tokens > 7 + 3  # bootstrap + summary + the two turns


def test_below_soft_trim_ratio_nothing_is_pruned() -> None:
    result = _prune(_turns(), 0.29)
    assert not result.changed and all(m.content == BIG for m in result.messages if m.role == "tool")


def test_soft_trim_keeps_head_and_tail_of_old_big_results_only() -> None:
    turns = _turns()
    result = _prune(turns, 0.3)
    tools = [m for m in result.messages if m.role == "tool"]
    assert tools[0].content == BIG[:1500] + "..." + BIG[-1500:]
    assert [t.content for t in tools[1:]] == [BIG] * 3  # the last three assistant turns' results are kept
    assert (result.soft_trimmed, result.hard_cleared) == (1, 0)


def test_hard_clear_replaces_old_big_results_past_the_hard_ratio() -> None:
    result = _prune(_turns(), 0.5)
    tools = [m for m in result.messages if m.role == "tool"]
    assert tools[0].content == "[Old tool result content cleared]"
    assert [t.content for t in tools[1:]] == [BIG] * 3
    assert (result.soft_trimmed, result.hard_cleared) == (0, 1)


def test_small_tool_results_and_other_roles_are_never_pruned() -> None:
    turns = [_m("user", BIG), _m("assistant", "a"), _m("tool", "x" * 4000)] + [_m("assistant", "b")] * 3
    result = _prune(turns, 0.9)
    assert [m.content for m in result.messages] == [m.content for m in turns]


def test_keep_last_assistants_is_configurable() -> None:
    result = _prune(_turns(), 0.6, keep_last_assistants=1)
    assert [m.content == BIG for m in result.messages if m.role == "tool"] == [False, False, False, True]


def test_cache_ttl_mode_prunes_only_after_the_cache_has_expired() -> None:
    cfg = ContextPruningSettings(mode="cache-ttl", ttl=600)
    turns = _turns()

    def at(seconds_since_request: float):
        return prune(turns, session_tokens=60_000, window=100_000, settings=cfg, now=NOW,
                     last_request_at=NOW - timedelta(seconds=seconds_since_request))

    assert not at(599).changed and "still warm" in at(599).reason
    assert at(600).hard_cleared == 1


def test_mode_off_never_prunes() -> None:
    assert not _prune(_turns(), 0.99, mode="off").changed


def test_pruning_leaves_the_jsonl_byte_identical(workspace: Path, make_settings, redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url,
                                # below the compaction threshold: a context request past it compacts first
                                extra={"agents": {"defaults": {"contextWindow": 12_000,
                                                               "compaction": {"reserveTokensFloor": 0}}}})
    clock = Clock(NOW)
    s = sessions(settings, redis_url, clock)
    s.append("main", "tools", NewMessage(role="user", content="build it"))
    s.append("main", "tools", NewMessage(role="assistant", content="running"))
    s.append("main", "tools", NewMessage(role="tool", content=BIG + " " + "word " * 3000, name="exec"))
    for i in range(3):
        s.append("main", "tools", NewMessage(role="assistant", content=f"step {i}"))
    path = workspace / "sessions" / "tools.jsonl"
    before = path.read_bytes()
    ctx = s.context("main", "tools")
    assert ctx.pruning.hard_cleared == 1
    assert "[Old tool result content cleared]" in [m["content"] for m in ctx.messages]
    assert path.read_bytes() == before
    assert ctx.tokens < ctx.session_tokens
