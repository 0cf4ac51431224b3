"""The agent registry, ``<stateDir>/agents.json``: agents added with ``memoryd agents add``
(or ``memoryd index --agent A --workspace W``), beside the config file's ``agents.list``.

Shape (version 2)::

    {"version": 2, "agents": {"work": {"workspace": "/home/u/clawd-work",
                                        "extraPaths": [{"path": "/srv/wiki", "source": "kb"}],
                                        "memorySearch": {"provider": "hash"}}}}

Each entry holds the fields of an ``agents.list[]`` entry (camelCase). memoryd 0.1 wrote
``{"<id>": "<workspace>"}``; that shape is read as version 2 and rewritten as version 2
on the next change. Writes are read-modify-write under an exclusive ``flock`` and land
whole (temp file + rename), so two ``memoryd agents add`` at once lose nothing, and a
reader sees the old file or the new one. Running processes notice a change by the file's
:func:`stamp` (a new inode on every write) and reload their agents.

This module only reads and writes the file; what the entries mean is shared/config/settings.py's.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memoryd.shared.exceptions import ConfigError

REGISTRY_FILE = "agents.json"
VERSION = 2

Entries = dict[str, dict[str, Any]]

#: The stamp a process starts from: no registry's, so its first check reads the registry again.
#: Its settings were loaded before it could take a stamp; a stamp taken then would hide a write in
#: between (a watcher noting a Chinese memory as the workers start), and never be read.
UNREAD = (-1, -1, -1)


def path_of(state_dir: Path) -> Path:
    return state_dir / REGISTRY_FILE


def stamp(state_dir: Path) -> tuple[int, int, int] | None:
    """What changes whenever the registry is written (inode, size, mtime); None when there is none."""
    try:
        st = os.stat(path_of(state_dir))
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def read(state_dir: Path) -> Entries:
    """id → entry (camelCase fields of an ``agents.list[]`` entry); {} when there is no registry."""
    registry = path_of(state_dir)
    try:
        data = json.loads(registry.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"agent registry {registry} is not valid JSON ({exc}); fix or delete that file") from None
    if isinstance(data, dict) and "version" not in data and all(isinstance(v, str) for v in data.values()):
        return {agent_id: {"workspace": workspace} for agent_id, workspace in data.items()}  # memoryd 0.1
    if (not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("agents"), dict)
            or not all(isinstance(v, dict) for v in data["agents"].values())):
        raise ConfigError(f"agent registry {registry} has an unknown shape; expected "
                          f'{{"version": {VERSION}, "agents": {{...}}}}: fix or delete that file')
    return dict(data["agents"])


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / f".{REGISTRY_FILE}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update(state_dir: Path, change: Callable[[Entries], None]) -> Entries:
    """Apply ``change`` to the entries under the registry's lock and write them back; → the new entries."""
    with _locked(state_dir):
        entries = read(state_dir)
        change(entries)
        registry = path_of(state_dir)
        tmp = registry.with_name(f".{registry.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"version": VERSION, "agents": entries}, indent=2, sort_keys=True),
                       encoding="utf-8")
        os.replace(tmp, registry)
    return entries


# --- isolation: no agent's files inside another's ----------------------------------------
def _related(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def overlap(agents: Mapping[str, tuple[Path, Sequence[Path]]]) -> str | None:
    """Why two agents' folders overlap, or None. ``agents``: id → (workspace, extraPaths), resolved.

    An agent's workspace may not lie inside, contain or equal another agent's workspace,
    and none of its extraPaths may overlap another agent's workspace: the watcher would
    index one agent's files as the other's. Two agents may share a knowledge base
    (the same extraPath): that is reading, not another agent's memory.
    """
    items = sorted(agents.items())
    for i, (a, (ws_a, extra_a)) in enumerate(items):
        for b, (ws_b, extra_b) in items[i + 1:]:
            if _related(ws_a, ws_b):
                return (f"agents {a!r} ({ws_a}) and {b!r} ({ws_b}) have overlapping workspaces; give each "
                        "agent its own folder")
            for (owner, extras), (other, ws) in (((a, extra_a), (b, ws_b)), ((b, extra_b), (a, ws_a))):
                for extra in extras:
                    if _related(extra, ws):
                        return (f"extraPath {extra} of agent {owner!r} overlaps the workspace {ws} of agent "
                                f"{other!r}; an agent's extraPaths may not reach another agent's memory")
    return None
