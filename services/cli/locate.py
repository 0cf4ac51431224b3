"""Where an installation lives, found without loading its settings — and the running server's address.

``memoryd search`` / ``get`` first ask a running ``memoryd serve`` of the same installation:
its answer takes milliseconds, while loading the settings (pydantic) alone takes a few
hundred and loading the model and the index more. So the state dir is found with the
precedence ``load_settings`` gives it (``memoryd.shared.config.environment.state_dir``:
``--state-dir``, ``$MEMORYD_STATE_DIR``, the config file's ``memoryd.stateDir``, ``~/.memoryd``),
reading nothing but the environment and the JSON file. ``memoryd serve`` writes
``<state>/serve.json`` (its URL, pid and config file) once it listens and removes it when it stops.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

SERVER_FILE = "serve.json"


def _same_file(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def _live(state: Path) -> dict | None:
    try:
        found = json.loads((state / SERVER_FILE).read_text(encoding="utf-8"))
        os.kill(int(found["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none, or it died without removing its file
    return found


def running_server(state: Path, config: str | None) -> str | None:
    """The URL of a live ``memoryd serve`` of this state dir started with the same config file."""
    found = _live(state)
    return found["url"] if found and _same_file(found.get("config"), config) else None


def server_pid(state: Path) -> int | None:
    """The pid of the live ``memoryd serve`` announced in this state dir, if any."""
    found = _live(state)
    return int(found["pid"]) if found else None


def server_url(state: Path) -> str | None:
    """The URL of the live ``memoryd serve`` announced in this state dir, whatever its config."""
    found = _live(state)
    return found["url"] if found else None


def announce(state: Path, url: str, config: str | None) -> Path:
    """Record this server's address for the CLI (atomically: a reader sees the whole file or none)."""
    state.mkdir(parents=True, exist_ok=True)
    path = state / SERVER_FILE
    tmp = path.with_name(f".{SERVER_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "config": config}), encoding="utf-8")
    os.replace(tmp, path)
    return path


def withdraw(state: Path) -> None:
    """Remove the address file if it is still this process's (another server may have replaced it)."""
    path = state / SERVER_FILE
    with contextlib.suppress(OSError, ValueError, KeyError):
        if json.loads(path.read_text(encoding="utf-8"))["pid"] == os.getpid():
            path.unlink()
