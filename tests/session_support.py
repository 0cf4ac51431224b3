"""Helpers for the session tests: a settable clock, exact-size texts, a session worker run."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import redis

from memoryd.services.query.http import create_app
from memoryd.services.session.api import build_router
from memoryd.services.session.service import Sessions
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from memoryd.shared.index.chunking import count_tokens
from memoryd.shared.log.eventlog import log_dir, read
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.worker import run_worker
from tests.support import serving

__all__ = ["FACT", "RULE", "UTC", "Clock", "drain", "lines", "llm_extra", "logged", "sessions", "words",
           "write_day"]

#: One fact in two wordings, one rule in three: what a heartbeat should find recurring.
FACT = ["- The billing service is owned by team-alpha, and Dana Reyes is its on-call lead.",
        "- Dana Reyes is the on-call lead for the billing service, which team-alpha owns."]
RULE = ["- Always ask before deleting any email from the shared support inbox, even spam.",
        "- Never delete an email from the shared support inbox without asking first, even spam.",
        "- Remember: ask me before deleting any email in the shared support inbox, spam included."]



class Clock:
    """An injected clock: ``clock()`` is now; ``clock.advance(minutes=5)`` moves it."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def words(tokens: int, word: str = "go") -> str:
    """A text of exactly ``tokens`` cl100k tokens."""
    text = word + f" {word}" * (tokens - 1)
    assert count_tokens(text) == tokens
    return text


def sessions(settings: Settings, url: str, clock: Clock | None = None) -> Sessions:
    bus = Bus(redis.Redis.from_url(url), settings)
    return Sessions(settings, bus, clock=clock) if clock else Sessions(settings, bus)


def drain(settings: Settings, url: str) -> None:
    """Run the session queue's real RQ worker in this process until the queue is empty."""
    run_worker("session", settings, redis.Redis.from_url(url), burst=True)


def logged(url: str, agent: str = "main") -> list[str]:
    """Event types in the agent's log on disk (under the test's state dir), oldest first."""
    return [record.type for record in read(log_dir(load_settings(), agent))]


def llm_extra(base_url: str) -> dict:
    return {"memoryd": {"llm": {"baseUrl": base_url, "model": "stub-chat"}}}


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write_day(workspace: Path, day: date, *text: str) -> None:
    """The daily log ``memory/<day>.md``: a heading, a blank line, then ``text`` (line 3 on)."""
    (workspace / "memory" / f"{day.isoformat()}.md").write_text(
        f"# {day.isoformat()}\n\n" + "\n".join(text) + "\n", encoding="utf-8")


def session_routes(settings: Settings) -> AbstractContextManager[str]:
    """The session routes as `memoryd serve` mounts them, on a real uvicorn server on loopback: its URL."""
    return serving(create_app(settings, routers=[build_router(settings)]))
