"""``memoryd serve`` on several query processes (services/cli/serveprocs.py), run for real: each
answers, connections end evenly spread, a killed one is replaced while the others answer, stopping
the server stops them all, and one whose first process dies stops by itself; no other server can
take a share of the port; while several answer at once each keeps to cores of its own, and one
answering alone gets them all back (services/cli/servecores.py)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from retrieval_set import build
from support import wait_until

from memoryd.services.cli import locate, servecores, serveprocs
from memoryd.shared.config.settings import Settings

#: Deadlines (seconds): a liveness bound each, never a timing claim.
START_S = 90
GONE_S = 30


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return build(tmp_path_factory.mktemp("processes"), provider="hash")


class Served:
    def __init__(self, settings: Settings, processes: int, *extra: str) -> None:
        self.log = settings.state_dir / f"serve-{processes}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memoryd.services.cli", "serve", "--port", "0", "--processes", str(processes),
             "--config", settings.source_file or "", "--state-dir", str(settings.state_dir), *extra],
            stdout=subprocess.DEVNULL, stderr=self.log.open("wb"))
        announced = settings.state_dir / locate.SERVER_FILE

        def ours() -> dict | None:
            try:
                note = json.loads(announced.read_text())
            except (OSError, ValueError):
                return None
            return note if note["pid"] == self.process.pid else None

        url = wait_until(ours, timeout=START_S, what="this server's serve.json")["url"]
        self.host, self.port = url.split("//")[1].rsplit(":", 1)[0], int(url.rsplit(":", 1)[1])

    def helpers(self) -> list[int]:
        return [c.pid for c in psutil.Process(self.process.pid).children() if c.is_running()
                and c.status() != psutil.STATUS_ZOMBIE]

    def ask(self, path: str = "/healthz", body: dict | None = None,
            conn: http.client.HTTPConnection | None = None) -> dict:
        """One request, on ``conn`` or a new connection."""
        own = conn is None
        conn = conn or http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            if body is None:
                conn.request("GET", path)
            else:
                conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = json.loads(response.read())
            assert response.status == 200, answer
            return answer
        finally:
            if own:
                conn.close()

    def pids_seen(self, want: set[int]) -> set[int]:
        """The processes that answered new connections until all of ``want`` did (a helper answers
        once it has started and listens; new connections land by the kernel's hash)."""
        seen: set[int] = set()

        def all_seen() -> bool:
            seen.add(self.ask()["pid"])
            return want <= seen

        wait_until(all_seen, timeout=START_S, interval=0.01, what=f"answers from each of {sorted(want)}")
        return seen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=GONE_S)


@pytest.fixture
def served(settings: Settings) -> Iterator[Served]:
    server = Served(settings, 2)
    try:
        yield server
    finally:
        server.stop()


def test_each_query_process_answers_the_same_search(served: Served) -> None:
    wait_until(lambda: len(served.helpers()) == 1, timeout=START_S, what="the helper process")
    everyone = {served.process.pid, *served.helpers()}
    assert served.pids_seen(everyone) == everyone
    answers = {}
    for _ in range(200):
        conn = http.client.HTTPConnection(served.host, served.port, timeout=60)
        try:
            pid = served.ask(conn=conn)["pid"]
            if pid not in answers:
                answers[pid] = served.ask("/v1/agents/main/memory_search", {"query": "E-404"}, conn=conn)
        finally:
            conn.close()
        if len(answers) == 2:
            break
    first, second = answers.values()
    assert first["results"] and first == second


def test_connections_opened_at_once_end_evenly_spread(served: Served) -> None:
    """Eight keep-alive connections opened together land where the kernel puts them (6/2 as
    often as 4/4); a process holding more than its share closes one after its answer, the
    client reconnects, and within a few rounds each process holds four."""
    helper = wait_until(served.helpers, timeout=START_S, what="the helper process")[0]
    served.pids_seen({helper})  # listening
    conns = [http.client.HTTPConnection(served.host, served.port, timeout=60) for _ in range(8)]
    barrier = threading.Barrier(8)
    landed: list[int] = [0] * 8

    def first(i: int) -> None:
        barrier.wait(timeout=30)
        landed[i] = served.ask(conn=conns[i])["pid"]

    threads = [threading.Thread(target=first, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    rounds = [Counter(landed)]
    for _ in range(30):
        rounds.append(Counter(served.ask(conn=conn)["pid"] for conn in conns))
        if sorted(rounds[-1].values()) == [4, 4]:
            break
    for conn in conns:
        conn.close()
    assert sorted(rounds[-1].values()) == [4, 4], rounds


def test_a_killed_query_process_is_replaced_and_searches_go_on(served: Served) -> None:
    helper = wait_until(served.helpers, timeout=START_S, what="the helper process")[0]
    os.kill(helper, signal.SIGKILL)
    # meanwhile every new connection is answered, by the process still there
    for _ in range(20):
        assert served.ask("/v1/agents/main/memory_search", {"query": "E-404"})["results"]
    fresh = wait_until(lambda: [p for p in served.helpers() if p != helper], timeout=GONE_S,
                       what="a new query process in place of the killed one")
    assert fresh[0] in served.pids_seen({fresh[0]})
    assert f"query process {helper} exited with -9" in served.log.read_text()


def test_stopping_the_server_stops_every_query_process(settings: Settings) -> None:
    server = Served(settings, 3)
    helpers = wait_until(lambda: len(server.helpers()) == 2 and server.helpers(), timeout=START_S,
                         what="two helper processes")
    server.stop()
    assert server.process.returncode == 0
    wait_until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                               for p in helpers), timeout=GONE_S, what="the helpers to stop with the server")
    assert not (settings.state_dir / locate.SERVER_FILE).exists()


def test_a_query_process_stops_when_its_first_process_is_killed(settings: Settings) -> None:
    server = Served(settings, 2)
    try:
        helper = wait_until(server.helpers, timeout=START_S, what="the helper process")[0]
        server.process.kill()  # no SIGTERM, no finally: the kernel tells the helper (PR_SET_PDEATHSIG)
        server.process.wait(timeout=GONE_S)
        wait_until(lambda: not psutil.pid_exists(helper) or psutil.Process(helper).status() == psutil.STATUS_ZOMBIE,
                   timeout=GONE_S, what="the helper to stop after its first process was killed")
    finally:
        server.stop()
        (settings.state_dir / locate.SERVER_FILE).unlink(missing_ok=True)  # the killed server's note


def test_no_other_server_can_take_a_share_of_the_port(served: Served, settings: Settings, tmp_path: Path) -> None:
    """The port is shared with SO_REUSEPORT among this server's processes only: a second server (of
    the same user, with processes of its own) asking for it is refused, not let in beside them."""
    other = subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", "serve", "--port", str(served.port), "--processes", "2",
         "--another", "--config", settings.source_file or "", "--state-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert other.returncode != 0
    assert f"cannot listen on 127.0.0.1:{served.port}" in other.stderr


def test_the_busiest_process_is_the_one_told_to_close() -> None:
    load = serveprocs.Load(3)
    for slot, connections in enumerate((5, 3, 4)):
        load.set(slot, connections)
    assert [load.busier_than_the_rest(slot) for slot in range(3)] == [True, False, False]
    load.set(0, 4)
    assert not any(load.busier_than_the_rest(slot) for slot in range(3))
    shared = serveprocs.Load.inherit(os.dup(load.fd))  # what a helper maps from the descriptor it inherits
    load.set(1, 9)
    assert shared.busier_than_the_rest(1)
    load.set(1, serveprocs.Load.ABSENT)  # a helper starting or dead: not the least loaded
    load.set(2, 1)
    assert load.busier_than_the_rest(0) and not load.busier_than_the_rest(2)
    assert shared.busier_than_the_rest(0)  # every slot, not only those up to the helper's own


def test_auto_is_one_process_per_core_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert serveprocs.count("auto") == 2 and serveprocs.count(1) == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert serveprocs.count("auto") == serveprocs.d.SERVE_MAX_PROCESSES


def _threads_cores(pid: int) -> set[frozenset[int]]:
    """The distinct sets of cores the threads of process ``pid`` may run on."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.add(frozenset(os.sched_getaffinity(int(task.name))))
        except ProcessLookupError:  # the thread ended meanwhile
            continue
    return found


def test_a_process_keeps_to_its_own_cores_only_while_another_answers() -> None:
    """Every thread of the process moves (one started later too) while another process answers or
    did within the hold, and back onto every core once none has: the real ``sched_setaffinity``."""
    cpus = servecores.machine_cpus()
    load = serveprocs.Load(2)
    cores = servecores.Cores(1, 2, cpus, lambda: load.others_answering(1), hold=0.5)
    own = frozenset(sorted(cpus)[1::2] or sorted(cpus)[:1])
    stop = threading.Event()
    early = threading.Thread(target=stop.wait)
    early.start()
    try:
        cores.follow()
        assert _threads_cores(os.getpid()) == {cpus}  # nobody else answers: every core
        load.answering[0] = 1
        cores.follow()
        later = threading.Thread(target=stop.wait)
        later.start()
        assert _threads_cores(os.getpid()) == {own}
        assert len(cpus) < 2 or own != cpus
        load.answering[0] = 0
        cores.follow()
        assert _threads_cores(os.getpid()) == {own}  # within the hold: stays
        time.sleep(0.6)
        cores.follow()
        assert _threads_cores(os.getpid()) == {cpus}
        load.answering[0] = 2
        load.gone(0)  # a process found dead answers nothing
        cores.follow()
        assert _threads_cores(os.getpid()) == {cpus}
    finally:
        servecores.place(cpus)
        stop.set()


def test_query_processes_answering_together_each_keep_to_their_own_cores(served: Served) -> None:
    """Eight clients searching at once: both processes, every thread, on cores of their own (on
    two cores: one each); after, one client alone: the process answering it on every core again."""
    helper = wait_until(served.helpers, timeout=START_S, what="the helper process")[0]
    served.pids_seen({helper, served.process.pid})
    cpus = servecores.machine_cpus()
    shares = {frozenset(sorted(cpus)[slot::2] or sorted(cpus)[:1]) for slot in range(2)}
    busy = threading.Event()
    failures: list[BaseException] = []

    def client() -> None:
        conn = http.client.HTTPConnection(served.host, served.port, timeout=60)
        try:
            while not busy.is_set():
                served.ask("/v1/agents/main/memory_search", {"query": "E-404 ferry"}, conn=conn)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)
        finally:
            conn.close()

    clients = [threading.Thread(target=client) for _ in range(8)]
    for thread in clients:
        thread.start()
    try:
        placed = wait_until(lambda: [_threads_cores(p) for p in (served.process.pid, helper)]
                            if all(len(_threads_cores(p)) == 1 for p in (served.process.pid, helper))
                            and {frozenset().union(*_threads_cores(p)) for p in (served.process.pid, helper)} == shares
                            else None, timeout=60, interval=0.1,
                            what=f"both query processes, each on a share of the cores {sorted(cpus)}")
    finally:
        busy.set()
        for thread in clients:
            thread.join(timeout=60)
    assert not failures, failures
    assert len(cpus) < 2 or all(share != {cpus} for share in placed)
    conn = http.client.HTTPConnection(served.host, served.port, timeout=60)
    try:
        alone = served.ask(conn=conn)["pid"]
        time.sleep(servecores.d.SERVE_CORES_HOLD_S + 0.2)
        served.ask("/v1/agents/main/memory_search", {"query": "E-404 ferry"}, conn=conn)
        assert served.ask(conn=conn)["pid"] == alone  # the same keep-alive connection
        assert _threads_cores(alone) == {cpus}
    finally:
        conn.close()


def test_a_query_process_started_while_the_first_keeps_to_its_core_gets_every_core_alone(settings: Settings) -> None:
    """A helper replaced while the first process keeps to its share (a third process answering
    meanwhile) inherits that share from it: it is told the server's cores (``MEMORYD_SERVE_CPUS``),
    and alone it runs on all of them again."""
    served = Served(settings, 3)
    cpus = servecores.machine_cpus()
    busy = threading.Event()

    def client() -> None:
        conn = http.client.HTTPConnection(served.host, served.port, timeout=60)
        try:
            while not busy.is_set():
                try:
                    served.ask("/v1/agents/main/memory_search", {"query": "E-404 ferry"}, conn=conn)
                except (OSError, http.client.HTTPException):  # the killed helper's connections
                    conn.close()
        finally:
            conn.close()

    clients = [threading.Thread(target=client) for _ in range(8)]
    conn = None
    try:
        helpers = wait_until(lambda: len(served.helpers()) == 2 and served.helpers(), timeout=START_S,
                             what="two helper processes")
        served.pids_seen({served.process.pid, *helpers})
        for thread in clients:
            thread.start()
        wait_until(lambda: len(_threads_cores(served.process.pid)) == 1
                   and _threads_cores(served.process.pid) != {cpus}, timeout=60, interval=0.1,
                   what="the first process on its own share of the cores")
        os.kill(helpers[0], signal.SIGKILL)
        fresh = wait_until(lambda: [p for p in served.helpers() if p not in helpers], timeout=GONE_S,
                           what="a new query process in place of the killed one")[0]
        born = _threads_cores(fresh)
        assert len(cpus) < 2 or {cpus} != born, born  # started on the first process's share
        served.pids_seen({fresh})
        busy.set()
        for thread in clients:
            thread.join(timeout=60)
        for _ in range(200):  # a connection the new process answers
            conn = http.client.HTTPConnection(served.host, served.port, timeout=60)
            if served.ask(conn=conn)["pid"] == fresh:
                break
            conn.close()
        time.sleep(servecores.d.SERVE_CORES_HOLD_S + 0.2)
        served.ask("/v1/agents/main/memory_search", {"query": "E-404 ferry"}, conn=conn)
        assert served.ask(conn=conn)["pid"] == fresh
        assert _threads_cores(fresh) == {cpus}
    finally:
        busy.set()
        if conn is not None:
            conn.close()
        served.stop()
