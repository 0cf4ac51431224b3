"""Searches take turns on the index, one per core, first come first served (services/query/turns.py):
a search waits its turn at most the deadline, then fails ``busy`` naming the wait; a search waiting
for its query's embedding holds no turn."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from memoryd.services.query import engine
from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.services.query.turns import SearchBusy, Turns
from memoryd.shared import defaults as d
from tests.openai_stub import OpenAIStub
from tests.support import wait_until
from tests.test_query_resilience import _settings, serve


def test_turns_are_served_first_come_first_served() -> None:
    turns = Turns(1, timeout=30)
    order: list[int] = []
    release = threading.Event()

    def search(i: int) -> None:
        with turns.turn():
            order.append(i)
            if i == 0:
                release.wait(30)

    with ThreadPoolExecutor(max_workers=6) as pool:
        done = [pool.submit(search, 0)]
        wait_until(lambda: order == [0], timeout=10, what="the first search to hold the one turn")
        for i in range(1, 6):
            done.append(pool.submit(search, i))
            wait_until(lambda queued=i: len(turns._waiting) == queued, timeout=10, what=f"search {i} to queue")
        release.set()
        for future in done:
            future.result(timeout=30)
    assert order == [0, 1, 2, 3, 4, 5]


def test_a_search_coming_back_for_its_second_turn_goes_ahead_of_those_waiting() -> None:
    """A search that gave its turn back to wait for its embedding (engine.search's late path)
    takes its next turn ``back``: it never waits in line twice."""
    turns = Turns(1, timeout=30)
    order: list[str] = []
    release = threading.Event()
    with turns.turn() as earlier:  # "back"'s first turn, before the others came
        pass

    def search(name: str, back: int | None = None) -> None:
        with turns.turn(back=back):
            order.append(name)
            if name == "holder":
                release.wait(30)

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = [pool.submit(search, "holder")]
        wait_until(lambda: order == ["holder"], timeout=10, what="the first search to hold the one turn")
        for queued, name in enumerate(("new-1", "new-2"), start=1):
            done.append(pool.submit(search, name))
            wait_until(lambda queued=queued: len(turns._waiting) == queued, timeout=10, what=f"{name} to queue")
        done.append(pool.submit(search, "back", earlier))
        wait_until(lambda: len(turns._waiting) == 3, timeout=10, what="the returning search to queue")
        release.set()
        for future in done:
            future.result(timeout=30)
    assert order == ["holder", "back", "new-1", "new-2"]


def test_searches_coming_back_together_are_served_in_the_order_they_first_came() -> None:
    """The model embeds the questions waiting in one run, so their searches come back together:
    they take their second turns in the order of their first (before: the last back went first)."""
    turns = Turns(1, timeout=30)
    tickets = []
    for _ in range(3):
        with turns.turn() as ticket:
            tickets.append(ticket)
    order: list[int] = []
    release = threading.Event()

    def search(back: int | None) -> None:
        with turns.turn(back=back):
            order.append(back if back is not None else -1)
            if back is None:
                release.wait(30)

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = [pool.submit(search, None)]
        wait_until(lambda: order == [-1], timeout=10, what="a new search to hold the one turn")
        for queued, back in enumerate(reversed(tickets), start=1):  # back in the reverse order
            done.append(pool.submit(search, back))
            wait_until(lambda queued=queued: len(turns._waiting) == queued, timeout=10, what=f"search {back} to queue")
        release.set()
        for future in done:
            future.result(timeout=30)
    assert order == [-1, *tickets]


def test_a_search_that_waits_past_the_deadline_fails_busy_and_says_what_it_waited_for() -> None:
    turns = Turns(2, timeout=0.3)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with turns.turn():
            held.set()
            release.wait(30)

    with ThreadPoolExecutor(max_workers=2) as pool:
        holders = [pool.submit(hold) for _ in range(2)]
        wait_until(lambda: turns._free == 0, timeout=10, what="both turns to be held")
        started = time.monotonic()
        with pytest.raises(SearchBusy, match=r"waited 0.3 s for its turn on the index behind 2 other searches"), \
                turns.turn():
            pass
        assert 0.25 <= time.monotonic() - started < 5
        assert not turns._waiting  # the one that gave up left the line
        release.set()
        for holder in holders:
            holder.result(timeout=30)
    with turns.turn():  # the turns are free again
        assert turns._free == 1


@pytest.fixture
def stub() -> OpenAIStub:
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def one_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d, "SEARCHES_AT_ONCE", 1)
    monkeypatch.setattr(d, "SEARCH_TURN_TIMEOUT_S", 1.0)


def test_a_search_waiting_for_its_embedding_holds_no_turn(tmp_path: Path, stub: OpenAIStub, one_turn: None) -> None:
    """One turn for the whole service; agent "slow"'s provider hangs: its search waits for the
    embedding (up to 20 s) while another agent's searches take the turn and answer with vectors."""
    settings = _settings(tmp_path, stub, embedTimeoutMs=20_000)
    service = QueryService(settings)
    try:
        stub.set(embeddings="hang")
        with ThreadPoolExecutor(max_workers=1) as waiting:
            slow = waiting.submit(service.search, "slow", SearchRequest(query="double booking"))
            wait_until(lambda: len(stub.requests("/embeddings")) >= 1, timeout=30, what="the slow agent's embedding")
            for i in range(3):
                other = service.search("other", SearchRequest(query=f"the deploy window {i}"))
                assert other.mode == "hybrid" and other.results
            assert not slow.done()
            stub.set(embeddings="ok")
            assert slow.result(timeout=60).mode == "hybrid"
    finally:
        service.close()


def test_an_overloaded_server_answers_503_busy(tmp_path: Path, stub: OpenAIStub, one_turn: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A search that holds the one turn (held here inside its scoring) makes the next wait 1 s for
    it over HTTP, then answer 503 ``busy``; the server answers again once the turn is free."""
    settings = _settings(tmp_path, stub)
    inside, release = threading.Event(), threading.Event()
    score = engine.QueryService._score

    def long_search(self: QueryService, *args: object) -> object:
        if not inside.is_set():
            inside.set()
            release.wait(30)
        return score(self, *args)

    monkeypatch.setattr(engine.QueryService, "_score", long_search)
    with serve(settings) as base, httpx.Client(base_url=base, timeout=60) as client, \
            ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(client.post, "/v1/agents/other/memory_search", json={"query": "deploy window"})
        assert inside.wait(30)
        busy = client.post("/v1/agents/other/memory_search", json={"query": "double booking"})
        assert busy.status_code == 503
        assert busy.json()["error"]["code"] == "busy" and "waited 1 s for its turn" in busy.json()["error"]["message"]
        release.set()
        assert first.result(timeout=60).status_code == 200
        again = client.post("/v1/agents/other/memory_search", json={"query": "double booking"})
        assert again.status_code == 200 and again.json()["results"]


def test_the_query_service_hands_the_gil_over_every_millisecond(tmp_path: Path, stub: OpenAIStub) -> None:
    """A search thread back from SQLite, numpy or ONNX Runtime waits for the GIL at most this long
    (Python's default is 5 ms, a third of a search)."""
    before = sys.getswitchinterval()
    service = QueryService(_settings(tmp_path, stub))
    try:
        assert sys.getswitchinterval() == pytest.approx(d.QUERY_SWITCH_INTERVAL_S) != pytest.approx(0.005)
    finally:
        service.close()
        sys.setswitchinterval(before)
