"""memory_search under concurrent clients, against a real ``memoryd serve`` on 127.0.0.1 (bench/query.py).

Each client is a thread with its own keep-alive HTTP connection that sends one request after
another, a new question each time (so no query embedding comes from the cache), until it has
sent its share of ``REQUESTS`` or ``SECONDS`` have passed. Every level (1 client, 8 clients)
runs ``ROUNDS`` times, alternating, since the machine's speed drifts over minutes: the
figures are the rounds' requests pooled, ``rps`` their count over the rounds' time. The
server's CPU time over the same rounds (``/proc/<pid>/stat``, its query processes included)
gives ``server_cores`` (CPU seconds per second) and ``cpu_ms`` per request; ``others_cores``
is what the rest of the machine (other processes, not the server nor these clients) used meanwhile, from
``/proc/stat``: on a shared box the server cannot use the cores others take.
``ratios.rps_if_every_core_busy`` is the most eight clients could get over one at the CPU a
request costs them: the cores over that CPU, over one client's requests/s (a search alone
that spreads over more than one core lowers it).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

#: The levels measured: one client alone, and eight at once (the issue's figures).
CLIENTS = (1, 8)
#: A level's round ends after this many seconds or requests, whichever comes first.
SECONDS = 15.0
REQUESTS = 1500
#: Rounds per level, alternating levels (1, 8, 1, 8): a drift of the machine's speed is shared.
ROUNDS = 2
#: Searches each query process answers before the first round: its model loaded, the vectors
#: paged in, its caches warm. (16 requests on 8 connections at once once left one of two processes
#: cold: the first round's first searches there took 300-400 ms, a third of the 8 clients' slowest 1 %.)
WARMUP = 4
#: How long the warm-up may take to reach every query process.
WARMUP_SECONDS = 60
#: How long ``memoryd serve`` may take to announce its address.
START_SECONDS = 120
#: A request that takes longer than this fails the run.
REQUEST_TIMEOUT_S = 60


@contextmanager
def served(state: Path) -> Iterator[tuple[str, int]]:
    """``memoryd serve`` on the state dir (loopback, any free port): → (its URL, its pid)."""
    env = dict(os.environ, MEMORYD_CONFIG=str(state / "memoryd.json"), MEMORYD_STATE_DIR=str(state))
    said = state / "serve.out"
    with said.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "serve", "--host", "127.0.0.1",
                                   "--port", "0"], env=env, stdout=out, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_SECONDS
        # "ready" comes once its query processes are started (serve.json comes before them)
        while "; ready" not in said.read_text():
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"memoryd serve did not say it was ready: {said.read_text()!r}")
            time.sleep(0.1)
        url = json.loads((state / "serve.json").read_text())["url"]
        assert urlsplit(url).hostname == "127.0.0.1", url
        yield url, server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)


def _cpu_seconds(pid: int) -> float:
    """CPU seconds of the server: the process and the query processes it started (utime + stime)."""
    total = 0.0
    for process in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # exited meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(c) for c in task.read_text().split()]
    return found


def _machine_busy_seconds() -> float:
    """CPU seconds all processes have used (user, nice, system, irq, softirq, steal)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")


def _ask(conn: http.client.HTTPConnection, question: str) -> tuple[int, dict]:
    """One memory_search of agent main on ``conn``: → (the HTTP status, the answer)."""
    conn.request("POST", "/v1/agents/main/memory_search", json.dumps({"query": question}),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def _client(url: str, asks: list[str], deadline: float, times: list[float], degraded: list[str]) -> None:
    """One client's loop: ``asks`` one after another on one connection, until the deadline; the
    reason of every answer that is not hybrid goes to ``degraded`` (counted, not hidden)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=REQUEST_TIMEOUT_S)
    try:
        for question in asks:
            if time.monotonic() > deadline:
                return
            started = time.perf_counter()
            status, answer = _ask(conn, question)
            times.append(time.perf_counter() - started)
            assert status == 200, answer
            if answer["mode"] != "hybrid":
                degraded.append(answer.get("reason") or answer["mode"])
    finally:
        conn.close()


def _round(url: str, clients: int, questions: Callable[[int, int], list[str]], seed: int,
           degraded: list[str]) -> tuple[list[float], float]:
    """One round of ``clients`` loops at once: → (each request's seconds, the round's seconds)."""
    share = REQUESTS // clients
    times: list[list[float]] = [[] for _ in range(clients)]
    deadline = time.monotonic() + SECONDS
    threads = [threading.Thread(target=_client, args=(url, questions(seed * 100 + c, share), deadline, times[c],
                                                      degraded)) for c in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SECONDS + 2 * REQUEST_TIMEOUT_S)
        assert not thread.is_alive(), "a client did not finish within its deadline"
    return [t for client in times for t in client], time.perf_counter() - started


def measure(state: Path, questions: Callable[[int, int], list[str]]) -> dict[str, dict[str, float]]:
    """rps, p50 and p99 (ms) per number of clients, the server's CPU per request, and how many
    answers were not hybrid (``keyword_only``: the embedding late past embedTimeoutMs)."""
    with served(state) as (url, pid):
        _warm(url, pid, questions)
        degraded: dict[int, list[str]] = {n: [] for n in CLIENTS}
        samples: dict[int, list[float]] = {n: [] for n in CLIENTS}
        spent = {n: 0.0 for n in CLIENTS}
        cpu = {n: 0.0 for n in CLIENTS}
        others = {n: 0.0 for n in CLIENTS}
        for r in range(ROUNDS):
            for n in CLIENTS:
                before, machine, mine = _cpu_seconds(pid), _machine_busy_seconds(), time.process_time()
                times, seconds = _round(url, n, questions, 1000 + r * 10 + n, degraded[n])
                cpu[n] += _cpu_seconds(pid) - before
                others[n] += _machine_busy_seconds() - machine - (_cpu_seconds(pid) - before) - (
                    time.process_time() - mine)
                samples[n] += times
                spent[n] += seconds
    out = {}
    for n in CLIENTS:
        ms = np.asarray(samples[n]) * 1000
        out[str(n)] = {"rps": round(len(ms) / spent[n], 1), "p50_ms": round(float(np.percentile(ms, 50)), 1),
                       "p99_ms": round(float(np.percentile(ms, 99)), 1), "n": len(ms),
                       "server_cores": round(cpu[n] / spent[n], 2), "cpu_ms": round(cpu[n] / len(ms) * 1000, 1),
                       "keyword_only": len(degraded[n]), "others_cores": round(others[n] / spent[n], 2)}
    one, many = out[str(CLIENTS[0])], out[str(CLIENTS[-1])]
    # the most `many` clients could reach over one with every core busy at their CPU per request
    bound = (os.cpu_count() or 1) * 1000 / many["cpu_ms"] / one["rps"]
    out["ratios"] = {"rps": round(many["rps"] / one["rps"], 2), "rps_if_every_core_busy": round(bound, 2),
                     "p99_over_p50_of_one": round(many["p99_ms"] / one["p50_ms"], 2)}
    return out


def _warm(url: str, pid: int, questions: Callable[[int, int], list[str]]) -> None:
    """A new connection at a time until each of the server's query processes (the first and the ones
    it started) has answered WARMUP searches on one: the process that answered is ``/healthz``'s pid."""
    processes = 1 + len(_children(pid))
    parts = urlsplit(url)
    answered: dict[int, int] = {}
    deadline = time.monotonic() + WARMUP_SECONDS
    for attempt in itertools.count():
        if len(answered) >= processes and min(answered.values()) >= WARMUP:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up reached {len(answered)} of {processes} query processes in "
                               f"{WARMUP_SECONDS} s: {answered} searches by pid")
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=REQUEST_TIMEOUT_S)
        try:
            conn.request("GET", "/healthz")
            who = json.loads(conn.getresponse().read())["pid"]
            if answered.get(who, 0) < WARMUP:
                for question in questions(900 + attempt, WARMUP):
                    _ask(conn, question)
                answered[who] = answered.get(who, 0) + WARMUP
        finally:
            conn.close()
