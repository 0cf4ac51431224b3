"""The HTTP API's one error shape, ``{"error": {"code", "message"}}``, for every error it gives.

memoryd's own exceptions, invalid requests, Starlette's answers (no such route, a method the
route does not take), the bearer-token middleware's refusals (services/query/auth.py) and
unexpected failures are all written by :func:`error_response`: one serialization (Starlette's
``JSONResponse``), the message's credentials masked. docs/query.md lists the codes.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from memoryd.shared.exceptions import MemorydError, validation_problems
from memoryd.shared.redact import redact


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
    404: _error("unknown_agent / not_found / index_missing: no such agent, file, index or route"),
    405: _error("method_not_allowed: the route takes another method (the Allow header names it)"),
    422: _error("bad_request: a field of the request is missing or out of range (`field: problem; …`), or the "
                "body was sent without `Content-Type: application/json`"),
    409: _error("fenced: a write under an older fencing token than the index or log has seen: another node "
                "took the agent over"),
    500: _error("internal_error: memoryd failed unexpectedly; the server's log has the details"),
    502: _error("provider_error / quota_exhausted: the embedding provider failed"),
    503: _error("redis_unavailable / busy / agent_elsewhere: a service memoryd needs is not reachable now, or "
                "another node owns the agent and published no address; try again"),
}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """Every HTTP error's answer (also an ASGI app, for middleware); a URL's credentials in the message are masked."""
    return JSONResponse({"error": {"code": code, "message": redact(message)}}, status_code=status, headers=headers)


def _is_json(content_type: str | None) -> bool:
    """What FastAPI reads a body as JSON for: ``application/json`` or ``application/*+json``."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _invalid(request: Request, exc: RequestValidationError) -> str:
    content_type = request.headers.get("content-type")
    if any(tuple(e["loc"]) == ("body",) for e in exc.errors()) and not _is_json(content_type):
        sent = f"Content-Type: {content_type}" if content_type else "no Content-Type header"
        return (f"the request body is read as JSON only when sent with the header 'Content-Type: application/json' "
                f"(this request had {sent}): add it, e.g. curl -H 'Content-Type: application/json' "
                "-d '{\"query\": \"…\"}'")
    return validation_problems(exc)


def _http_error(request: Request, exc: HTTPException) -> tuple[str, str]:
    """(code, message) of one of Starlette's own answers: a route that does not exist, a wrong method."""
    phrase = HTTPStatus(exc.status_code).phrase
    code = phrase.lower().replace(" ", "_").replace("-", "_")
    where = f"{request.method} {request.url.path}"
    if exc.detail != phrase:  # a message someone wrote
        return code, f"{where}: {exc.detail}"
    if exc.status_code == 404:
        return code, f"no route {where}: the API's routes are listed at /docs (and /openapi.json)"
    if exc.status_code == 405:
        return code, f"{where}: this route takes {(exc.headers or {}).get('Allow', 'another method')} only"
    return code, f"{where}: {phrase}"


def install(app: FastAPI) -> None:
    """Make every error ``app`` gives one shape."""

    @app.exception_handler(MemorydError)
    async def memoryd_error(_: Request, exc: MemorydError) -> JSONResponse:
        return error_response(exc.http_status, exc.code, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "bad_request", _invalid(request, exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, *_http_error(request, exc), headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette's ServerErrorMiddleware sends this, then re-raises: the traceback goes to the log.
        return error_response(500, "internal_error", f"{request.method} {request.url.path} failed unexpectedly "
                                                     f"({type(exc).__name__}); the server's log has the details")
