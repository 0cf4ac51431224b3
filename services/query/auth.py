"""Bearer-token checks in front of the HTTP API (with the session routes) and the MCP server.

:class:`BearerAuth` is plain ASGI middleware, so one class guards FastAPI's routes and the
MCP SDK's streamable-HTTP app alike. For every guarded request:

- no ``Authorization`` header: refused (401) when tokens are required — beyond loopback,
  see ``memoryd.shared.config.tokens.tokens_required`` — else served as the local user;
- a token that is not valid (unknown, rotated away, its agent removed): 401, always;
- a valid token for another agent than the one in the path: 403;
- the token's principal (``agent:<id>`` or ``admin``) goes to the app in ``scope["state"]``,
  where ``GET /v1/agents`` reads it to show an agent token only its own agent, without paths.

Errors are the API's, written by services/query/errors.py (same shape, same bytes); a 401
says ``WWW-Authenticate: Bearer``. ``/healthz``, ``/docs`` and ``/openapi.json`` stay open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memoryd.services.query.errors import error_response
from memoryd.shared.config.tokens import ADMIN, Tokens, allows

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]

#: Where the principal of a request is put for the app (``request.state.principal``).
PRINCIPAL = "principal"


def api_agent(path: str) -> str | None:
    """The agent a path of the HTTP API acts for (``/v1/agents/{agent}/…``); None elsewhere."""
    parts = path.split("/")
    return parts[3] if len(parts) > 4 and parts[1] == "v1" and parts[2] == "agents" else None


class BearerAuth:
    """ASGI middleware: ``guarded(path)`` decides which paths need a principal, ``agent_of(path)``
    which agent a path acts for (None: a cross-agent route), ``known()`` the configured agents."""

    def __init__(self, app: Any, *, tokens: Tokens, required: bool, guarded: Callable[[str], bool],
                 agent_of: Callable[[str], str | None], known: Callable[[], list[str]]) -> None:
        self.app = app
        self.tokens = tokens
        self.required = required
        self.guarded = guarded
        self.agent_of = agent_of
        self.known = known

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.guarded(scope["path"]):
            await self.app(scope, receive, send)
            return
        principal, refusal = self.check(scope)
        if refusal is not None:
            status, code, message = refusal
            challenge = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            await error_response(status, code, message, headers=challenge)(scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL] = principal
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> tuple[str | None, tuple[int, str, str] | None]:
        """(principal, None) to serve; (None, (status, code, message)) to refuse."""
        header = dict(scope["headers"]).get(b"authorization")
        if header is None:
            if self.required:
                return None, (401, "unauthorized", "this server requires a bearer token: send 'Authorization: "
                                                   "Bearer <token>' (issue one with `memoryd agents token ID`)")
            return None, None
        scheme, _, token = header.decode("latin-1").partition(" ")
        principal = self.tokens.verify(token.strip()) if scheme.lower() == "bearer" else None
        if principal is not None and principal != ADMIN and principal.removeprefix("agent:") not in self.known():
            principal = None  # the token of an agent that was removed
        if principal is None:
            return None, (401, "unauthorized", "the bearer token is not valid (unknown, rotated or revoked); "
                                               "issue a new one with `memoryd agents token ID`")
        agent = self.agent_of(scope["path"])
        if agent is not None and not allows(principal, agent):
            return None, (403, "forbidden", f"this token is not valid for agent {agent!r}")
        return principal, None
