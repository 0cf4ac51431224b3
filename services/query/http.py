"""The HTTP JSON API of the query service (FastAPI). ``memoryd serve`` runs it under uvicorn.

    POST /v1/agents/{agent}/memory_search   SearchRequest → SearchResponse
    POST /v1/agents/{agent}/memory_get      GetRequest    → GetResponse
    GET  /v1/agents                          the configured agents and their indexes
    GET  /healthz                            liveness (and which query process answered: ``pid``)
    GET  /openapi.json, /docs                the schema

Every error is ``{"error": {"code": ..., "message": ...}}`` (services/query/errors.py) with the
status of the exception class (shared/exceptions.py); request validation errors are
``bad_request`` (422), an unknown route ``not_found``, a wrong method ``method_not_allowed``.
Other services mount their routers with ``create_app(settings, routers=[...])``.

With a ``placement`` (``memoryd serve``: services/query/placement.py) a search or read of an
agent another node owns is forwarded to that node; one no live node owns is answered here
with ``unavailable`` saying why it may be stale.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline

from memoryd.services.query import errors
from memoryd.services.query.auth import PRINCIPAL, BearerAuth, api_agent
from memoryd.services.query.engine import QueryService
from memoryd.services.query.errors import ERRORS
from memoryd.services.query.models import AgentsResponse, GetRequest, GetResponse, SearchRequest, SearchResponse, dump
from memoryd.services.query.placement import FORWARDED, Placement, Route
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.tokens import ADMIN, Tokens, agent_principal

API_VERSION = "1"


def query_router(service: QueryService, placement: Placement | None = None) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["memory"], responses=ERRORS)

    def routed(agent: str, request: SearchRequest | GetRequest, raw: Request) -> Response | Route:
        """The owner's answer when another node owns ``agent``; else where to answer here from."""
        service.agent(agent)  # an unknown agent is refused here, not forwarded
        if placement is None:
            return Route()
        route = placement.route(agent, forwarded=FORWARDED in raw.headers)
        if route.address is None:
            return route
        answer = placement.forward(route.address, raw.url.path, request.model_dump(mode="json", by_alias=True,
                                                                                  exclude_none=True),
                                   raw.headers.get("authorization"))
        return Response(answer.content, status_code=answer.status_code, media_type="application/json")

    @router.post("/agents/{agent}/memory_search", response_model=SearchResponse, response_model_exclude_none=True,
                 summary="Search the agent's memory (vector + keyword, fused)")
    def memory_search(agent: str, request: SearchRequest, raw: Request) -> Response:
        route = routed(agent, request, raw)
        if isinstance(route, Response):
            return route
        answer = service.search(agent, request)
        if route.unavailable:
            answer.unavailable = route.unavailable
        return JSONResponse(dump(answer))

    @router.post("/agents/{agent}/memory_get", response_model=GetResponse, response_model_exclude_none=True,
                 summary="Read exact lines of one of the agent's memory files")
    def memory_get(agent: str, request: GetRequest, raw: Request) -> Response:
        route = routed(agent, request, raw)
        if isinstance(route, Response):
            return route
        return JSONResponse(dump(service.get(agent, request)))

    @router.get("/agents", response_model=AgentsResponse, response_model_exclude_none=True,
                summary="The configured agents and their indexes (an agent's token: only its own, no paths)")
    def agents(request: Request) -> JSONResponse:
        answer = service.agents()
        principal = getattr(request.state, PRINCIPAL, None)
        if principal is not None and principal != ADMIN:
            answer = AgentsResponse(agents=[a.model_copy(update={"workspace": None}) for a in answer.agents
                                            if agent_principal(a.id) == principal])
        return JSONResponse(dump(answer))

    return router


def create_app(settings: Settings, routers: Sequence[APIRouter] = (), service: QueryService | None = None, *,
               require_token: bool = False, placement: Placement | None = None) -> FastAPI:
    """The HTTP app: the query routes, then ``routers`` (e.g. the session service's), one error shape.

    Every ``/v1/`` route takes a bearer token (services/query/auth.py); ``require_token``
    (a server beyond loopback) refuses a request without one."""
    service = service or QueryService(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()
        if placement is not None:
            placement.close()

    # FastAPIOffline: /docs and /redoc load Swagger UI and ReDoc from the fastapi-offline package,
    # not from a CDN, so they work offline.
    app = FastAPIOffline(title="memoryd", version=API_VERSION, lifespan=lifespan,
                  description="Agent memory: memory_search and memory_get over each agent's Markdown memory.")
    app.state.query = service
    app.add_middleware(BearerAuth, tokens=Tokens(settings.data_dir), required=require_token,
                       guarded=lambda path: path.startswith("/v1/"), agent_of=api_agent,
                       known=lambda: service.settings.agent_ids())

    errors.install(app)

    @app.get("/healthz", tags=["ops"], summary="Liveness")
    def healthz() -> dict:
        return {"status": "ok", "agents": len(service.settings.agent_ids()), "pid": os.getpid()}

    app.include_router(query_router(service, placement))
    for router in routers:
        app.include_router(router, responses=ERRORS)
    return app
