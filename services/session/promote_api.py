"""Heartbeat and promotion over HTTP and MCP: the same operations as ``memoryd promote`` / ``heartbeat``.

HTTP (``build_router(settings)``, mounted by ``memoryd serve`` beside the session routes):

- ``GET  /v1/agents/{agent}/promotions?status=pending|accepted|rejected`` → ``{"proposals": [...]}``;
- ``POST /v1/agents/{agent}/promotions/{id}/accept`` → the proposal, accepted;
- ``POST /v1/agents/{agent}/promotions/{id}/reject`` ``{"reason"?}`` → the proposal, rejected;
- ``POST /v1/agents/{agent}/heartbeat`` → what one heartbeat did now.

MCP (``add_tools(server, …)``, on ``memoryd mcp --agent A``): ``memory_promotions`` lists the
agent's proposals and accepts or rejects one. SOUL.md and TOOLS.md are configuration (SPEC §8):
an agent cannot accept a proposal for them through MCP, nor over HTTP without the admin token —
a person accepts those (``memoryd promote accept``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

import redis
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from memoryd.services.session.heartbeat import Heartbeat
from memoryd.services.session.promotion import Ledger, Proposal, accept, reject
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.tokens import ADMIN
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.redis_server import connect, redis_url

#: Where services/query/auth.py's middleware leaves the caller's principal on the request.
_PRINCIPAL = "principal"
Status = Literal["pending", "accepted", "rejected"]


class IdentityRefused(MemorydError):
    code = "forbidden"
    http_status = 403


class RejectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(None, max_length=500)


def listing(settings: Settings, bus: Bus, agent_id: str, status: Status | None) -> list[dict[str, object]]:
    settings.agent(agent_id)
    with Ledger(settings, bus, agent_id).locked() as proposals:
        return [p.wire() for p in proposals.values() if status is None or p.status == status]


def accept_as_agent(settings: Settings, bus: Bus, agent_id: str, proposal_id: str, *, person: bool) -> Proposal:
    """Accept, refusing a SOUL.md / TOOLS.md target unless a person (admin token, CLI) asks."""
    if not person:
        with Ledger(settings, bus, agent_id).locked() as proposals:
            target = proposals[proposal_id].target if proposal_id in proposals else None
        if target in ("SOUL.md", "TOOLS.md"):
            raise IdentityRefused(f"proposal {proposal_id} is for {target}: identity files are accepted by a person "
                                  f"(`memoryd promote accept {proposal_id} --agent {agent_id}`, or the admin token)")
    return accept(settings, bus, agent_id, proposal_id, now=datetime.now().astimezone())


def lazy_bus(settings: Settings, conn: redis.Redis | None) -> Callable[[], Bus]:
    made: list[Bus] = []
    lock = threading.Lock()

    def bus() -> Bus:
        with lock:
            if not made:  # Redis is reached at the first request, not at import or mount
                made.append(Bus(conn or connect(redis_url(settings)), settings))
            return made[0]

    return bus


def build_router(settings: Settings, conn: redis.Redis | None = None) -> APIRouter:
    router = APIRouter(prefix="/v1/agents/{agent}", tags=["promotion"])
    bus = lazy_bus(settings, conn)
    beats: list[Heartbeat] = []

    @router.get("/promotions", summary="The agent's promotion proposals (pending, accepted, rejected)")
    def promotions(agent: str, status: Status | None = None) -> dict[str, Any]:
        return {"proposals": listing(settings, bus(), agent, status)}

    @router.post("/promotions/{proposal_id}/accept", summary="Accept a proposal: append it to its target, commit")
    def accept_route(agent: str, proposal_id: str, request: Request) -> dict[str, Any]:
        person = getattr(request.state, _PRINCIPAL, None) == ADMIN
        return accept_as_agent(settings, bus(), agent, proposal_id, person=person).wire()

    @router.post("/promotions/{proposal_id}/reject", summary="Reject a proposal: it is never proposed again")
    def reject_route(agent: str, proposal_id: str, body: RejectRequest | None = None) -> dict[str, Any]:
        return reject(settings, bus(), agent, proposal_id, body.reason if body else None).wire()

    @router.post("/heartbeat", summary="Run one heartbeat of the agent now")
    def heartbeat(agent: str) -> dict[str, Any]:
        if not beats:
            beats.append(Heartbeat(settings, bus()))
        return beats[0].run(agent)

    return router


def add_tools(server: Any, settings: Settings, agent_id: str, bus: Callable[[], Bus], error: type[Exception]) -> None:
    """Add ``memory_promotions`` to the agent's MCP server (``error``: the SDK's ToolError)."""

    def memory_promotions(
        action: Annotated[Literal["list", "accept", "reject"], Field(description="list, accept or reject")] = "list",
        id: Annotated[str | None, Field(description="The proposal's id (accept, reject)")] = None,
        reason: Annotated[str | None, Field(description="Why it is rejected (reject)")] = None,
    ) -> dict[str, Any]:
        try:
            if action == "list":
                return {"proposals": listing(settings, bus(), agent_id, "pending")}
            if not id:
                raise error(f"bad_request: {action} needs the proposal's id")
            if action == "accept":
                return accept_as_agent(settings, bus(), agent_id, id, person=False).wire()
            return reject(settings, bus(), agent_id, id, reason).wire()
        except MemorydError as exc:
            raise error(f"{exc.code}: {exc}") from exc

    server.add_tool(memory_promotions, name="memory_promotions",
                    description="Statements the heartbeat found repeated in your daily logs, proposed for MEMORY.md "
                                "(SOUL.md and TOOLS.md proposals are accepted by a person). List them, accept one "
                                "(appended to MEMORY.md and committed) or reject one (never proposed again).")
