"""Query commands: ``search``, ``get``, ``serve`` (HTTP) and ``mcp`` (stdio or streamable HTTP)."""

from __future__ import annotations

import argparse
import json
import re
import sys

from memoryd.services.cli import remote
from memoryd.services.cli.text import plural, snippet_lines

#: ``typing.TYPE_CHECKING`` without importing ``typing`` (5 ms of a `memoryd search` answered by a server);
#: type checkers treat any name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from memoryd.services.query.engine import QueryService
    from memoryd.services.query.models import SearchResponse
    from memoryd.services.query.placement import Placement
    from memoryd.shared.config.settings import Settings

#: The wire's ``Fusion`` values (services/query/models.py), spelled here so that parsing the
#: command line imports no pydantic; tests/test_cli_transport.py checks they agree.
FUSIONS = ("rrf", "weighted", "keyword", "vector")


def day(text: str) -> str:
    """A ``YYYY-MM-DD`` argument, checked and kept as text: the request model reads it (and refuses
    a day its month lacks); ``datetime`` is not imported to parse a command line."""
    found = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", text)
    if not found or not (1 <= int(found[2]) <= 12 and 1 <= int(found[3]) <= 31):
        raise argparse.ArgumentTypeError(f"{text!r} is not a day: write it as YYYY-MM-DD, e.g. 2026-01-31")
    return text


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("search", parents=[common])
    p.add_argument("query", help="what to recall")
    p.add_argument("--agent", default="main", help="agent id (default main)")
    p.add_argument("--max-results", type=int, help="at most this many results (default: the agent's, 6)")
    p.add_argument("--min-score", type=float, help="drop results below this score (default: the agent's, 0.35)")
    p.add_argument("--fusion", choices=FUSIONS,
                   help="rrf (default), weighted (the seed's 0.7/0.3), keyword or vector alone")
    p.add_argument("--source", help="only this source: memory, an extraPath's source name, or all (default)")
    p.add_argument("--after", type=day, metavar="YYYY-MM-DD",
                   help="only daily notes dated on or after this day (the date in the file name)")
    p.add_argument("--before", type=day, metavar="YYYY-MM-DD",
                   help="only daily notes dated on or before this day")
    p.add_argument("--as-of", metavar="WHEN",
                   help="search the index as it was then (ISO date or time, or a log sequence number)")
    p.add_argument("--explain", action="store_true", help="show each result's vector, text and fused score")
    p.add_argument("--json", action="store_true", help="print the memory_search JSON")
    p.set_defaults(func=cmd_search, remote=remote_search)

    p = sub.add_parser("get", parents=[common])
    p.add_argument("path", help="path as memory_search returns it, e.g. memory/2026-01-20.md")
    p.add_argument("--agent", default="main", help="agent id (default main)")
    p.add_argument("--from", dest="from_", type=int, default=1, metavar="LINE", help="first line, 1-based (default 1)")
    p.add_argument("--lines", type=int, help="how many lines (default: to the end, capped)")
    p.add_argument("--json", action="store_true", help="print the memory_get JSON")
    p.set_defaults(func=cmd_get, remote=remote_get)

    p = sub.add_parser("serve", parents=[common])
    p.add_argument("--host", help="interface to listen on (default memoryd.server.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default memoryd.server.port, 8765)")
    p.add_argument("--insecure", action="store_true",
                   help="beyond loopback, serve without requiring bearer tokens (anyone who reaches it reads memory)")
    p.add_argument("--another", action="store_true",
                   help="serve although a memoryd serve (or up) already serves this state dir; this one is not "
                        "noted in <state>/serve.json, so the CLI keeps asking the first")
    p.add_argument("--processes", type=int, metavar="N",
                   help="query processes sharing the port (default memoryd.server.processes: one per core, at most 4)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("mcp", parents=[common])
    p.add_argument("--agent", default="main", help="agent id (default main)")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    p.add_argument("--host", help="with --http: interface (default memoryd.server.host)")
    p.add_argument("--port", type=int, help="with --http: port (default memoryd.server.port + 1)")
    p.add_argument("--insecure", action="store_true",
                   help="with --http beyond loopback: serve without requiring a bearer token")
    p.set_defaults(func=cmd_mcp)


def _service(settings: Settings) -> QueryService:
    """Imported late: `memoryd --help` and the other commands should not load numpy and the model."""
    from memoryd.services.query.engine import QueryService

    return QueryService(settings)


def remote_search(args: argparse.Namespace) -> int | None:
    """The answer of a running server (JSON as it sent it); None: no server, answer here."""
    return remote.answered(args, "memory_search", remote.search_body(args),
                           remote.print_json if args.json else lambda a: print(format_search(_response(a), args.query)))


def _response(answer: dict) -> SearchResponse:
    from memoryd.services.query.models import SearchResponse

    return SearchResponse.model_validate(answer)


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from pydantic import ValidationError

    from memoryd.services.query.models import SearchRequest, dump
    from memoryd.shared.exceptions import BadRequest, validation_problems

    try:
        request = SearchRequest.model_validate(remote.search_body(args))
    except ValidationError as exc:  # a day its month lacks (2026-02-30)
        raise BadRequest(f"bad search: {validation_problems(exc)}") from None
    answer = _service(settings).search(args.agent, request)
    if args.json:
        print(json.dumps(dump(answer), ensure_ascii=False, indent=2))
    else:
        print(format_search(answer, args.query))
    return 0


def format_search(answer: SearchResponse, query: str | None = None) -> str:
    """Results for a person: score, place, then the snippet indented (cut after the line that
    matches ``query``, with ``…`` where cut); --explain adds the parts."""
    head = (f"{plural(len(answer.results), 'result')} · {answer.mode} · fusion {answer.fusion} · "
            f"{answer.provider} {answer.model}")
    lines = [head] + ([f"  ({answer.reason})"] if answer.reason else []) + (
        [f"  WARNING: {answer.warning}"] if answer.warning else [])
    for r in answer.results:
        lines.append(f"{r.score:.3f}  {r.path}:{r.start_line}-{r.end_line}  [{r.source}]")
        if r.explain:
            e = r.explain

            def part(score: float | None, rank: int | None) -> str:
                return "-" if score is None else f"{score:.3f}" + (f" (#{rank})" if rank else "")

            lines.append(f"       vector {part(e.vector, e.vector_rank)}  text {part(e.text, e.text_rank)}  "
                         f"bm25 {'-' if e.bm25 is None else f'{e.bm25:.2f}'}  fused {e.fused:.3f}"
                         + ("" if e.weight is None else f" (× {e.weight:.3f})"))
        lines += ["       " + line for line in snippet_lines(r.snippet, query, r.end_line - r.start_line + 1)]
    return "\n".join(lines)


def remote_get(args: argparse.Namespace) -> int | None:
    return remote.answered(args, "memory_get", remote.get_body(args), remote.print_json if args.json else _print_get)


def _print_get(answer: dict) -> None:
    print(answer["text"])
    if answer.get("note"):
        print(f"memoryd: {answer['note']}", file=sys.stderr)


def cmd_get(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.query.models import GetRequest, dump

    request = GetRequest.model_validate(remote.get_body(args))
    answer = _service(settings).get(args.agent, request)
    (remote.print_json if args.json else _print_get)(dump(answer))
    return 0


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.query.http import create_app
    from memoryd.services.session import promote_api
    from memoryd.services.session.api import build_router

    server = settings.memoryd.server
    host = args.host or server.host
    required = _tokens_required(settings, host, args.insecure)
    import socket

    from memoryd.services.cli import serveprocs
    from memoryd.services.query.engine import QueryService

    processes = args.processes or serveprocs.count(server.processes)
    placement = _placement(settings)
    app = create_app(settings, routers=[build_router(settings), promote_api.build_router(settings)],
                     service=QueryService(settings, processes), require_token=required, placement=placement)

    def listening(url: str) -> None:
        for wildcard in ("//0.0.0.0:", "//[::]:"):
            url = url.replace(wildcard, f"//{socket.gethostname()}:")
        placement.publish(server.advertise_url or url)

    remote.serve(app, host, server.port if args.port is None else args.port, settings, announce=not args.another,
                 listening=listening, processes=processes)
    return 0


def _placement(settings: Settings) -> Placement:
    """Who owns each agent, from Redis (no wait for it here: a search while it is away is answered
    locally and says so)."""
    from memoryd.services.query import placement
    from memoryd.shared.runtime import redis_server

    return placement.connect(redis_server.redis_url(settings), settings.namespace, settings.node)


def _tokens_required(settings: Settings, host: str, insecure: bool) -> bool:
    """Whether the server on ``host`` requires tokens (refused: auth off beyond loopback without --insecure)."""
    from memoryd.shared.config.tokens import Tokens, is_loopback, tokens_required

    required = tokens_required(host, settings.memoryd.server.auth, insecure)
    if required and not Tokens(settings.data_dir).issued():
        print(f"memoryd: listening on {host} with bearer tokens required, and none is issued yet: issue one with "
              "`memoryd agents token ID` (or `--admin`)", file=sys.stderr)
    elif not required and not is_loopback(host):
        print(f"memoryd: WARNING: listening on {host} without requiring tokens (--insecure)", file=sys.stderr)
    return required


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from mcp.server.mcpserver.exceptions import ToolError

    from memoryd.services.query.mcp import build_server, run_stdio
    from memoryd.services.session import promote_api

    mcp = build_server(settings, args.agent, _service(settings))
    promote_api.add_tools(mcp, settings, args.agent, promote_api.lazy_bus(settings, None), ToolError)
    if args.http:
        from memoryd.services.query.mcp import http_app

        server = settings.memoryd.server
        host = args.host or server.host
        app = http_app(mcp, settings, args.agent, host=host,
                       require_token=_tokens_required(settings, host, args.insecure))
        remote.serve(app, host, server.port + 1 if args.port is None else args.port, settings, announce=False,
                     what=f"MCP (streamable HTTP) for agent {args.agent}", path="/mcp")
        return 0
    return run_stdio(mcp)
