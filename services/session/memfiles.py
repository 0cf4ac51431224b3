"""The only three ways the session service writes memory, all append-only by construction.

- :func:`append_daily` appends to ``memory/YYYY-MM-DD.md``: ``O_APPEND`` (never truncates),
  an exclusive ``flock`` (concurrent writers never interleave), one ``write``.
- :func:`save_note` creates ``memory/YYYY-MM-DD-<slug>.md`` with ``O_EXCL``: an existing
  note is never replaced; a second note on the same topic gets ``-2``, ``-3``, ….
- :func:`append_promoted` appends an accepted promotion to MEMORY.md, SOUL.md or TOOLS.md,
  the same way as the daily log; only ``memoryd promote accept`` (a person) calls it.

The paths are built here from a date, a slug or that fixed list of three names, never taken
from model output, and neither ``memory/`` nor the file may be a symlink: AGENTS.md and the
other workspace files cannot be reached through these functions, and the identity files only
by an accept.

Secrets stay out of memory (SPEC §8): ``memoryd.shared.secrets.redact`` replaces private
keys, well-known API-token shapes and the value after ``password:`` / ``token =`` /
``api key is`` … with ``[redacted]`` before anything is written. It is a pattern list, not
a guarantee.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from memoryd.shared import defaults as d
from memoryd.shared.exceptions import PathRefused
from memoryd.shared.secrets import redact

MEMORY_DIR = "memory"
#: The files an accepted promotion may be appended to (never AGENTS.md, USER.md, …).
PROMOTION_TARGETS = ("MEMORY.md", "SOUL.md", "TOOLS.md")
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def memory_dir(workspace: Path) -> Path:
    directory = workspace / MEMORY_DIR
    if directory.is_symlink():
        raise PathRefused(f"{directory} is a symlink; the session service writes only into a real memory/ folder")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def daily_path(day: date) -> str:
    return f"{MEMORY_DIR}/{day.isoformat()}.md"


def append_daily(workspace: Path, day: date, text: str) -> str:
    """Append ``text`` (as its own block) to the day's log; → its workspace-relative path.

    ``PathRefused`` when the file is a symlink or not a regular file (a FIFO is opened without
    blocking and never written); ``OSError`` when it cannot be written (read-only, full disk).
    """
    _append(memory_dir(workspace) / f"{day.isoformat()}.md", daily_path(day), text)
    return daily_path(day)


def append_promoted(workspace: Path, target: str, text: str) -> int:
    """Append one accepted promotion to ``target`` (only MEMORY.md, SOUL.md or TOOLS.md, at the
    workspace's top); → the line that now holds its first line. Earlier lines are never touched."""
    if target not in PROMOTION_TARGETS:
        raise PathRefused(f"{target} is not a promotion target; only {', '.join(PROMOTION_TARGETS)} are")
    return _append(workspace / target, target, text)


def _append(path: Path, rel: str, text: str) -> int:
    """``text`` appended to ``path`` as its own block: ``O_APPEND`` (never truncates), ``O_NOFOLLOW``,
    a regular file only, one ``write`` under an exclusive ``flock``; → the line its block starts on."""
    try:
        fd = os.open(path, _APPEND | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathRefused(f"{rel} is a symlink; the session service never writes through one") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PathRefused(f"{rel} is not a regular file (a FIFO or a device); the session "
                              "service writes only to real files")
        os.set_blocking(fd, True)
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        block = redact(text).strip("\n") + "\n"
        existing = os.pread(fd, size, 0).count(b"\n") if size else 0
        if size:
            last = os.pread(fd, 1, size - 1)
            block = ("\n" if last == b"\n" else "\n\n") + block
            existing += 1 if last == b"\n" else 2
        data = block.encode("utf-8")
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)
    return existing + 1


@dataclass(frozen=True)
class DailyWrite:
    """What became of a block for the day's log: written (``files``), or why not and the text."""

    files: list[str]
    error: str | None = None
    unwritten: str | None = None  # redacted, like what would have been written


def write_daily(workspace: Path, day: date, text: str) -> DailyWrite:
    """:func:`append_daily`, or — when the file cannot be written — why, and the text it would have held."""
    try:
        return DailyWrite([append_daily(workspace, day, text)])
    except PathRefused as exc:
        error = str(exc)
    except OSError as exc:
        error = f"cannot append to {daily_path(day)}: {exc.strerror}"
    return DailyWrite([], error, redact(text).strip("\n"))


def slugify(raw: str | None) -> str | None:
    if not raw:
        return None
    slug = re.sub(r"[^a-z0-9]+", "-", raw.lower()).strip("-")[:d.MAX_SLUG_CHARS].strip("-")
    return slug or None


def save_note(workspace: Path, day: date, slug: str, text: str) -> str:
    """Create ``memory/<day>-<slug>.md`` (or ``-<slug>-2.md`` …) holding ``text``; → its path."""
    directory = memory_dir(workspace)
    data = (redact(text).strip("\n") + "\n").encode("utf-8")
    for n in range(1, 1000):
        name = f"{day.isoformat()}-{slug}{'' if n == 1 else f'-{n}'}.md"
        try:
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
        except FileExistsError:
            continue
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)
        return f"{MEMORY_DIR}/{name}"
    raise PathRefused(f"999 notes named {day.isoformat()}-{slug}*.md already exist in {directory}")
