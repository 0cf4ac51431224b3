"""While the other query processes of ``memoryd serve`` answer too, each runs on cores of its own.

A process's threads (the event loop beside its searches; before a search became one thread's
work, the model's and the scan's too) may run on any core. With eight callers every core is busy,
and the kernel spread each process's threads over all cores: a
thread holding its process's GIL was paused for another process's thread, and its own process's
searches waited meanwhile. Alternating in the same minutes (100k, 2 cores, 2 processes,
``bench/concurrency.py``'s loops): 8 clients 121.4 → 129.3 and 128.8 → 135.4 requests/s, their
p99 103.9 → 85.7 and 94.1 → 77.3 ms. Pinned for good, one client alone lost its second core:
p50 13.0 → 17.4 ms. So a process keeps to its own share of the cores (:attr:`Cores.own`: every
``processes``-th of the cores ``memoryd serve`` started with) only while another process answers a
request (:attr:`Load.answering`) or did within ``d.SERVE_CORES_HOLD_S``, and spreads over all of
them again after: one client alone keeps both cores; eight share them out a process a core.

The choice is made at each request's start (:meth:`Cores.follow`), from counts in the shared
page; a change moves every thread of the process (``sched_setaffinity`` per thread: threads
started later inherit their starter's cores). Without ``sched_setaffinity`` (not Linux), or with
no more cores than one process's share, nothing moves.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

from memoryd.shared import defaults as d

log = logging.getLogger("memoryd.serve")


def machine_cpus() -> frozenset[int]:
    """The cores this process may run on (its container's or ``taskset``'s choice); empty where
    the platform cannot say (then no process ever keeps to a share)."""
    if not hasattr(os, "sched_getaffinity"):
        return frozenset()
    return frozenset(os.sched_getaffinity(0))


class Cores:
    """Where query process ``slot`` of ``processes`` runs: on all of ``cpus``, or on its own share
    of them while the others answer too (``others_answering``: :meth:`Load.others_answering` of
    services/cli/serveprocs.py, for this slot)."""

    def __init__(self, slot: int, processes: int, cpus: frozenset[int], others_answering: Callable[[], bool],
                 hold: float = d.SERVE_CORES_HOLD_S) -> None:
        self.others_answering = others_answering
        self.hold = hold
        self.everywhere = cpus
        ordered = sorted(cpus)
        self.own = frozenset(ordered[slot::processes] or [ordered[slot % len(ordered)]]) if ordered else cpus
        self.apart = False  # on its own share now
        self.seen = -math.inf  # when another process was last seen answering

    def follow(self) -> None:
        """At a request's start: onto its own share if another process answers (or did within
        ``hold``), back onto all the cores if none has since."""
        if self.own == self.everywhere:
            return
        now = time.monotonic()
        if self.others_answering():
            self.seen = now
        apart = now - self.seen < self.hold
        if apart != self.apart:
            self.apart = apart
            place(self.own if apart else self.everywhere)


def place(cpus: frozenset[int]) -> None:
    """Every thread of this process onto ``cpus`` (a thread that ended meanwhile is passed by)."""
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:
            continue
        except OSError as exc:  # cores taken away since the start (a container's cpuset changed)
            log.warning("cannot move query process %d's thread %s onto cores %s: %s", os.getpid(), task,
                        sorted(cpus), exc)
            return
