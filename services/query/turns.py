"""Searches take turns on the index: at most ``slots`` at once, in the order they came.

Eight searches at once on two cores each ran at a fraction of a core, their threads (the
search's own, its scan's, ONNX's and BLAS's) trading the cores and the GIL: each cost 26.2 ms
of CPU against 22.9 alone, and the unlucky ones waited far longer than the rest (8 clients:
62.5 requests/s, p99 217 ms). With as many at once as the machine has cores, served first come
first served, a search costs what it costs alone and waits only for those before it: 72.7
requests/s, p99 135 ms (bench/query.py ``concurrency``; docs/query.md).

A turn covers the work on the index (a search's snapshot: its keyword side, scan, fusion and
snippets) and an in-process model's embedding of the question, all on the search's thread;
never the wait for a remote provider's embedding: a slow or hung provider holds no turn, so it
never holds other agents' searches (services/query/question_embedding.py). A search that gave
its turn back to wait for its embedding comes ``back`` with the ticket of its first turn: ahead
of every search waiting for a first turn, so it never waits in line twice (8 clients at 100k,
when the local model embedded on a thread of its own: a quarter of the searches came back, and
waited ~35 ms a time at the end of the line: the p99 was theirs), and behind the searches coming
back that came before it: answers that arrive together come back together, and the first come
is served first (taken as they came back, the last back went first: first come, last served). A search waits
its turn at most ``timeout`` seconds, then fails with :class:`SearchBusy` (HTTP 503 ``busy``),
which says how long it waited and how many searches were ahead of it.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from memoryd.shared.exceptions import MemorydError


class SearchBusy(MemorydError):
    code = "busy"
    http_status = 503


class Turns:
    def __init__(self, slots: int, timeout: float) -> None:
        self.slots = slots
        self.timeout = timeout
        self._lock = threading.Lock()
        self._free = slots
        self._tickets = itertools.count()
        #: The searches waiting, in the order they are served: (coming back? 0 : 1, ticket, event).
        self._waiting: list[tuple[int, int, threading.Event]] = []

    @contextmanager
    def turn(self, back: int | None = None) -> Iterator[int]:
        """Hold one of the slots for the block (→ this search's ticket); wait for it (first come, first
        served) at most ``timeout``. ``back``: the ticket of this search's first turn, for its second
        (ahead of every search waiting for a first turn, behind those coming back that came before it)."""
        ticket = self._take(back)
        try:
            yield ticket
        finally:
            self._give()

    def _take(self, back: int | None) -> int:
        with self._lock:
            ticket = next(self._tickets) if back is None else back
            if self._free and not self._waiting:
                self._free -= 1
                return ticket
            mine = threading.Event()
            place = (int(back is None), ticket, mine)  # tickets differ: the events are never compared
            ahead = bisect.bisect(self._waiting, place)
            self._waiting.insert(ahead, place)
            ahead += self.slots
        if mine.wait(self.timeout):
            return ticket
        with self._lock:
            if mine.is_set():  # handed a slot between the timeout and the lock
                return ticket
            self._waiting.remove(place)
        raise SearchBusy(f"the search waited {self.timeout:g} s for its turn on the index behind {ahead} other "
                         f"searches ({self.slots} run at once, one per core) and gave up: the query service is "
                         "overloaded; try again, or spread the agents over more nodes")

    def _give(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.pop(0)[2].set()  # the slot goes straight to the first in line
            else:
                self._free += 1
