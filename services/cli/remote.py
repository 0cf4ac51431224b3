"""``memoryd search`` / ``get`` through the running query service, when one serves this installation.

A search in a new process would load the settings, numpy, the model and the agent's
vectors before answering; a running ``memoryd serve`` has them loaded and answers in
milliseconds. So the CLI first looks for ``<state>/serve.json`` (services/cli/locate.py) and
sends the request there — with nothing heavier imported than ``http.client`` — and falls
back to answering in-process when no server runs, it does not answer, or it wants a token
the CLI does not have. Both ways send the same body (``search_body`` / ``get_body``) and
print the same JSON. The request is one HTTP/1.1 exchange over a plain socket: the stdlib's
``http.client`` would cost more to import than the server takes to answer.
"""

from __future__ import annotations

import _socket
import argparse
import json
import sys

from memoryd.services.cli import locate
from memoryd.shared.config import environment
from memoryd.shared.exceptions import MemorydError

#: ``typing.TYPE_CHECKING`` without importing ``typing`` (5 ms of a `memoryd search` answered by a server);
#: type checkers treat any name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from memoryd.shared.config.settings import Settings

#: Seconds to connect to the server the state dir names: a live one on this host accepts at once.
CONNECT_TIMEOUT = 0.5
#: Seconds an answer may take once connected (the server's first search loads an agent's index).
ANSWER_TIMEOUT = 300.0
#: Exit codes of the CLI (services/cli/app.py): an error, a configuration error.
EXIT_ERROR, EXIT_CONFIG = 1, 2


def search_body(args: argparse.Namespace) -> dict[str, Any]:
    """The memory_search request of ``memoryd search``'s arguments, as the wire has it."""
    fields = {"query": args.query, "maxResults": args.max_results, "minScore": args.min_score, "fusion": args.fusion,
              "source": args.source, "after": getattr(args, "after", None),
              "before": getattr(args, "before", None), "asOf": getattr(args, "as_of", None),
              "explain": args.explain or None}
    return {k: v for k, v in fields.items() if v is not None}


def get_body(args: argparse.Namespace) -> dict[str, Any]:
    fields = {"path": args.path, "from": args.from_, "lines": args.lines}
    return {k: v for k, v in fields.items() if v is not None}


def ask(args: argparse.Namespace, tool: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """(HTTP status, JSON answer) from the running server; None when there is none to ask."""
    config = environment.config_file(getattr(args, "config", None))
    url = locate.running_server(environment.state_dir(getattr(args, "state_dir", None), config), config)
    if url is None:
        return None
    path = f"/v1/agents/{_quote(args.agent)}/{tool}"
    try:
        host, port = _address(url)
        status, payload = _post(host, port, path, json.dumps(body).encode())
        answer = json.loads(payload)
    except (OSError, ValueError, IndexError):
        return None  # gone or not answering: this process answers itself
    if status == 401:
        return None  # the server wants a token; the files are readable here without one
    return status, answer


def _address(url: str) -> tuple[str, int]:
    """(host, port) of the ``http://host:port`` a server announced (``[::1]`` for IPv6), parsed
    here: ``urllib.parse`` costs more to import (5 ms) than this command may add to the answer."""
    netloc = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = netloc.rpartition(":")
    return host.strip("[]"), int(port)


def _quote(segment: str) -> str:
    """``segment`` percent-encoded as one path segment (what ``urllib.parse.quote(s, safe='')`` does)."""
    return "".join(chr(b) if chr(b).isalnum() and b < 128 or b in b"-._~" else f"%{b:02X}"
                   for b in segment.encode("utf-8"))


def _post(host: str, port: int, path: str, body: bytes) -> tuple[int, bytes]:
    """POST ``body`` as JSON; → (status, response body). Raises OSError / ValueError on a bad exchange."""
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    sock = _connect(host, port)
    try:
        sock.settimeout(ANSWER_TIMEOUT)
        sock.sendall(request)
        received = []
        while data := sock.recv(1 << 16):
            received.append(data)
    finally:
        sock.close()
    head, _, payload = b"".join(received).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    if any(line.lower().replace(" ", "") == "transfer-encoding:chunked" for line in lines[1:]):
        payload = _unchunk(payload)
    return status, payload


def _connect(host: str, port: int) -> _socket.socket:
    """A connected TCP socket, from the C module: ``socket`` makes enums of every constant when
    imported (~9 ms, most of what this command would add to the server's answer). A bytes host:
    a str one is IDNA-encoded first, and importing that codec costs more than the answer."""
    error: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(host.encode("ascii", "ignore"), port, 0,
                                                                _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"no address for {host}")


def _unchunk(data: bytes) -> bytes:
    out = []
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out.append(rest[:size])
        data = rest[size + 2:]
    return b"".join(out)


def answered(args: argparse.Namespace, tool: str, body: dict[str, Any],
             show: Callable[[dict[str, Any]], None]) -> int | None:
    """Answer through the server: print (``show``) and → the exit code; None: answer in-process."""
    found = ask(args, tool, body)
    if found is None:
        return None
    status, answer = found
    if status == 200:
        show(answer)
        return 0
    error = answer.get("error", {}) if isinstance(answer, dict) else {}
    print(f"memoryd: {error.get('message', answer)}", file=sys.stderr)
    return EXIT_CONFIG if error.get("code") == "invalid_config" else EXIT_ERROR


def print_json(answer: dict[str, Any]) -> None:
    print(json.dumps(answer, ensure_ascii=False, indent=2))


def serve(app: Any, host: str, port: int, settings: Settings, *, announce: bool = True,
          what: str = "HTTP API", path: str = "", listening: Callable[[str], None] | None = None,
          processes: int = 1) -> None:
    """Run ``app`` under uvicorn on ``host:port`` (0: any free port), said on stdout once it
    listens; with ``announce``, noted in the state dir (``serve.json``) until it stops, for the
    CLI to find. A second announced server of one state dir is refused: it would take the
    first's note, and remove it on exit. ``listening`` is told the URL once it listens.
    ``processes`` > 1: as many processes listen on the port (services/cli/serveprocs.py); in one
    of those helpers this only listens there too and serves."""
    import signal
    import socket

    from memoryd.services.cli import servecores, serveprocs

    # uvicorn stops on SIGTERM, then raises the signal again once it has: by default that would
    # end the process before the finally blocks below ran (the address file withdrawn, the helpers stopped).
    signal.signal(signal.SIGTERM, _stopped)
    helper = serveprocs.inherited()
    if helper is not None:
        serveprocs.run(app, *helper)
        return
    running = locate.server_pid(settings.state_dir) if announce else None
    if running:
        raise MemorydError(f"a memoryd serve (pid {running}, {locate.server_url(settings.state_dir)}) already serves "
                           f"the state dir {settings.state_dir}: use it, stop it first, or start this one with "
                           "--another (a second server, not announced to the CLI)")
    try:
        sock = serveprocs.listen(host, port, shared=processes > 1)
    except OSError as exc:
        raise MemorydError(f"cannot listen on {host}:{port}: {exc.strerror} (another memoryd serve or up?): stop it, "
                           "or choose another port with --port or memoryd.server.port") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    url = f"http://{shown}:{bound}"
    if announce:
        locate.announce(settings.state_dir, url, settings.source_file)
    if listening is not None:
        listening(url)
    load = serveprocs.Load(processes) if processes > 1 else None
    cpus = servecores.machine_cpus()
    helpers = serveprocs.Helpers(sock, processes, load, cpus) if load is not None else None
    try:
        if helpers is not None:
            helpers.start()
        docs = f" (docs at {url}/docs)" if what == "HTTP API" else ""
        also = f" on {processes} processes" if helpers is not None else ""
        print(f"memoryd: {what} at {url}{path}{docs}{also}; ready", flush=True)
        serveprocs.run(app, sock, load, cpus=cpus)
    finally:
        if helpers is not None:
            helpers.stop()
        if announce:
            locate.withdraw(settings.state_dir)
        sock.close()


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(0)  # asked to stop (memoryd up, a service manager): the finally blocks run
