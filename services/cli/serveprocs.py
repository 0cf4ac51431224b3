"""``memoryd serve`` on several processes listening on one port.

A query process runs its searches' Python (the keyword side's rows and evidence, fusion,
snippets, the HTTP layer) under one GIL: with eight callers on two cores one process left
~11 % of the machine idle, its threads waiting for each other's GIL, at ~95 requests/s
(bench/query.py ``concurrency``). ``memoryd.server.processes`` (default: one per core, at
most ``d.SERVE_MAX_PROCESSES``) query processes listen on the port the first one bound, each
on its own socket (``SO_REUSEPORT``); the kernel hands each new connection to one of them.
Each process keeps its own indexes open, its own query model session (the weights mapped
from the machine's one copy: shared/embed/onnxshare.py) and its own caches; the index
files, the tokens and the sessions' files and Redis keys are what they share, as two nodes do.

The first process (the one ``memoryd serve`` started) binds, announces itself in the state
dir, publishes its address for the other nodes and starts the others (:class:`Helpers`):
``python -m memoryd.services.cli`` with its own arguments, told the address
(``MEMORYD_SERVE_ADDRESS``). It restarts a helper that exits (a crash, ``kill -9``) after
``d.SERVE_RESTART_DELAYS_S``, longer each time one dies within ``d.SERVE_STABLE_S`` of its
start; meanwhile the processes still running answer every new connection. When it stops, it
stops them (SIGTERM, then SIGKILL after ``d.SERVE_STOP_TIMEOUT_S``); a helper whose first
process is gone without a word (``kill -9``) is told by the kernel (``PR_SET_PDEATHSIG``) and
stops. No other server can join the port: the first process binds it once without
``SO_REUSEPORT`` before it binds it with (:func:`listen`).

Which process accepts a connection is the kernel's choice (a hash of the connection's
addresses): eight connections opened at once go 6/2 or worse about as often as 4/4, and a
keep-alive connection stays where it landed, so one process's GIL carries three quarters of
the load. :class:`Balance` evens it out: each process writes how many connections it holds
into a shared page (:class:`Load`), and a process holding more than one over the least
loaded answers its next response with ``Connection: close``; the client reconnects (HTTP
clients do, unasked) and the new connection lands again, on another process as likely as not.
"""

from __future__ import annotations

import ctypes
import json
import logging
import mmap
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from memoryd.services.cli.servecores import Cores
from memoryd.shared import defaults as d
from memoryd.shared.config import environment

log = logging.getLogger("memoryd.serve")

#: A helper's environment: the address to listen on (JSON [host, port]), the first process's pid,
#: the shared page's descriptor (:class:`Load`), the helper's slot in it and the cores to share
#: (the first process's when it started: a helper started while it ran on its own cores inherits those).
ADDRESS_ENV, PARENT_ENV, LOAD_ENV, SLOT_ENV, CPUS_ENV = environment.SERVE_HELPER
_PR_SET_PDEATHSIG = 1


def count(configured: int | str) -> int:
    """Query processes for ``memoryd.server.processes``: "auto" = one per core, at most
    ``d.SERVE_MAX_PROCESSES``; one where the shared page cannot be made (``memfd_create``: Linux)."""
    if not hasattr(os, "memfd_create"):
        return 1
    if configured == "auto":
        return max(1, min(os.cpu_count() or 1, d.SERVE_MAX_PROCESSES))
    return int(configured)


class Load:
    """How many connections each query process holds and how many requests it is answering: two
    int32 per process in a shared page (a memfd the helpers inherit), connections first. A process
    not listening (starting, or dead and not replaced yet) holds ``ABSENT`` connections. Written by
    its own process (and by the first when it finds it dead); read by all, unlocked (a count a
    moment old only delays the balancing by one response, the choice of cores by one request)."""

    ABSENT = -1

    def __init__(self, processes: int) -> None:
        self.fd = os.memfd_create("memoryd-serve-load", 0)
        os.ftruncate(self.fd, 2 * 4 * processes)
        self._map()

    @classmethod
    def inherit(cls, fd: int) -> Load:
        """The page a helper was handed (its descriptor), every process's slots in it."""
        load = cls.__new__(cls)
        load.fd = fd
        load._map()
        return load

    def _map(self) -> None:
        self.page = mmap.mmap(self.fd, os.fstat(self.fd).st_size)
        both = memoryview(self.page).cast("i")
        self.counts = both[:len(both) // 2]
        self.answering = both[len(both) // 2:]

    def set(self, slot: int, connections: int) -> None:
        self.counts[slot] = connections

    def gone(self, slot: int) -> None:
        """Process ``slot`` does not listen (starting, or dead): no connections, no requests."""
        self.counts[slot] = self.ABSENT
        self.answering[slot] = 0

    def busier_than_the_rest(self, slot: int) -> bool:
        """Whether process ``slot`` holds more than one connection over the least loaded one listening."""
        listening = [c for c in self.counts.tolist() if c != self.ABSENT]
        return bool(listening) and self.counts[slot] > min(listening) + 1

    def others_answering(self, slot: int) -> bool:
        """Whether a process other than ``slot`` is answering a request now."""
        return any(n > 0 for other, n in enumerate(self.answering.tolist()) if other != slot)


class Balance:
    """ASGI middleware: keeps this process's connections and requests in :class:`Load`, closes a
    connection after its response while this process holds more than its share, and moves the
    process onto its own cores while the others answer too (:class:`~memoryd.services.cli.servecores.Cores`)."""

    def __init__(self, app: Any, load: Load, slot: int, cores: Cores) -> None:
        self.app = app
        self.load = load
        self.slot = slot
        self.cores = cores
        self.connections: set[Any] = set()  # uvicorn's live connections of this process (set by :func:`run`)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def answer(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.load.set(self.slot, len(self.connections))
                if self.load.busier_than_the_rest(self.slot):
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
                    self.load.set(self.slot, len(self.connections) - 1)
            await send(message)

        self.load.answering[self.slot] += 1  # this process's event loop alone writes its slot
        self.cores.follow()
        try:
            await self.app(scope, receive, answer)
        finally:
            self.load.answering[self.slot] -= 1


def run(app: Any, sock: socket.socket, load: Load | None = None, slot: int = 0,
        cpus: frozenset[int] = frozenset()) -> None:
    """uvicorn on the listening ``sock`` until SIGTERM or SIGINT; with ``load``, as process ``slot``
    of several (:class:`Balance`), sharing ``cpus`` (the first process's cores when it started)."""
    import uvicorn

    balance = None
    if load is not None:
        cores = Cores(slot, len(load.counts), cpus, lambda: load.others_answering(slot))
        balance = Balance(app, load, slot, cores)
    server = uvicorn.Server(uvicorn.Config(balance or app, log_level="warning"))
    if balance is not None:
        balance.connections = server.server_state.connections
        balance.load.set(slot, 0)  # listening: the others may send connections this way
    server.run(sockets=[sock])


def inherited() -> tuple[socket.socket, Load, int, frozenset[int]] | None:
    """In a helper: the listening socket of the first process, the shared :class:`Load`, this
    helper's slot in it and the cores the first process had to share (and the helper bound to the
    first process's life); else None."""
    told = environment.serve_helper()
    if told is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)  # the first process gone: this one stops
    except (OSError, AttributeError):  # not Linux: the helper notices on its next check instead
        pass
    if str(os.getppid()) != told[PARENT_ENV]:
        raise SystemExit(0)  # the first process died before the signal was asked for
    host, port = json.loads(told[ADDRESS_ENV])
    cpus = frozenset(int(cpu) for cpu in told[CPUS_ENV].split(","))
    return join(host, port), Load.inherit(int(told[LOAD_ENV])), int(told[SLOT_ENV]), cpus


def listen(host: str, port: int, shared: bool = False) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port); ``shared``: one the other query
    processes of this server bind too (``SO_REUSEPORT``: the kernel spreads new connections over
    them). OSError if the port is taken — by anyone: a port another server shares is refused,
    since it is first bound once without ``SO_REUSEPORT`` (a second memoryd of the same user
    must never join this one's port and take a share of its connections)."""
    if shared:
        probe = _bound(host, port, reuse_port=False)
        port = probe.getsockname()[1]
        probe.close()
    sock = _bound(host, port, reuse_port=shared)
    sock.listen(2048)  # connections wait in the backlog until uvicorn accepts them
    return sock


def join(host: str, port: int) -> socket.socket:
    """In a helper: a listening socket of its own on the first process's port."""
    sock = _bound(host, port, reuse_port=True)
    sock.listen(2048)
    return sock


def _bound(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Accepted connections inherit it: without it each response waited ~40 ms for the client's
        # delayed ACK (Nagle), as asyncio's own listening sockets never do (bench/agents.py).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class Helpers:
    """The other query processes of one ``memoryd serve``, kept running until :meth:`stop`."""

    def __init__(self, sock: socket.socket, count: int, load: Load, cpus: frozenset[int]) -> None:
        self.sock = sock
        self.count = count
        self.load = load
        self.cpus = cpus
        self.argv = [sys.executable, "-m", "memoryd.services.cli", *sys.argv[1:]]  # this serve's own arguments
        self.running: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watch = threading.Thread(target=self._keep, name="memoryd-serve-helpers", daemon=True)

    def start(self) -> None:
        with self._lock:
            self.running = [self._spawn(slot) for slot in range(1, self.count)]
        self._watch.start()

    def _spawn(self, slot: int) -> subprocess.Popen[bytes]:
        self.load.gone(slot)  # until it listens
        host, port = self.sock.getsockname()[:2]
        env = environment.for_children(**{ADDRESS_ENV: json.dumps([host, port]), PARENT_ENV: str(os.getpid()),
                                          LOAD_ENV: str(self.load.fd), SLOT_ENV: str(slot),
                                          CPUS_ENV: ",".join(map(str, sorted(self.cpus)))})
        return subprocess.Popen(self.argv, env=env, pass_fds=(self.load.fd,),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def _keep(self) -> None:
        """Restart each helper that exits, after a delay that grows while they die young."""
        started = {id(p): time.monotonic() for p in self.running}
        young = 0  # helpers in a row that died within d.SERVE_STABLE_S of their start
        while not self._stopping.wait(d.SERVE_WATCH_INTERVAL_S):
            with self._lock:
                dead = [p for p in self.running if p.poll() is not None]
            for process in dead:
                slot = self.running.index(process) + 1
                self.load.gone(slot)
                lived = time.monotonic() - started.pop(id(process), 0.0)
                young = young + 1 if lived < d.SERVE_STABLE_S else 0
                delay = d.SERVE_RESTART_DELAYS_S[min(young, len(d.SERVE_RESTART_DELAYS_S) - 1)]
                log.warning("query process %d exited with %s after %.0f s; starting another in %.1f s (the other "
                            "processes answer meanwhile)", process.pid, process.returncode, lived, delay)
                if self._stopping.wait(delay):
                    return
                with self._lock:
                    fresh = self._spawn(slot)
                    self.running[slot - 1] = fresh
                started[id(fresh)] = time.monotonic()

    def stop(self) -> None:
        """SIGTERM every helper; SIGKILL what is left after ``d.SERVE_STOP_TIMEOUT_S``."""
        self._stopping.set()
        if self._watch.is_alive():
            self._watch.join(timeout=d.SERVE_STOP_TIMEOUT_S)
        with self._lock:
            running = list(self.running)
        for process in running:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + d.SERVE_STOP_TIMEOUT_S
        for process in running:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                log.warning("query process %d did not stop within %.0f s of SIGTERM; killed", process.pid,
                            d.SERVE_STOP_TIMEOUT_S)
                process.kill()
                process.wait(timeout=d.SERVE_STOP_TIMEOUT_S)
