"""The query service's open agent indexes: the most recently searched ones, within a budget.

An open index holds read-only SQLite connections (as many as searches ran at once on it;
two file descriptors each with its WAL, and a page cache) and, once searched, the agent's
vectors. With a hundred agents on one box, keeping every one open would grow memory and
descriptors with the number of agents;
so at most ``memoryd.query.maxOpenIndexes`` stay open and their estimated footprint stays
under ``memoryd.query.cacheMegabytes``. Before an index is handed out, the least recently
used others are closed until both hold (one that a search is using right now is left for
the next time). A closed index reopens on its agent's next search, paying the matrix load
again (~0.1 s for 10,000 chunks).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from memoryd.shared import defaults as d

if TYPE_CHECKING:
    from memoryd.services.query.agentindex import AgentIndex



def footprint(index: AgentIndex) -> int:
    """Estimated bytes ``index`` holds: its connections' page caches and its vector arrays."""
    if not index.is_open:
        return 0
    vectors = index.vectors
    arrays = vars(vectors).values() if vectors is not None else ()
    held = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
    return d.QUERY_CONNECTION_BYTES * max(index.connections, 1) + held


class IndexCache:
    """agent id → its open :class:`AgentIndex`, least recently used first."""

    def __init__(self, make: Callable[[str], AgentIndex], budget_bytes: int, max_open: int) -> None:
        self.make = make
        self.budget_bytes = budget_bytes
        self.max_open = max_open
        self._items: OrderedDict[str, AgentIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, agent_id: str) -> AgentIndex:
        with self._lock:
            index = self._items.get(agent_id)
            if index is None:
                index = self._items[agent_id] = self.make(agent_id)
            self._items.move_to_end(agent_id)
            self._trim(keep=agent_id)
            return index

    def _trim(self, keep: str) -> None:
        total = sum(footprint(i) for i in self._items.values())
        for agent_id in list(self._items):
            if len(self._items) <= self.max_open and total <= self.budget_bytes:
                return
            index = self._items[agent_id]
            if agent_id == keep or index.busy:
                continue  # the one asked for, or one a search holds now
            total -= footprint(index)
            index.close()
            del self._items[agent_id]

    def retain(self, agent_ids: set[str]) -> None:
        """Close the indexes of agents no longer configured (removed from the registry)."""
        with self._lock:
            for agent_id in [a for a in self._items if a not in agent_ids]:
                self._items.pop(agent_id).close()  # a search in flight ends on its own connection

    def close(self) -> None:
        self.retain(set())
