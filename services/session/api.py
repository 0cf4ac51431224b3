"""The session service's HTTP routes, under ``/v1/agents/{agent}/sessions/{session}``.

``build_router(settings)`` returns an ``APIRouter`` that the HTTP server mounts with
``memoryd.services.query.http.create_app(settings, routers=[...])``; that app turns errors into
``{"error": {"code": …, "message": …}}`` with the error's HTTP status.

- ``POST …/messages`` ``{"role", "text" | "content", "name"?, "toolCallId"?, "toolCalls"?, "ts"?}``:
  append one turn → the entry, ``tokens`` and what it triggered (flush, compaction, reset);
- ``GET …``: the counters (``compactionCount``, ``memoryFlushCompactionCount``, ``tokens``, …);
- ``GET …/context``: the messages to send, ``tokens``, ``sessionTokens``, what pruning did;
- ``POST …/compact`` ``{"focus"?}``: compact now (``compacted: false`` when nothing is old enough);
- ``POST …/new``, ``POST …/reset``: end the conversation; → the session-memory file written.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

import redis
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from memoryd.services.session.service import NewMessage, Sessions, context_json
from memoryd.shared.config.settings import Settings
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.redis_server import connect, redis_url

PREFIX = "/v1/agents/{agent}/sessions/{session}"


class CompactRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    focus: str | None = None


def build_router(settings: Settings, conn: redis.Redis | None = None) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=["sessions"])
    made: list[Sessions] = []
    lock = threading.Lock()

    def sessions() -> Sessions:
        with lock:
            if not made:  # Redis is reached at the first request, not at import or mount
                made.append(Sessions(settings, Bus(conn or connect(redis_url(settings)), settings)))
            return made[0]

    @router.post("/messages", summary="Append one turn to the session's transcript")
    def append(agent: str, session: str, message: NewMessage) -> dict[str, Any]:
        return sessions().append(agent, session, message)

    @router.get("", summary="The session's counters: tokens, compactionCount, memoryFlushCompactionCount")
    def show(agent: str, session: str) -> dict[str, Any]:
        return sessions().show(agent, session)

    @router.get("/context", summary="What would be sent to the model, with pruning applied")
    def context(agent: str, session: str) -> dict[str, Any]:
        return context_json(sessions().context(agent, session))

    @router.post("/compact", summary="Compact now (/compact): summarise older turns")
    def compact(agent: str, session: str, request: CompactRequest | None = None) -> dict[str, Any]:
        focus = request.focus if request else None
        done = sessions().compact(agent, session, manual=True, focus=focus)
        return {"compacted": done is not None, **(done or {})}

    def _end(agent: str, session: str, reason: Literal["new", "reset"]) -> dict[str, Any]:
        return sessions().end(agent, session, reason, hook_inline=True)

    @router.post("/new", summary="End the conversation (/new) and save its session-memory note")
    def new(agent: str, session: str) -> dict[str, Any]:
        return _end(agent, session, "new")

    @router.post("/reset", summary="End the conversation (/reset) and save its session-memory note")
    def reset(agent: str, session: str) -> dict[str, Any]:
        return _end(agent, session, "reset")

    return router
