"""A node's leases on its agents (shared/runtime/lease.py), kept by its watcher.

Every LEASE_RENEW_SECONDS the watcher renews the leases its node holds and takes the free
ones of the agents it can serve: their data dir is writable here and their workspace is
here (a new agent's workspace may be created; an indexed agent whose folder this node does
not see is left to a node that does, never taken with an empty folder). It lets go of the
ones it cannot serve any more. It publishes the configuration of the agents it holds
(``Bus.publish_agents``) for chunkers and embedders that do not mount the agent registry.

Taking an agent that another node held is a takeover (marked by the take itself, whichever
process of this node took it: shared/runtime/lease.py): the agent's lost work is re-driven
from its log (shared/rebuild/recovery.py) and the watcher reconciles its workspace at once,
so what the old owner had not finished is done here. (After a Redis that lost its data the
indexer's recovery and the watcher's reconcile do the same: recovery.py, watcher.py.)
The index lanes of a node with no live process are moved to the shared lanes
(:func:`drain_dead_nodes`), where the agents' new owners take them.
"""

from __future__ import annotations

import logging

from rq import Queue

from memoryd.shared.config.settings import Settings
from memoryd.shared.rebuild.recovery import reachable, redrive
from memoryd.shared.runtime.bus import OWNED_STAGE, Bus, queue_name
from memoryd.shared.runtime.liveness import node_alive

log = logging.getLogger("memoryd.keeper")


class Keeper:
    """The leases of one node's watcher: which agents it watches."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.held: set[str] = set()
        #: Why this node cannot serve an agent, as last said (said again only when it changes).
        self.refused: dict[str, str] = {}
        #: The agent configurations this keeper published, as published (Bus.publish_agents).
        self.said: dict[str, str] = {}

    def tick(self, settings: Settings) -> tuple[list[str], list[str]]:
        """Renew, take and let go; → (agents taken now, agents lost or let go)."""
        servable = []
        for agent_id in settings.agent_ids():
            why = reachable(settings, agent_id)
            if why is None:
                self.refused.pop(agent_id, None)
                servable.append(agent_id)
                continue
            if agent_id in self.held:
                self.bus.leases.release(agent_id)
            if self.refused.get(agent_id) != why:
                log.warning("agent %s: not served on this node: %s", agent_id, why)
                self.refused[agent_id] = why
        holding = {a for a, owner in self.bus.leases.hold_many(servable).items() if owner.node == settings.node}
        gained = sorted(holding - self.held)
        lost = sorted(self.held - holding)
        for agent_id, before in self.bus.leases.takeovers(sorted(holding)).items():
            counts = redrive(settings, self.bus, agent_id)
            log.warning("agent %s: taken over from node %s; re-driven from its log: %s", agent_id, before, counts)
        for agent_id in lost:
            log.warning("agent %s: its lease is another node's now; no longer watched here", agent_id)
        self.held = holding
        if gained:  # published again from scratch after a take: a Redis that lost its data forgot them
            self.said = {}
        self.bus.publish_agents(settings, sorted(holding), self.said)
        drain_dead_nodes(self.bus)
        return gained, lost

    def release_all(self) -> None:
        """A clean stop: the leases go at once, so another node takes the agents without waiting them out."""
        for agent_id in self.held:
            self.bus.leases.release(agent_id)
        self.held = set()


def drain_dead_nodes(bus: Bus) -> int:
    """Move the queued jobs of nodes with no live process from their index lanes to the shared lanes.
    → how many moved."""
    prefix = f"{queue_name(bus.namespace, OWNED_STAGE)}@"
    moved = 0
    for name in sorted(k.decode().removeprefix(Queue.redis_queue_namespace_prefix)
                 for k in bus.conn.smembers(Queue.redis_queues_keys)):
        if not name.startswith(prefix):
            continue
        node = name[len(prefix):].removesuffix("-bulk")
        source = Queue(name, connection=bus.conn)
        if node == bus.settings.node or not source.count or node_alive(bus.conn, node):
            continue
        target = bus.bulk[OWNED_STAGE] if name.endswith("-bulk") else bus.queues[OWNED_STAGE]
        jobs = source.jobs
        for job in jobs:
            source.remove(job)
            target.enqueue_job(job)
        moved += len(jobs)
        log.warning("moved %d jobs of node %s, which has no live process, from %s to %s", len(jobs), node, name,
                    target.name)
    return moved
