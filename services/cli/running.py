"""What a running ``memoryd up`` tells the other commands: its config file, beside its Redis.

``memoryd up --config small.json`` writes ``<state>/redis/config`` (the config path and
its pid) next to ``<state>/redis/url`` (the Redis it chose, shared/runtime/redis_server.py)
and removes what it wrote when it stops; a second ``up`` of the state dir is refused
(:func:`up_pid`). A later command given neither ``--config`` nor ``$MEMORYD_CONFIG`` uses
that file (``services/cli/app.py``), so ``memoryd session show`` reports the thresholds the
services run with. Reads only JSON and the environment: the CLI calls it before it loads
anything heavy.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

#: Beside PRIVATE_URL_FILE ("redis/url"): the config file of the `memoryd up` running on this state dir.
UP_CONFIG_FILE = "redis/config"


def note_up(state: Path, config: str | None) -> Path:
    """Record this process (``memoryd up``) and its config file, atomically."""
    path = state / UP_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".config.{os.getpid()}")
    tmp.write_text(json.dumps({"config": str(Path(config).expanduser().resolve()) if config else None,
                               "pid": os.getpid()}), encoding="utf-8")
    os.replace(tmp, path)
    return path


def forget_up(state: Path) -> None:
    """Remove the note if it is still this process's."""
    path = state / UP_CONFIG_FILE
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        if json.loads(path.read_text(encoding="utf-8"))["pid"] == os.getpid():
            path.unlink()


def _live_note(state: Path) -> dict | None:
    """The note of the ``memoryd up`` running on ``state``; None when none runs."""
    try:
        found = json.loads((state / UP_CONFIG_FILE).read_text(encoding="utf-8"))
        os.kill(int(found["pid"]), 0)
    except PermissionError:
        pass  # alive, another user's
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none, or it died without removing its note
    return found


def up_pid(state: Path) -> int | None:
    """The pid of the ``memoryd up`` running on ``state``, if one runs."""
    found = _live_note(state)
    return int(found["pid"]) if found else None


def running_up(state: Path) -> tuple[bool, str | None]:
    """(whether a ``memoryd up`` runs on ``state``, the config file it was started with)."""
    found = _live_note(state)
    if found is None:
        return False, None
    config = found.get("config")
    return True, config if isinstance(config, str) else None
