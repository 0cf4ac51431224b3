"""Bearer tokens: one per agent and one admin token, stored hashed in ``<stateDir>/tokens.json``.

A token is 256 random bits (``mdt_`` + url-safe base64); the file keeps only
``sha256(salt ‖ token)`` per principal, with a random salt per installation, so the file
alone lets nobody in (tokens are random, not passwords: a slow hash adds nothing). The
file is ``0600``, written whole under a lock like the agent registry, and re-read by a
running server when it changes, so ``memoryd agents token ID`` takes effect at once and
the old token of that agent stops working.

Principals are ``agent:<id>`` (that agent's routes only) and ``admin`` (every agent and
the cross-agent routes). Where a token is *required* is :func:`tokens_required`'s call:
beyond loopback, unless the operator says ``--insecure``.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import secrets
import threading
from pathlib import Path

from memoryd.shared.exceptions import ConfigError

TOKENS_FILE = "tokens.json"
ADMIN = "admin"
TOKEN_PREFIX = "mdt_"


def agent_principal(agent_id: str) -> str:
    return f"agent:{agent_id}"


def allows(principal: str, agent_id: str) -> bool:
    """Whether ``principal`` may act for ``agent_id``."""
    return principal == ADMIN or principal == agent_principal(agent_id)


class Tokens:
    """The token file of one state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / TOKENS_FILE
        self._stamp: tuple[int, int, int] | None = None
        self._salt = b""
        self._by_hash: dict[str, str] = {}
        self._lock = threading.Lock()

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"salt": secrets.token_hex(16), "hashes": {}}
        except json.JSONDecodeError as exc:
            raise ConfigError(f"token file {self.path} is not valid JSON ({exc}); delete it and issue new tokens "
                              "with `memoryd agents token`") from None
        return data

    def _write(self, data: dict) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
        os.replace(tmp, self.path)

    def _change(self, principal: str, token: str | None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(f".{self.path.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self._read()
            if token is None:
                data["hashes"].pop(principal, None)
            else:
                data["hashes"][principal] = _hash(bytes.fromhex(data["salt"]), token)
            self._write(data)
        finally:
            os.close(fd)

    def issue(self, principal: str) -> str:
        """A new token for ``principal``; its previous one stops working. → the token (shown once)."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self._change(principal, token)
        return token

    def revoke(self, principal: str) -> None:
        self._change(principal, None)

    def issued(self) -> set[str]:
        """The principals that hold a token."""
        return set(self._read()["hashes"])

    def verify(self, token: str) -> str | None:
        """The principal ``token`` belongs to, or None. Re-reads the file when it changed."""
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                data = self._read() if stamp else {"salt": "", "hashes": {}}
                self._salt = bytes.fromhex(data["salt"])
                self._by_hash = {digest: principal for principal, digest in data["hashes"].items()}
                self._stamp = stamp
            return self._by_hash.get(_hash(self._salt, token)) if self._by_hash else None


def _hash(salt: bytes, token: str) -> str:
    return hashlib.sha256(salt + token.encode("utf-8")).hexdigest()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: reachable from wherever it resolves


def tokens_required(host: str, mode: str, insecure: bool) -> bool:
    """Whether a server listening on ``host`` must require a bearer token.

    ``mode`` is ``memoryd.server.auth``: ``on`` always; ``auto`` beyond loopback; ``off``
    never — and listening beyond loopback with ``off`` is refused unless ``insecure``.
    ``insecure`` (``--insecure``) also lifts ``auto`` beyond loopback.
    """
    if mode == "on":
        return True
    if is_loopback(host):
        return False
    if insecure:
        return False
    if mode == "off":
        raise ConfigError(f"refusing to listen on {host} with memoryd.server.auth off: anyone who can reach it "
                          "could read and write every agent's memory. Issue tokens (`memoryd agents token ID`) "
                          "and set auth to auto, listen on 127.0.0.1, or pass --insecure to accept the risk")
    return True
