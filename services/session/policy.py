"""The session service's rules, as pure functions: when to flush and compact, when a
session's conversation is over, what compaction keeps verbatim (SPEC §6)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel

from memoryd.services.session.transcript import Message, Segment
from memoryd.shared.config.settings import AgentConfig, SessionResetSettings
from memoryd.shared.index.chunking import encoding


class Thresholds(BaseModel):
    flush: int | None
    compact: int

    @classmethod
    def of(cls, agent: AgentConfig) -> Thresholds:
        c = agent.compaction
        compact = agent.context_window - c.reserve_tokens_floor
        flush = compact - c.memory_flush.soft_threshold_tokens if c.memory_flush.enabled else None
        return cls(flush=flush, compact=compact)

    @property
    def base(self) -> int:
        return self.flush if self.flush is not None else self.compact


def daily_boundary(now: datetime, at_hour: int) -> datetime:
    """The latest daily reset moment at or before ``now``, in ``now``'s time zone."""
    boundary = now.replace(hour=at_hour, minute=0, second=0, microsecond=0)
    return boundary if boundary <= now else boundary - timedelta(days=1)


def due_reset(seg: Segment, cfg: SessionResetSettings, now: datetime) -> Literal["daily", "idle"] | None:
    """Why the session's conversation is over at ``now``, if it is; with mode ``both`` the first wins."""
    last = seg.last_activity
    if last is None or cfg.mode == "off":
        return None
    due: list[tuple[datetime, Literal["daily", "idle"]]] = []
    if cfg.mode in ("daily", "both"):
        boundary = daily_boundary(now, cfg.at_hour)
        if last < boundary:
            due.append((daily_boundary(last + timedelta(hours=24), cfg.at_hour), "daily"))
    if cfg.mode in ("idle", "both"):
        idle_at = last + timedelta(minutes=cfg.idle_minutes)
        if now >= idle_at:
            due.append((idle_at, "idle"))
    return min(due)[1] if due else None


def split_recent(live: list[Message], budget: int) -> tuple[list[Message], list[Message]]:
    """(older, kept): the newest turns that fit ``budget`` tokens are kept verbatim."""
    start, used = len(live), 0
    while start > 0 and used + live[start - 1].tokens <= budget:
        start -= 1
        used += live[start].tokens
    while start < len(live) and live[start].role == "tool":  # never keep a result without its call
        start += 1
    return live[:start], live[start:]


def cap_tokens(text: str, limit: int) -> str:
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= limit:
        return text
    return encoding().decode(tokens[:limit]).rstrip() + "\n[... summary cut to fit]"
