"""Who answers for an agent (services/query/placement.py), on a real Redis: Redis is asked by an
agent's first search, then by the query process's own thread every ``PLACEMENT_CACHE_SECONDS``,
never by the searches after; a new owner is followed once the thread has asked; a Redis that
hangs or is gone holds no search."""

from __future__ import annotations

import logging
import time

import pytest
import redis
from support import silent_redis, wait_until

from memoryd.services.query import placement as placement_module
from memoryd.services.query.placement import Placement, Route
from memoryd.shared.runtime.lease import Leases


def test_the_owner_is_asked_by_a_thread_and_a_new_owner_followed_after_it(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement_module.d, "PLACEMENT_CACHE_SECONDS", 1.0)
    conn = redis.Redis.from_url(redis_url)
    n2, n3 = Leases(conn, "ns", "n2"), Leases(conn, "ns", "n3")
    n2.hold("a")
    n2.publish_address("http://127.0.0.1:9002")
    n3.publish_address("http://127.0.0.1:9003")
    asked = time.monotonic()  # its thread asks again a period after it is made, and Redis is first asked after
    here = Placement(conn, "ns", "n1")
    try:
        assert here.route("a", forwarded=False).address == "http://127.0.0.1:9002"
        n2.release("a")
        n3.hold("a")
        # until the thread asks again, searches go by what Redis said: they do not ask it themselves
        assert here.route("a", forwarded=False).address == "http://127.0.0.1:9002"
        assert time.monotonic() - asked < 1.0
        route = wait_until(lambda: (r := here.route("a", forwarded=False)).address == "http://127.0.0.1:9003" and r,
                           timeout=5, what="the new owner n3 followed")
        assert time.monotonic() - asked >= 1.0 and route.unavailable is None
        n3.release("a")
        wait_until(lambda: here.route("a", forwarded=False).unavailable, timeout=5,
                   what="no owner: answered here, and said why")
    finally:
        here.close()


def test_a_redis_that_hangs_holds_no_search_and_is_followed_again_after(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement_module.d, "PLACEMENT_CACHE_SECONDS", 0.2)
    conn = redis.Redis.from_url(redis_url)
    n2 = Leases(conn, "ns", "n2")
    n2.hold("a")
    n2.publish_address("http://127.0.0.1:9002")
    here = placement_module.connect(redis_url, "ns", "n1")
    admin = redis.Redis.from_url(redis_url)
    try:
        assert here.route("a", forwarded=False).address == "http://127.0.0.1:9002"
        admin.execute_command("CLIENT", "PAUSE", 4000, "ALL")  # every client's command waits 4 s
        paused = time.monotonic()
        routes = [here.route("a", forwarded=False) for _ in range(50)]
        assert time.monotonic() - paused < 4.0  # answered while Redis held every command
        assert {r.address for r in routes} == {"http://127.0.0.1:9002"}
        # the thread timed out meanwhile (REDIS_TIMEOUT_SECONDS): searches are answered here until Redis is back
        wait_until(lambda: here.route("a", forwarded=False).address is None, timeout=10,
                   what="searches answered here once the thread found Redis gone")
        admin.execute_command("CLIENT", "UNPAUSE")
        wait_until(lambda: here.route("a", forwarded=False).address == "http://127.0.0.1:9002", timeout=10,
                   what="routing to the owner again once Redis answers")
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        here.close()


def test_once_redis_is_found_gone_searches_are_answered_here_without_waiting_for_it() -> None:
    """A "Redis" that takes connections and never answers (a socket nobody reads): the first search
    waits out the 1 s timeout; the ones after do not try it again (the thread does)."""
    with silent_redis() as url:
        here = placement_module.connect(url, "ns", "n1", timeout=1)
        try:
            first = time.monotonic()
            assert here.route("a", forwarded=False) == Route()
            assert time.monotonic() - first >= 1.0  # it did wait for the hung one
            after = time.monotonic()
            assert [here.route(agent, forwarded=False) for agent in ("a", "b", "c") * 10] == [Route()] * 30
            assert time.monotonic() - after < 1.0  # none of the 30 waited out the timeout again
        finally:
            here.close()


def test_a_redis_found_again_before_any_agent_is_known_is_said_in_the_log(
        redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The first search finds Redis gone (every command held 1.5 s, the call's timeout 1 s), so no
    agent is known; the thread's ping finds it again, says so, and the agent is routed to its owner."""
    monkeypatch.setattr(placement_module.d, "PLACEMENT_CACHE_SECONDS", 0.2)
    conn = redis.Redis.from_url(redis_url)
    n2 = Leases(conn, "ns", "n2")
    n2.hold("a")
    n2.publish_address("http://127.0.0.1:9002")
    caplog.set_level(logging.WARNING, logger="memoryd.placement")
    admin = redis.Redis.from_url(redis_url)
    here = placement_module.connect(redis_url, "ns", "n1", timeout=1)
    try:
        admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")
        assert here.route("a", forwarded=False) == Route()  # gone: answered here
        assert "cannot reach Redis" in caplog.text
        wait_until(lambda: "Redis reachable again" in caplog.text, timeout=10, what="the log saying Redis is back")
        wait_until(lambda: here.route("a", forwarded=False).address == "http://127.0.0.1:9002", timeout=10,
                   what="agent a routed to its owner n2")
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        here.close()
