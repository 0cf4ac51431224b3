"""The HTTP JSON API of the query service (FastAPI). ``memoryd serve`` runs it under uvicorn.

    POST /v1/agents/{agent}/memory_search   SearchRequest → SearchResponse
    POST /v1/agents/{agent}/memory_get      GetRequest    → GetResponse
    GET  /v1/agents                          the configured agents and their indexes
    GET  /healthz                            liveness
    GET  /openapi.json, /docs                the schema

Every error is ``{"error": {"code": ..., "message": ...}}`` with the status of the
exception class (shared/exceptions.py); request validation errors are ``bad_request``
(422). Other services mount their routers with ``create_app(settings, routers=[...])``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field

from memoryd.services.query.auth import PRINCIPAL, BearerAuth, api_agent
from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import AgentsResponse, GetRequest, GetResponse, SearchRequest, SearchResponse, dump
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.tokens import ADMIN, Tokens, agent_principal
from memoryd.shared.exceptions import MemorydError, validation_problems
from memoryd.shared.redact import redact

API_VERSION = "1"


def error_body(code: str, message: str) -> dict:
    """Every HTTP error's body; a URL's credentials in the message are masked."""
    return {"error": {"code": code, "message": redact(message)}}


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable name, e.g. unknown_agent, path_refused, bad_request")
    message: str = Field(description="What is wrong, with the identifiers and the fix")


class ErrorBody(BaseModel):
    """Every error answer of the API."""

    error: ErrorDetail


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


#: The error answers every /v1 route may give, documented in the OpenAPI schema (FastAPI's
#: default 422 body is replaced: validation errors have the same shape as the others).
ERRORS: dict[int | str, dict[str, Any]] = {
    400: _error("bad_request / invalid_config: the request or the configuration is not valid"),
    401: _error("unauthorized: a bearer token is required, or the one sent is not valid"),
    403: _error("forbidden / path_refused: the token is for another agent, or the path is outside memory"),
    404: _error("unknown_agent / not_found / index_missing: no such agent, file or index"),
    422: _error("bad_request: a field of the request is missing or out of range (`field: problem; …`)"),
    502: _error("provider_error / quota_exhausted: the embedding provider failed"),
    503: _error("redis_unavailable / busy: a service memoryd needs is not reachable now; try again"),
}


def query_router(service: QueryService) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["memory"], responses=ERRORS)

    @router.post("/agents/{agent}/memory_search", response_model=SearchResponse, response_model_exclude_none=True,
                 summary="Search the agent's memory (vector + keyword, fused)")
    def memory_search(agent: str, request: SearchRequest) -> JSONResponse:
        return JSONResponse(dump(service.search(agent, request)))

    @router.post("/agents/{agent}/memory_get", response_model=GetResponse, response_model_exclude_none=True,
                 summary="Read exact lines of one of the agent's memory files")
    def memory_get(agent: str, request: GetRequest) -> JSONResponse:
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
               require_token: bool = False) -> FastAPI:
    """The HTTP app: the query routes, then ``routers`` (e.g. the session service's), one error shape.

    Every ``/v1/`` route takes a bearer token (services/query/auth.py); ``require_token``
    (a server beyond loopback) refuses a request without one."""
    service = service or QueryService(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()

    # FastAPIOffline: /docs and /redoc load Swagger UI and ReDoc from the fastapi-offline package,
    # not from a CDN, so they work offline.
    app = FastAPIOffline(title="memoryd", version=API_VERSION, lifespan=lifespan,
                  description="Agent memory: memory_search and memory_get over each agent's Markdown memory.")
    app.state.query = service
    app.add_middleware(BearerAuth, tokens=Tokens(settings.state_dir), required=require_token,
                       guarded=lambda path: path.startswith("/v1/"), agent_of=api_agent,
                       known=lambda: service.settings.agent_ids())

    @app.exception_handler(MemorydError)
    async def memoryd_error(_: Request, exc: MemorydError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, str(exc)), status_code=exc.http_status)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body("bad_request", validation_problems(exc)), status_code=422)

    @app.get("/healthz", tags=["ops"], summary="Liveness")
    def healthz() -> dict:
        return {"status": "ok", "agents": len(service.settings.agent_ids())}

    app.include_router(query_router(service))
    for router in routers:
        app.include_router(router, responses=ERRORS)
    return app
