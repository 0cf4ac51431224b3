"""Memory that comes back down: a worker idle after work gives its freed memory back to the system.

CPython frees objects at once, but the memory often stays with the process: cycles wait for the
collector, and glibc's malloc keeps freed blocks in its arenas for the next allocation instead of
returning them (a bulk index left the indexer ~35 MB above where it started, 60 s after its last
job). A worker that has been idle for SETTLE_IDLE_SECONDS after a job collects garbage and asks
malloc to return what it can (``malloc_trim``), once per idle stretch: the next job pays nothing
for it, and a worker that keeps busy never stops to do it. Where the C library has no
``malloc_trim`` (musl, macOS) only the collection runs.

A worker also runs numpy's BLAS on one thread (:func:`one_blas_thread`): OpenBLAS gives each of
its threads a buffer of its own on first use (the indexer's first projection fit: +16 MB that
stayed after every bulk index) and keeps them for the life of the process; a worker is one of
several processes on the machine's cores and gains nothing from BLAS threads of its own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import threading
import time
from collections.abc import Callable

from memoryd.shared import defaults as d

log = logging.getLogger("memoryd.worker")


def one_blas_thread() -> None:
    """Limit numpy's BLAS (OpenBLAS, MKL, BLIS) in this process to one thread, for its life."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=d.WORKER_BLAS_THREADS, user_api="blas")


def _malloc_trim() -> Callable[[], object] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class Settler:
    """Knows when the worker last ran a job; :meth:`check` (a duty thread, every few seconds)
    settles once the worker has been idle long enough after one."""

    def __init__(self, release: Callable[[], object] = lambda: None, idle_seconds: float = d.SETTLE_IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.release = release
        self.idle_seconds = idle_seconds
        self.clock = clock
        self.trim = _malloc_trim()
        self.settled = 0  # times it settled: what a test and the log can see
        self._lock = threading.Lock()
        self._busy = 0
        self._last_job: float | None = None  # end of the last job not yet settled after

    def started(self) -> None:
        with self._lock:
            self._busy += 1

    def finished(self) -> None:
        with self._lock:
            self._busy -= 1
            self._last_job = self.clock()

    def check(self) -> bool:
        """Settle when idle for ``idle_seconds`` since the last job; whether it did."""
        with self._lock:  # held throughout: no job starts while what it would use is closed
            if self._busy or self._last_job is None or self.clock() - self._last_job < self.idle_seconds:
                return False
            self._last_job = None
            before = resident_mb()
            self.release()
            gc.collect()
            if self.trim is not None:
                self.trim()
            self.settled += 1
        log.info("idle %.0fs after work: resident memory %.0f -> %.0f MB (garbage collected, freed heap returned)",
                 self.idle_seconds, before, resident_mb())
        return True


def resident_mb() -> float:
    """This process's resident memory (RSS) in MB; 0 where /proc is missing."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0
