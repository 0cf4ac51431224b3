"""Searches take turns on the index: at most ``slots`` at once, in the order they came.

Eight searches at once on two cores each ran at a fraction of a core, their threads (the
search's own, its scan's, ONNX's and BLAS's) trading the cores and the GIL: each cost 26.2 ms
of CPU against 22.9 alone, and the unlucky ones waited far longer than the rest (8 clients:
62.5 requests/s, p99 217 ms). With as many at once as the machine has cores, served first come
first served, a search costs what it costs alone and waits only for those before it: 72.7
requests/s, p99 135 ms (bench/query.py ``concurrency``; docs/query.md).

A turn covers the work on the index (a search's snapshot: its keyword side, scan, fusion and
snippets), never the wait for its query's embedding: a slow or hung provider holds no turn, so
it never holds other agents' searches (services/query/question_embedding.py). A search that
gave its turn back to wait for its embedding comes back ``first``: ahead of the searches that
came after it, so it never waits in line twice (8 clients at 100k: a quarter of the searches
came back, and waited ~35 ms a time at the end of the line: the p99 was theirs). A search waits
its turn at most ``timeout`` seconds, then fails with :class:`SearchBusy` (HTTP 503 ``busy``),
which says how long it waited and how many searches were ahead of it.
"""

from __future__ import annotations

import threading
from collections import deque
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
        self._waiting: deque[threading.Event] = deque()

    @contextmanager
    def turn(self, first: bool = False) -> Iterator[None]:
        """Hold one of the slots for the block; wait for it (first come, first served; ``first``:
        ahead of every search waiting, for one that had a turn already) at most ``timeout``."""
        self._take(first)
        try:
            yield
        finally:
            self._give()

    def _take(self, first: bool) -> None:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return
            mine = threading.Event()
            if first:
                self._waiting.appendleft(mine)
            else:
                self._waiting.append(mine)
            ahead = (0 if first else len(self._waiting) - 1) + self.slots
        if mine.wait(self.timeout):
            return
        with self._lock:
            if mine.is_set():  # handed a slot between the timeout and the lock
                return
            self._waiting.remove(mine)
        raise SearchBusy(f"the search waited {self.timeout:g} s for its turn on the index behind {ahead} other "
                         f"searches ({self.slots} run at once, one per core) and gave up: the query service is "
                         "overloaded; try again, or spread the agents over more nodes")

    def _give(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()  # the slot goes straight to the first in line
            else:
                self._free += 1
