"""Which memoryd processes are alive, judged by heartbeats in Redis, never by pids.

Every process that runs workers has an *identity*, ``<node>.<random>``: the node name from
the settings (``memoryd.node`` / ``MEMORYD_NODE``, by default the host name) and 8 random hex
digits drawn at start. Its workers are named ``memoryd-<stage>.<identity>``, so two
containers (each memoryd at pid 1, each with the host's name under host networking), a
restarted container and a second box never share a name.

While it runs, the process refreshes ``memoryd:alive:<identity>`` every ALIVE_BEAT_SECONDS
with a TTL of ALIVE_TTL_SECONDS (:class:`Heartbeat`). Another process whose orphan sweep
finds a worker, or a retry-scheduler lock, whose identity has no such key takes its jobs
and lock back (``shared/runtime/worker.requeue_orphans``): seconds after a ``kill -9``,
on any host. Right after a Redis restart that lost the keys nobody is judged until the
keys had time to come back (:func:`alive`).

``memoryd health --stage S`` (a container's healthcheck) asks whether *this* machine or
container runs a live worker of S: each worker notes its name in a file of the local temp
dir (:func:`note_local`; a container's own), and the health check looks up those names'
heartbeat keys (:func:`local_alive`).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import redis

from memoryd.shared import defaults as d

_token = secrets.token_hex(4)


def _redraw() -> None:
    global _token
    _token = secrets.token_hex(4)


os.register_at_fork(after_in_child=_redraw)  # a forked child is another process: another identity


def identity(node: str) -> str:
    """This process's identity on ``node``: ``<node>.<8 random hex digits>``."""
    return f"{node}.{_token}"


def worker_name(stage: str, node: str) -> str:
    """The RQ name of this process's worker of ``stage``: ``memoryd-<stage>.<node>.<random>``."""
    return f"memoryd-{stage}.{identity(node)}"


def identity_of(name: str) -> str | None:
    """The process identity a memoryd worker name carries (None: not a memoryd worker's name)."""
    if not name.startswith("memoryd-"):
        return None
    _, _, rest = name.partition(".")
    return rest if "." in rest else None


def alive_key(ident: str) -> str:
    return f"memoryd:alive:{ident}"


def alive(conn: redis.Redis, name: str) -> bool:
    """Whether the process that runs worker ``name`` is alive (True for names memoryd did not make).

    A missing heartbeat key means dead, except in the first ALIVE_TTL_SECONDS of a Redis
    that (re)started without the keys: the live processes have not refreshed them yet."""
    ident = identity_of(name)
    if ident is None or conn.exists(alive_key(ident)):
        return True
    return int(conn.info("server")["uptime_in_seconds"]) <= d.ALIVE_TTL_SECONDS


def node_alive(conn: redis.Redis, node: str) -> bool:
    """Whether any memoryd process of ``node`` is alive (a SCAN of the heartbeat keys; the same
    grace after a Redis restart as :func:`alive`)."""
    if next(conn.scan_iter(match=alive_key(f"{node}.*"), count=1000), None) is not None:
        return True
    return int(conn.info("server")["uptime_in_seconds"]) <= d.ALIVE_TTL_SECONDS


class Heartbeat:
    """Keeps this process's heartbeat key fresh (call :meth:`beat` every ALIVE_BEAT_SECONDS)."""

    def __init__(self, conn: redis.Redis, node: str) -> None:
        self.conn = conn
        self.key = alive_key(identity(node))

    def beat(self) -> None:
        self.conn.set(self.key, os.getpid(), px=int(d.ALIVE_TTL_SECONDS * 1000))

    def clear(self) -> None:
        """A clean exit: the process is gone at once (its workers said goodbye to RQ too)."""
        self.conn.delete(self.key)



def _local_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"memoryd-{os.getuid()}"


def note_local(stage: str, name: str) -> Path:
    """Note worker ``name`` of ``stage`` for this machine's health check; → the file (removed at a clean exit)."""
    folder = _local_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"worker-{stage}.{os.getpid()}"  # pid 1 again after a container restart: the same file
    path.write_text(name, encoding="utf-8")
    return path


def local_alive(conn: redis.Redis, stage: str) -> list[str]:
    """The workers of ``stage`` noted on this machine whose process's heartbeat is in Redis."""
    folder = _local_dir()
    names = [p.read_text(encoding="utf-8").strip() for p in sorted(folder.glob(f"worker-{stage}.*"))]
    return [n for n in names if (ident := identity_of(n)) is not None and conn.exists(alive_key(ident))]
