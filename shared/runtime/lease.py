"""Which node owns an agent: a lease per agent in Redis, and a fencing token that grows at each take.

The stateful work of an agent — watching its workspace, writing its index and its log,
answering its searches — runs on the node that holds the agent's lease,
``memoryd:<ns>:owner:<agent>`` = ``"<node> <token>"``, which lives LEASE_TTL_SECONDS unless
the owner renews it. Any node that can reach the agent's data (``memoryd.dataDir``) takes a
lease nobody holds (its watcher every LEASE_RENEW_SECONDS, a writer before it writes:
:meth:`Leases.token`); each take draws a new token, ``max(last + 1, now in ms)``, so tokens
keep growing after a Redis that lost its data too.

A lock alone cannot stop a late write: an owner that paused past its lease (a long GC, a
stopped VM) wakes up believing it still holds it. So every write carries the token it was
allowed under, and the resource checks it: the index (``IndexWriter.fence``) and the log
(``EventLog.append``) remember the newest token they have seen and refuse an older one
(:class:`~memoryd.shared.exceptions.Fenced`). A node that cannot reach Redis cannot renew,
nor get a token for a write: it stops writing.

A node's ``memoryd serve`` publishes its address (``memoryd:<ns>:node:<node>``), so the query
service of any node forwards a search of an agent it does not own to the owner.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import redis

from memoryd.shared import defaults as d
from memoryd.shared.exceptions import NotOwner

# KEYS: owner, last token, last owner, takeover mark. ARGV: node, ttl ms, now ms.
# → {node, token} of the holder after the call. A take from another node marks the takeover.
_HOLD = """
local held = redis.call('GET', KEYS[1])
if held then
  local node, token = string.match(held, '^(%S+) (%d+)$')
  if node == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
  return {node, token}
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = math.max(last + 1, tonumber(ARGV[3]))
local before = redis.call('GET', KEYS[3])
if before and before ~= ARGV[1] then redis.call('SET', KEYS[4], before) end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[3], ARGV[1])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. token, 'PX', ARGV[2])
return {ARGV[1], tostring(token)}
"""
# KEYS: owner. ARGV: node. Deletes the lease if this node holds it.
_RELEASE = """
local held = redis.call('GET', KEYS[1])
if held and string.match(held, '^(%S+) ') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Owner(NamedTuple):
    node: str
    token: int


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _parse(raw: bytes | None) -> Owner | None:
    if raw is None:
        return None
    node, _, token = raw.decode().partition(" ")
    return Owner(node, int(token))


class Leases:
    """One node's view of the agents' leases on one installation's Redis."""

    def __init__(self, conn: redis.Redis, namespace: str, node: str) -> None:
        self.conn = conn
        self.namespace = namespace
        self.node = node
        self._hold = conn.register_script(_HOLD)
        self._release = conn.register_script(_RELEASE)

    def _key(self, *parts: str) -> str:
        return ":".join(("memoryd", self.namespace, *parts))

    def hold(self, agent: str) -> Owner:
        """Take the agent's lease if nobody holds it, renew it if this node does; → who holds it now."""
        node, token = self._hold(keys=self._hold_keys(agent),
                                 args=[self.node, int(d.LEASE_TTL_SECONDS * 1000), int(time.time() * 1000)])
        return Owner(_text(node), int(token))

    def _hold_keys(self, agent: str) -> list[str]:
        return [self._key(part, agent) for part in ("owner", "fence", "last-owner", "takeover")]

    def hold_many(self, agents: list[str]) -> dict[str, Owner]:
        """:meth:`hold` for each of ``agents`` in one round trip (a watcher's renewal of all it serves)."""
        pipe = self.conn.pipeline(transaction=False)
        now = int(time.time() * 1000)
        for agent in agents:
            self._hold(keys=self._hold_keys(agent), args=[self.node, int(d.LEASE_TTL_SECONDS * 1000), now],
                       client=pipe)
        return {agent: Owner(_text(node), int(token)) for agent, (node, token) in zip(agents, pipe.execute(),
                                                                                       strict=True)}

    def token(self, agent: str) -> int:
        """The token this node writes ``agent`` under now (taking a free lease first); NotOwner if another holds it."""
        owner = self.hold(agent)
        if owner.node != self.node:
            raise NotOwner(agent, owner.node, address=self.address(owner.node))
        return owner.token

    def takeovers(self, agents: list[str]) -> dict[str, str]:
        """The agents among ``agents`` that this node took from another node since the last call,
        each with the node it took it from (each takeover is told once)."""
        pipe = self.conn.pipeline(transaction=False)
        for agent in agents:
            pipe.getdel(self._key("takeover", agent))
        return {a: _text(r) for a, r in zip(agents, pipe.execute(), strict=True) if r is not None}

    def owner(self, agent: str) -> Owner | None:
        return _parse(self.conn.get(self._key("owner", agent)))

    def owners(self, agents: list[str]) -> dict[str, Owner | None]:
        if not agents:
            return {}
        raw = self.conn.mget([self._key("owner", a) for a in agents])
        return {a: _parse(r) for a, r in zip(agents, raw, strict=True)}

    def release(self, agent: str) -> bool:
        """Give the lease up (a clean stop, an agent this node no longer serves): another node takes it at once."""
        return bool(self._release(keys=[self._key("owner", agent)], args=[self.node]))

    def publish_address(self, url: str) -> None:
        """Say where this node's query service answers (refresh every LEASE_RENEW_SECONDS)."""
        self.conn.set(self._key("node", self.node), url, px=int(d.NODE_ADDRESS_TTL_SECONDS * 1000))

    def address(self, node: str) -> str | None:
        raw = self.conn.get(self._key("node", node))
        return raw.decode() if raw else None
