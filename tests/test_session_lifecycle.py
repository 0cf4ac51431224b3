"""Daily and idle resets with an injected clock, /new, and the session-memory hook."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.services.session.policy import due_reset
from memoryd.services.session.service import NewMessage, Sessions
from memoryd.services.session.transcript import Message, segment
from memoryd.shared.config.settings import SessionResetSettings
from tests.openai_stub import OpenAIStub
from tests.session_support import UTC, Clock, drain, llm_extra, logged, sessions


def _at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def _due(last: datetime, now: datetime, **cfg: object) -> str | None:
    seg = segment([Message(ts=last.isoformat(), role="user", content="hi", tokens=1)])
    return due_reset(seg, SessionResetSettings(**cfg), now)  # type: ignore[arg-type]


def _reset_config(mode: str, idle_minutes: int = 60) -> dict:
    return {"agents": {"defaults": {"session": {"mode": mode, "atHour": 4, "idleMinutes": idle_minutes}}}}


def _say(s: Sessions, text: str, session: str = "chat", role: str = "user") -> dict:
    return s.append("main", session, NewMessage(role=role, content=text))  # type: ignore[arg-type]


@pytest.mark.parametrize(("last", "now", "cfg", "expected"), [
    (_at(1, 3, 59), _at(1, 3, 59), {"mode": "daily"}, None),
    (_at(1, 3, 59), _at(1, 4, 0), {"mode": "daily"}, "daily"),
    (_at(1, 4, 0), _at(2, 3, 59), {"mode": "daily"}, None),
    (_at(1, 4, 0), _at(2, 4, 0), {"mode": "daily"}, "daily"),
    (_at(1, 10, 0), _at(1, 11, 59), {"mode": "idle", "idle_minutes": 120}, None),
    (_at(1, 10, 0), _at(1, 12, 0), {"mode": "idle", "idle_minutes": 120}, "idle"),
    (_at(1, 10, 0), _at(2, 4, 0), {"mode": "idle", "idle_minutes": 120}, "idle"),
    (_at(1, 3, 0), _at(1, 6, 0), {"mode": "both", "idle_minutes": 120}, "daily"),  # 04:00 before 05:00
    (_at(1, 1, 0), _at(1, 5, 0), {"mode": "both", "idle_minutes": 120}, "idle"),  # 03:00 before 04:00
    (_at(1, 1, 0), _at(9, 5, 0), {"mode": "off"}, None),
])
def test_due_reset_at_the_right_moment(last: datetime, now: datetime, cfg: dict, expected: str | None) -> None:
    assert _due(last, now, **cfg) == expected


def test_the_scheduler_resets_at_the_daily_hour_and_saves_the_note(workspace: Path, make_settings,
                                                                   redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url, extra=_reset_config("daily"))
    clock = Clock(_at(1, 3, 30))
    s = sessions(settings, redis_url, clock)
    _say(s, "We decided to ship on Friday.")
    clock.now = _at(1, 3, 59)
    assert s.tick() == []
    clock.now = _at(1, 4, 0)
    [done] = s.tick()
    assert (done["session"], done["reason"], done["reset"]) == ("chat", "daily", True)
    assert s.tick() == []  # the new conversation is empty: nothing to reset
    drain(settings, redis_url)  # the session-memory hook job
    note = workspace / "memory" / "2026-03-01-0400.md"  # no LLM: the HHMM slug fallback
    assert "- user: We decided to ship on Friday." in note.read_text(encoding="utf-8")
    shown = s.show("main", "chat")
    assert (shown["resets"], shown["messages"], shown["compactionCount"]) == (1, 0, 0)
    types = logged(redis_url)
    assert types.count("session.reset") == 1 and types.count("session.memory_saved") == 1


def test_the_scheduler_resets_an_idle_session_and_both_mode_takes_the_first(workspace: Path, make_settings,
                                                                            redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url, extra=_reset_config("both", idle_minutes=60))
    clock = Clock(_at(1, 10, 0))
    s = sessions(settings, redis_url, clock)
    _say(s, "hello", session="a")
    clock.now = _at(1, 10, 59)
    assert s.tick() == []
    clock.now = _at(1, 11, 0)
    assert [(d["session"], d["reason"]) for d in s.tick()] == [("a", "idle")]
    clock.now = _at(2, 3, 30)
    _say(s, "late night", session="b")
    clock.now = _at(2, 4, 0)  # daily (04:00) comes before idle (04:30)
    assert [(d["session"], d["reason"]) for d in s.tick()] == [("b", "daily")]


def test_a_message_to_a_stale_session_starts_a_new_conversation_first(workspace: Path, make_settings,
                                                                      redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url, extra=_reset_config("idle", idle_minutes=30))
    clock = Clock(_at(1, 9, 0))
    s = sessions(settings, redis_url, clock)
    _say(s, "Remember: my name is Ada Lovelace.")
    clock.advance(minutes=29)
    assert _say(s, "still here")["reset"] is None
    clock.advance(minutes=31)
    answer = _say(s, "back again")
    assert answer["reset"] == "idle" and answer["tokens"] == 2
    assert [m["content"] for m in s.context("main", "chat").messages] == ["back again"]
    drain(settings, redis_url)
    [note] = (workspace / "memory").glob("2026-03-01-*.md")
    assert "Ada Lovelace" in note.read_text(encoding="utf-8")


def test_new_saves_a_slugged_note_of_the_last_15_messages_that_memory_search_finds(
        workspace: Path, make_settings, redis_url: str) -> None:
    with OpenAIStub() as stub:
        settings, _ = make_settings(workspace, redis=redis_url, extra=llm_extra(stub.base_url))
        stub.set(reply="SLUG: Mail Rules!\n## Mail handling\n- The user wants a confirmation before any mail "
                       "is deleted; archiving is fine.")
        s = sessions(settings, redis_url, Clock(_at(1, 16, 45)))
        for i in range(20):
            _say(s, f"message number {i:02d}", role="user" if i % 2 == 0 else "assistant")
        result = s.end("main", "chat", "new", hook_inline=True)
        assert result["reset"] and result["files"] == ["memory/2026-03-01-mail-rules.md"]
        [request] = stub.requests("/chat/completions")
        sent = request["body"]["messages"][-1]["content"]
        assert "message number 04" not in sent and "message number 05" in sent and "message number 19" in sent
        assert sum(f"message number {i:02d}" in sent for i in range(20)) == 15
        note = (workspace / "memory" / "2026-03-01-mail-rules.md").read_text(encoding="utf-8")
        assert note.startswith("# Session chat: 2026-03-01 16:45") and "confirmation before any mail" in note
        assert s.save_session_memory("main", "chat", result["resetId"]) == result["files"]  # idempotent
        assert len(stub.requests("/chat/completions")) == 1

        _say(s, "another talk about mail")
        assert s.end("main", "chat", "reset", hook_inline=True)["files"] == ["memory/2026-03-01-mail-rules-2.md"]
        assert (workspace / "memory" / "2026-03-01-mail-rules.md").read_text(encoding="utf-8") == note

    index_now(settings, "main")
    found = QueryService(settings).search("main", SearchRequest(query="confirmation before mail is deleted"))
    assert found.results[0].path in {"memory/2026-03-01-mail-rules.md", "memory/2026-03-01-mail-rules-2.md"}


def test_without_a_slug_from_the_llm_the_note_is_named_by_the_time(workspace: Path, make_settings,
                                                                   redis_url: str) -> None:
    with OpenAIStub() as stub:  # the stub's default reply has no SLUG line
        settings, _ = make_settings(workspace, redis=redis_url, extra=llm_extra(stub.base_url))
        s = sessions(settings, redis_url, Clock(_at(1, 9, 5)))
        _say(s, "Always use Docker, never bare metal.")
        assert s.end("main", "chat", "new", hook_inline=True)["files"] == ["memory/2026-03-01-0905.md"]


def test_new_on_an_empty_session_ends_nothing(workspace: Path, make_settings, redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url)
    s = sessions(settings, redis_url)
    assert s.end("main", "fresh", "new", hook_inline=True) == {"reset": False, "reason": "new", "files": []}
    assert list((workspace / "memory").iterdir()) == []
