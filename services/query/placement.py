"""Which node answers for an agent: this one, the owner (forwarded to), or nobody now (said so).

The query service of every node takes every agent's searches. An agent whose lease this
node holds (shared/runtime/lease.py) is answered here. One that another node holds is
forwarded to that node's query service, at the address it publishes, with the caller's
token (tokens live in the shared data dir: the same on every node); when that node published
no address the answer is 503 ``agent_elsewhere`` naming it. An agent no live node holds is
answered from this node's copy of its index, and the answer says why it may be stale
(``unavailable``): never stale in silence. While Redis cannot be reached (``memoryd serve``
also runs without one) every agent is answered here, and the log says so once.

Who owns an agent, and where it answers, is asked of Redis at most once per
``d.PLACEMENT_CACHE_SECONDS`` per agent: a round trip per search cost 0.3 ms alone and 1.8 ms
on average at 8 clients (6.4 in the slowest 5 %: the reply waited for its process's GIL), and
an owner changes only when a lease expires (``LEASE_TTL_SECONDS``) or is given back.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
import redis

from memoryd.shared import defaults as d
from memoryd.shared.exceptions import NotOwner
from memoryd.shared.redact import redact
from memoryd.shared.runtime.lease import Leases, Owner
from memoryd.shared.runtime.worker import Periodic

log = logging.getLogger("memoryd.placement")

#: A forwarded request carries this header; the owner answers it itself (never forwards it again).
FORWARDED = "x-memoryd-forwarded"
#: How long a forwarded request may take at the owner (a search is ~15 ms; an asOf replay longer).
FORWARD_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Route:
    #: The owner's query address: forward there (None: answer here).
    address: str | None = None
    #: Why an answer given here may be stale (None: this node owns the agent).
    unavailable: str | None = None


class Placement:
    """One query service's view of who owns each agent, and its forwarding client."""

    def __init__(self, conn: redis.Redis, namespace: str, node: str) -> None:
        self.leases = Leases(conn, namespace, node)
        self.node = node
        self.client = httpx.Client(timeout=FORWARD_TIMEOUT_SECONDS)
        self._publisher: Periodic | None = None
        self._unreachable = False  # said once per outage
        #: Per agent: when Redis was asked, its owner and the owner's address (another node's).
        self._known: dict[str, tuple[float, Owner | None, str | None]] = {}

    def route(self, agent: str, forwarded: bool) -> Route:
        try:
            owner, address = self._owner(agent)
        except redis.RedisError as exc:  # no pipeline to ask (``memoryd serve`` runs without Redis too): answer here
            if not self._unreachable:
                log.warning("cannot reach Redis to learn who owns the agents (%s): answering from this node's "
                            "indexes", redact(str(exc)))
            self._unreachable = True
            return Route()
        self._unreachable = False
        if owner is None:
            return Route(unavailable=f"no live node holds agent {agent}'s lease now (none reaches its data, or "
                                     "one is taking it over): answered from this node's copy of its index, "
                                     "which nobody is updating; see `memoryd status`")
        if owner.node == self.node or forwarded:
            return Route()
        if address is None:
            raise NotOwner(agent, owner.node)
        return Route(address=address)

    def _owner(self, agent: str) -> tuple[Owner | None, str | None]:
        """``agent``'s owner and its address, as Redis said within ``d.PLACEMENT_CACHE_SECONDS``."""
        now = time.monotonic()
        known = self._known.get(agent)
        if known is not None and now - known[0] < d.PLACEMENT_CACHE_SECONDS:
            return known[1], known[2]
        owner = self.leases.owner(agent)
        address = self.leases.address(owner.node) if owner is not None and owner.node != self.node else None
        if len(self._known) >= d.PLACEMENT_CACHE_AGENTS:
            self._known.clear()  # agents removed from the registry leave their entries behind
        self._known[agent] = (now, owner, address)
        return owner, address

    def forward(self, address: str, path: str, body: dict[str, Any], authorization: str | None) -> httpx.Response:
        headers = {FORWARDED: self.node, **({"authorization": authorization} if authorization else {})}
        return self.client.post(f"{address.rstrip('/')}{path}", json=body, headers=headers)

    def publish(self, url: str) -> None:
        """Publish this node's query address now and every LEASE_RENEW_SECONDS until :meth:`close`."""
        self._publisher = Periodic("publish-address", d.LEASE_RENEW_SECONDS, lambda: self.leases.publish_address(url),
                                   errors=(redis.RedisError,), immediately=True)
        self._publisher.start()

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.stop.set()
        self.client.close()
