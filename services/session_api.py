"""The session service's HTTP routes, under ``/v1/agents/{agent}/sessions/{session}``.

``build_router(settings)`` returns an ``APIRouter`` that the HTTP server mounts. Errors
become ``{"detail": {"code": …, "message": …}}`` with the error's HTTP status.

- ``POST …/messages`` ``{"role", "text" | "content", "name"?, "toolCallId"?, "toolCalls"?, "ts"?}``:
  append one turn → the entry, ``tokens`` and what it triggered (flush, compaction, reset);
- ``GET …``: the counters (``compactionCount``, ``memoryFlushCompactionCount``, ``tokens``, …);
- ``GET …/context``: the messages to send, ``tokens``, ``sessionTokens``, what pruning did;
- ``POST …/compact`` ``{"focus"?}``: compact now (``compacted: false`` when nothing is old enough);
- ``POST …/new``, ``POST …/reset``: end the conversation; → the session-memory file written.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Literal, ParamSpec, TypeVar

import redis
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict

from services.session import NewMessage, Sessions, context_json
from shared.bus import Bus, connect, redis_url
from shared.config import Settings
from shared.exceptions import MemorydError

P = ParamSpec("P")
R = TypeVar("R")
PREFIX = "/v1/agents/{agent}/sessions/{session}"


class CompactRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    focus: str | None = None


def _edge(func: Callable[P, R]) -> Callable[P, R]:
    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except MemorydError as exc:
            raise HTTPException(exc.http_status, {"code": exc.code, "message": str(exc)}) from exc
    return wrapper


def build_router(settings: Settings, conn: redis.Redis | None = None) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=["sessions"])
    made: list[Sessions] = []

    def sessions() -> Sessions:
        if not made:  # Redis is reached at the first request, not at import or mount
            made.append(Sessions(settings, Bus(conn or connect(redis_url(settings)), settings)))
        return made[0]

    @router.post("/messages")
    @_edge
    def append(agent: str, session: str, message: NewMessage) -> dict[str, Any]:
        return sessions().append(agent, session, message)

    @router.get("")
    @_edge
    def show(agent: str, session: str) -> dict[str, Any]:
        return sessions().show(agent, session)

    @router.get("/context")
    @_edge
    def context(agent: str, session: str) -> dict[str, Any]:
        return context_json(sessions().context(agent, session))

    @router.post("/compact")
    @_edge
    def compact(agent: str, session: str, request: CompactRequest | None = None) -> dict[str, Any]:
        focus = request.focus if request else None
        done = sessions().compact(agent, session, manual=True, focus=focus)
        return {"compacted": done is not None, **(done or {})}

    def _end(agent: str, session: str, reason: Literal["new", "reset"]) -> dict[str, Any]:
        return sessions().end(agent, session, reason, hook_inline=True)

    @router.post("/new")
    @_edge
    def new(agent: str, session: str) -> dict[str, Any]:
        return _end(agent, session, "new")

    @router.post("/reset")
    @_edge
    def reset(agent: str, session: str) -> dict[str, Any]:
        return _end(agent, session, "reset")

    return router
