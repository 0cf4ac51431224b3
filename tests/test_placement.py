"""Who answers for an agent (services/query/placement.py), on a real Redis: a query process asks
Redis at most once per ``PLACEMENT_CACHE_SECONDS`` per agent, and follows a lease that changed
hands once that has passed."""

from __future__ import annotations

import time

import pytest
import redis
from support import wait_until

from memoryd.services.query import placement as placement_module
from memoryd.services.query.placement import Placement
from memoryd.shared.runtime.lease import Leases


def test_the_owner_is_asked_once_per_period_and_a_new_owner_followed_after_it(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement_module.d, "PLACEMENT_CACHE_SECONDS", 1.0)
    conn = redis.Redis.from_url(redis_url)
    n2, n3 = Leases(conn, "ns", "n2"), Leases(conn, "ns", "n3")
    n2.hold("a")
    n2.publish_address("http://127.0.0.1:9002")
    n3.publish_address("http://127.0.0.1:9003")
    here = Placement(conn, "ns", "n1")
    try:
        asked = time.monotonic()
        assert here.route("a", forwarded=False).address == "http://127.0.0.1:9002"
        n2.release("a")
        n3.hold("a")
        # within the period the answer is the one Redis gave: it was not asked again
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
