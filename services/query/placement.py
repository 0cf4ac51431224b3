"""Which node answers for an agent: this one, the owner (forwarded to), or nobody now (said so).

The query service of every node takes every agent's searches. An agent whose lease this
node holds (shared/runtime/lease.py) is answered here. One that another node holds is
forwarded to that node's query service, at the address it publishes, with the caller's
token (tokens live in the shared data dir: the same on every node); when that node published
no address the answer is 503 ``agent_elsewhere`` naming it. An agent no live node holds is
answered from this node's copy of its index, and the answer says why it may be stale
(``unavailable``): never stale in silence. While Redis cannot be reached (``memoryd serve``
also runs without one) every agent is answered here, and the log says so once.

Who owns an agent, and where it answers, is asked of Redis once, by the first search of the
agent; a thread of the query process asks again for every agent it knows every
``d.PLACEMENT_CACHE_SECONDS`` (one MGET), and searches read what it heard last: a search never
waits for Redis after its agent's first. A round trip per search cost 0.3 ms alone and 1.8 ms on
average at 8 clients; asked per search at most every 0.5 s, the slowest 1 % still held 23–46 ms
waits for it; and a Redis that hung held every search up to the connection's 2 s timeout. An
owner changes only when a lease expires (``LEASE_TTL_SECONDS``) or is given back. When Redis
cannot be reached, every search is answered here until the thread hears from it again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import httpx
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

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
#: How long a call to Redis may take (connecting, or waiting for the reply) before it counts as gone.
REDIS_TIMEOUT_SECONDS = 2.0


def connect(url: str, namespace: str, node: str, timeout: float = REDIS_TIMEOUT_SECONDS) -> Placement:
    """A :class:`Placement` on a connection of its own to ``url``: ``timeout`` seconds per call, and
    no retries inside a call (redis-py's default: 3, with backoff — a Redis that hung held the
    search that asked 15 s at a 1 s timeout); its thread asks again every ``d.PLACEMENT_CACHE_SECONDS``."""
    conn = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                retry=Retry(NoBackoff(), 0))
    return Placement(conn, namespace, node)


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
        #: Per agent asked about: its owner and the owner's address (another node's), as Redis said last.
        self._known: dict[str, tuple[Owner | None, str | None]] = {}
        self._lock = threading.Lock()
        self._refresher = Periodic("placement", d.PLACEMENT_CACHE_SECONDS, self._refresh, errors=())
        self._refresher.start()

    def route(self, agent: str, forwarded: bool) -> Route:
        known = None if self._unreachable else self._known.get(agent)
        if known is None and not self._unreachable:  # an agent not asked about yet: the one wait for Redis
            try:
                known = self._ask([agent])[agent]
            except redis.RedisError as exc:
                self._lost(exc)
        if known is None:  # no pipeline to ask (``memoryd serve`` runs without Redis too): answer here
            return Route()
        owner, address = known
        if owner is None:
            return Route(unavailable=f"no live node holds agent {agent}'s lease now (none reaches its data, or "
                                     "one is taking it over): answered from this node's copy of its index, "
                                     "which nobody is updating; see `memoryd status`")
        if owner.node == self.node or forwarded:
            return Route()
        if address is None:
            raise NotOwner(agent, owner.node)
        return Route(address=address)

    def _ask(self, agents: list[str]) -> dict[str, tuple[Owner | None, str | None]]:
        """Redis's word on ``agents``' owners and their addresses, kept for the searches to come."""
        owners = self.leases.owners(agents)
        addresses = {node: self.leases.address(node) for node in {o.node for o in owners.values() if o is not None}
                     if node != self.node}
        said = {agent: (owner, addresses.get(owner.node) if owner is not None else None)
                for agent, owner in owners.items()}
        with self._lock:
            if len(self._known) + len(said) > d.PLACEMENT_CACHE_AGENTS:
                self._known.clear()  # agents removed from the registry leave their entries behind
            self._known.update(said)
        self._reached()
        return said

    def _reached(self) -> None:
        if self._unreachable:
            log.warning("Redis reachable again: searches are routed to their agents' owners")
        self._unreachable = False

    def _lost(self, exc: redis.RedisError) -> None:
        if not self._unreachable:
            log.warning("cannot reach Redis to learn who owns the agents (%s): answering from this node's "
                        "indexes", redact(str(exc)))
        self._unreachable = True

    def _refresh(self) -> None:
        """Ask Redis again about every agent known (with none known, whether it answers again)."""
        try:
            if self._known:
                self._ask(list(self._known))
            elif self._unreachable and self.leases.conn.ping():
                self._reached()
        except redis.RedisError as exc:
            self._lost(exc)

    def forward(self, address: str, path: str, body: dict[str, Any], authorization: str | None) -> httpx.Response:
        headers = {FORWARDED: self.node, **({"authorization": authorization} if authorization else {})}
        return self.client.post(f"{address.rstrip('/')}{path}", json=body, headers=headers)

    def publish(self, url: str) -> None:
        """Publish this node's query address now and every LEASE_RENEW_SECONDS until :meth:`close`."""
        self._publisher = Periodic("publish-address", d.LEASE_RENEW_SECONDS, lambda: self.leases.publish_address(url),
                                   errors=(redis.RedisError,), immediately=True)
        self._publisher.start()

    def close(self) -> None:
        self._refresher.stop.set()
        if self._publisher is not None:
            self._publisher.stop.set()
        self.client.close()
