"""The MCP server: ``memory_search`` and ``memory_get`` for one agent, over stdio or streamable HTTP.

``memoryd mcp --agent A`` speaks MCP on stdin/stdout (what an agent runtime launches);
``memoryd mcp --agent A --http --port P`` serves streamable HTTP at ``/mcp``. One server
answers for one agent, so an agent can never reach another's memory through it.

The tool descriptions are the seed's (SPEC §5). Results are the same JSON as the HTTP
API's, as structured content and as JSON text. memoryd errors become tool errors whose
text starts with the error code (``path_refused: …``); an argument the tool does not take is
``bad_request: NAME: …``, as the HTTP API refuses it. Over stdio a line that is not a JSON-RPC
message is answered with a JSON-RPC error (``-32700`` parse error, ``-32600`` invalid
request) and named on stderr, and the server exits 1 when stdin ends after one.
"""

from __future__ import annotations

import inspect
import sys
from types import TracebackType
from typing import Annotated, Any

import anyio
import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import Field, ValidationError

from memoryd.services.query.auth import BearerAuth
from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import GetRequest, SearchRequest, dump
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.tokens import Tokens
from memoryd.shared.exceptions import MemorydError, validation_problems
from memoryd.shared.redact import redact
from memoryd.shared.runtime.roster import LiveSettings

#: The seed's description of memory_search (SPEC §5), word for word.
MEMORY_SEARCH_DESCRIPTION = (
    "Mandatory recall step: semantically search MEMORY.md + memory/*.md before answering questions about "
    "prior work, decisions, dates, people, preferences, or todos"
)
#: OpenClaw's description of memory_get.
MEMORY_GET_DESCRIPTION = (
    "Safe snippet read from MEMORY.md or memory/*.md with optional from/lines; use after memory_search to "
    "pull only the needed lines and keep context small."
)
INSTRUCTIONS = "Search memory with memory_search, then read exact lines with memory_get."


def _call(func: Any, model: type, **arguments: Any) -> dict[str, Any]:
    try:
        return dump(func(model.model_validate(arguments)))
    except MemorydError as exc:
        raise ToolError(redact(f"{exc.code}: {exc}")) from exc
    except ValidationError as exc:
        raise ToolError(f"bad_request: {validation_problems(exc)}") from exc


class _CheckedLines:
    """The stdio transport's read stream, minus what is not a JSON-RPC message: the SDK passes such a
    line on as an exception and drops it without a word. Here each one is answered with a JSON-RPC
    error (id null) and named on stderr; ``refused`` counts them."""

    def __init__(self, inner: Any, replies: Any) -> None:
        self.inner = inner
        self.replies = replies
        self.lines = 0
        self.refused = 0

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self.inner.receive()
            self.lines += 1
            if not isinstance(item, Exception):
                return item
            self.refused += 1
            await self._refuse(item)

    async def _refuse(self, exc: Exception) -> None:
        problems = exc.errors() if isinstance(exc, ValidationError) else []
        if any(p["type"] == "json_invalid" for p in problems):
            code, what = mcp_types.PARSE_ERROR, f"not JSON ({problems[0]['msg']})"
        else:
            code, what = mcp_types.INVALID_REQUEST, "JSON, but not a JSON-RPC 2.0 request, notification or response"
        message = f"line {self.lines} of stdin is {what}: send one JSON-RPC 2.0 message per line"
        print(f"memoryd mcp: {message}", file=sys.stderr, flush=True)
        error = mcp_types.JSONRPCError(jsonrpc="2.0", id=None, error=mcp_types.ErrorData(code=code, message=message))
        await self.replies.send(SessionMessage(error))

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __aiter__(self) -> _CheckedLines:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _CheckedLines:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class _Server(MCPServer):
    """The SDK's server, with tool errors as documented: ``<code>: <message>``. The SDK words a
    failed call ``Error executing tool NAME: …`` and argument validation as raw pydantic text
    with a link; here the first is our own ToolError's text and the second ``bad_request: …``."""

    #: (lines of stdin that were not JSON-RPC, lines read), once the stdio loop has ended.
    refused: tuple[int, int] = (0, 0)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = next((t for t in await self.list_tools() if t.name == name), None)
        takes = list(tool.input_schema.get("properties", {})) if tool else []
        unknown = [key for key in arguments if tool and key not in takes]
        if unknown:  # the SDK would drop them without a word; HTTP refuses them too (extra="forbid")
            raise ToolError("bad_request: " + "; ".join(f"{key}: not an argument of {name}" for key in unknown)
                            + f" (it takes {', '.join(takes)})")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(f"bad_request: {validation_problems(cause)}") from cause
            if isinstance(cause, ToolError):
                raise cause from cause.__cause__
            raise

    async def run_stdio_async(self) -> None:
        """The SDK's stdio loop, with lines that are not JSON-RPC answered and counted (``refused``)."""
        async with stdio_server() as (read_stream, write_stream):
            inbound = _CheckedLines(read_stream, write_stream)
            try:  # what MCPServer.run_stdio_async runs, on the checked stream
                await self._lowlevel_server.run(inbound, write_stream,
                                                self._lowlevel_server.create_initialization_options())
            finally:
                self.refused = (inbound.refused, inbound.lines)


def build_server(settings: Settings, agent_id: str, service: QueryService | None = None) -> _Server:
    service = service or QueryService(settings)
    query = settings.agent(agent_id).memory_search.query  # unknown agent → UnknownAgent, before serving
    server = _Server(name="memoryd", instructions=INSTRUCTIONS)

    def memory_search(
        query: Annotated[str, Field(description="What to recall, in natural language or exact words")],
        maxResults: Annotated[int, Field(ge=1, le=100, description="At most this many results")] = query.max_results,
        minScore: Annotated[float, Field(ge=0, le=1, description="Drop results scoring below this")] = query.min_score,
        source: Annotated[str, Field(description="Only this source: memory, a knowledge base's name, or all")] = "all",
        after: Annotated[str | None, Field(description="Only daily notes dated on or after this day, YYYY-MM-DD")]
        = None,
        before: Annotated[str | None, Field(description="Only daily notes dated on or before this day, YYYY-MM-DD")]
        = None,
        asOf: Annotated[str | None, Field(description="Search memory as it was at this moment: an ISO date or "
                                                      "time (2026-03-03, 2026-03-03T12:00:00Z)")] = None,
    ) -> dict[str, Any]:
        return _call(lambda r: service.search(agent_id, r), SearchRequest, query=query, maxResults=maxResults,
                     minScore=minScore, source=source, after=after, before=before, asOf=asOf)

    def memory_get(**arguments: Any) -> dict[str, Any]:
        return _call(lambda r: service.get(agent_id, r), GetRequest, **arguments)

    # ``from`` is a Python keyword: the tool's parameters are declared by signature, and the
    # SDK passes them by their aliases, which **arguments receives.
    memory_get.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("path", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[
            str, Field(description="Path from a memory_search result, e.g. memory/2026-01-20.md")]),
        inspect.Parameter("from_", inspect.Parameter.KEYWORD_ONLY, default=1, annotation=Annotated[
            int, Field(alias="from", ge=1, description="First line to read (1-based)")]),
        inspect.Parameter("lines", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            int | None, Field(ge=1, description="How many lines; default to the end (capped)")]),
    ], return_annotation=dict[str, Any])
    server.add_tool(memory_search, name="memory_search", description=MEMORY_SEARCH_DESCRIPTION)
    server.add_tool(memory_get, name="memory_get", description=MEMORY_GET_DESCRIPTION)
    return server


def run_stdio(server: _Server) -> int:
    """Serve MCP on stdin/stdout until stdin ends; → the exit code: 1 when a line was not JSON-RPC."""
    anyio.run(server.run_stdio_async)
    refused, lines = server.refused
    if refused:
        print(f"memoryd mcp: stdin ended; {refused} of its {lines} lines were not JSON-RPC messages (see above)",
              file=sys.stderr)
        return 1
    return 0


def http_app(server: MCPServer, settings: Settings, agent_id: str, *, host: str, require_token: bool) -> Any:
    """The streamable-HTTP app at ``/mcp`` behind the bearer-token check: the agent's own token
    or the admin token; required when ``require_token`` (beyond loopback), checked when sent."""
    agents = LiveSettings(settings)
    return BearerAuth(server.streamable_http_app(host=host), tokens=Tokens(settings.data_dir),
                      required=require_token, guarded=lambda _: True, agent_of=lambda _: agent_id,
                      known=lambda: agents.current().agent_ids())
