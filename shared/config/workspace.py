"""Which files of an agent are memory, and how an index path maps to a file on disk.

Used by the watcher (what to emit), the chunker (what to read) and the query service
(what ``memory_get`` may read), so all three agree. Memory files are ``MEMORY.md``,
``memory.md``, ``memory/**/*.md`` (source ``memory``) and ``*.md`` under each extraPath
(its own source name). Hidden folders and symlinks are never followed or read.

Hostile trees are walked safely: with an explicit stack (no recursion), at most
``MAX_DIR_DEPTH`` folders deep; names that are not valid UTF-8 are not carried (an index
path is UTF-8 text) but reported. :meth:`Workspace.survey` returns both the memory files
and what it skipped with the reason, which the watcher records in the index as skipped
entries (``memoryd status`` lists them). Files are read through :func:`open_regular`: a
FIFO, socket or device named ``x.md`` is refused before a byte is read, and never blocks.

Index paths are POSIX and relative: workspace-relative for files inside the workspace,
``<source>/<relative path>`` for an extraPath that lies outside it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import AgentConfig
from memoryd.shared.exceptions import PathRefused

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"


@dataclass(frozen=True)
class Root:
    """A folder whose ``*.md`` files are indexed under ``prefix`` with source ``source``."""

    directory: Path
    prefix: str  # "" for the workspace itself
    source: str


@dataclass(frozen=True)
class MemoryFile:
    path: str  # index path
    absolute: Path
    root: Path
    rel: str  # path inside root
    source: str


@dataclass(frozen=True)
class Skipped:
    """Something in a memory folder that is not walked or indexed, and why (shown by ``memoryd status``)."""

    path: str  # the index path it would have; bytes that are not UTF-8 written as \xNN
    source: str
    reason: str


@dataclass
class Survey:
    files: list[MemoryFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


class Workspace:
    def __init__(self, agent: AgentConfig) -> None:
        self.agent = agent
        self.directory = agent.workspace.resolve() if agent.workspace.exists() else agent.workspace
        self.roots: list[Root] = [Root(self.directory / MEMORY_DIR, MEMORY_DIR, "memory")]
        for extra in agent.extra_paths:
            raw = Path(extra.path).expanduser()
            directory = (raw if raw.is_absolute() else self.directory / raw).resolve()
            try:
                prefix = directory.relative_to(self.directory).as_posix()
            except ValueError:
                prefix = extra.source
            self.roots.append(Root(directory, prefix, extra.source))

    # --- classification ---------------------------------------------------------------
    def classify(self, absolute: Path) -> MemoryFile | None:
        """The memory file at ``absolute``, or None if it is not one (wrong place or name, a name
        that is not UTF-8, deeper than ``MAX_DIR_DEPTH``: :meth:`survey` reports those)."""
        if absolute.suffix.lower() != ".md" or not is_utf8(str(absolute)):
            return None
        if absolute.parent == self.directory and absolute.name in ROOT_FILES:
            return MemoryFile(absolute.name, absolute, self.directory, absolute.name, "memory")
        for root in sorted(self.roots, key=lambda r: len(r.directory.parts), reverse=True):
            try:
                rel = absolute.relative_to(root.directory)
            except ValueError:
                continue
            if any(part.startswith(".") for part in rel.parts) or len(rel.parts) - 1 > d.MAX_DIR_DEPTH:
                return None
            if _through_symlink(root.directory, rel.parts[:-1]):
                return None  # a symlinked folder could lead into another agent's workspace
            path = f"{root.prefix}/{rel.as_posix()}" if root.prefix else rel.as_posix()
            return MemoryFile(path, absolute, root.directory, rel.as_posix(), root.source)
        return None

    def watch_dirs(self) -> list[Path]:
        """Folders the watcher subscribes to (the workspace holds MEMORY.md and memory/)."""
        dirs = [self.directory]
        dirs += [r.directory for r in self.roots[1:] if not _inside(r.directory, self.directory)]
        return dirs

    def scan(self) -> Iterator[MemoryFile]:
        """Every memory file on disk now. Symlinks and hidden folders are skipped."""
        yield from self.survey().files

    def survey(self) -> Survey:
        """Every memory file on disk now, and what was skipped with the reason (see the module doc)."""
        found = Survey()
        for name in ROOT_FILES:
            candidate = self.directory / name
            if _regular(candidate) and (memory_file := self.classify(candidate)):
                found.files.append(memory_file)
        seen: set[str] = set()
        for root in self.roots:
            if root.directory.is_dir() and not root.directory.is_symlink():
                self._walk(root, found, seen)
        return found

    def _walk(self, root: Root, found: Survey, seen: set[str]) -> None:
        """Depth-first, sorted, with a stack of (folder, depth): a deep tree costs memory, not recursion."""

        def skip(path: str, reason: str) -> None:
            shown = _shown(f"{root.prefix}/{path}" if root.prefix else path)
            if shown not in seen:
                seen.add(shown)
                found.skipped.append(Skipped(shown, root.source, reason))

        stack: list[tuple[str, int]] = [(str(root.directory), 0)]
        while stack:
            folder, depth = stack.pop()
            rel = os.path.relpath(folder, root.directory)
            try:
                with os.scandir(folder) as listing:
                    entries = sorted(listing, key=lambda e: e.name)
            except OSError as exc:
                skip(rel, f"folder cannot be listed ({exc.strerror}); its files are not indexed")
                continue
            folders = []
            for entry in entries:
                if entry.name.startswith(".") or entry.is_symlink():
                    continue
                path = os.path.normpath(os.path.join(rel, entry.name))
                if entry.is_dir(follow_symlinks=False):
                    if not is_utf8(entry.name):
                        skip(path, "folder name is not valid UTF-8; the files in it are not indexed: rename it")
                    elif depth + 1 > d.MAX_DIR_DEPTH:
                        skip(path, f"folder is nested more than {d.MAX_DIR_DEPTH} levels deep; the files in it "
                                   "are not indexed: move them up")
                    else:
                        folders.append(entry.path)
                elif entry.is_file(follow_symlinks=False) and entry.name.lower().endswith(".md"):
                    if not is_utf8(entry.name):
                        skip(path, "file name is not valid UTF-8; it is not indexed: rename it (e.g. `convmv`)")
                    elif (memory_file := self.classify(Path(entry.path))) and memory_file.path not in seen:
                        seen.add(memory_file.path)
                        found.files.append(memory_file)
            stack.extend((sub, depth + 1) for sub in reversed(folders))

    # --- reading (memory_get) ---------------------------------------------------------
    def resolve(self, path: str) -> MemoryFile:
        """The memory file an index path names, refusing anything the agent may not read."""
        if not isinstance(path, str) or not path.strip():
            raise PathRefused("path is empty; pass a path like memory/2026-01-20.md")
        if "%" in path or "\\" in path or "\x00" in path:
            raise PathRefused(f"path {path!r} contains an encoded or escaped character; pass it plainly")
        pure = PurePosixPath(path)
        if pure.is_absolute() or path.startswith("~"):
            raise PathRefused(f"path {path!r} is absolute; pass it relative to the workspace (memory/…)")
        if ".." in pure.parts:
            raise PathRefused(f"path {path!r} climbs out with '..'; memory paths stay inside the workspace")
        if pure.suffix.lower() != ".md":
            raise PathRefused(f"path {path!r} is not a Markdown (.md) file; only memory files can be read")
        candidate = self._candidate(pure)
        if candidate is None:
            raise PathRefused(
                f"path {path!r} is not a memory file of agent {self.agent.id!r}; readable are MEMORY.md, "
                "memory/**/*.md and the agent's extraPaths"
            )
        root, rel = candidate
        absolute = root / rel
        if root != self.directory and root.is_symlink():
            raise PathRefused(f"path {path!r} goes through a symlinked folder; memory files must be real files")
        current = root
        for part in PurePosixPath(rel).parts:
            current = current / part
            if current.is_symlink():
                raise PathRefused(f"path {path!r} goes through a symlink; memory files must be real files")
        found = self.classify(absolute)
        if found is None or found.path != pure.as_posix():
            raise PathRefused(f"path {path!r} is not a memory file of agent {self.agent.id!r}")
        return found

    def locate(self, root: str, rel: str, path: str) -> MemoryFile:
        """The memory file a pipeline event names by ``root``, ``rel`` and index ``path``, refusing
        (PathRefused) one that is not this agent's: a root that is not one of its folders, a path
        that climbs out, a symlinked folder on the way, or an index path that does not match. A
        job payload cannot make the chunker read another agent's file."""
        pure = PurePosixPath(rel)
        if not rel or pure.is_absolute() or ".." in pure.parts:
            raise PathRefused(f"path {rel!r} leaves its root; refusing to read it")
        folder = Path(root)
        if folder != self.directory and folder not in {r.directory for r in self.roots}:
            raise PathRefused(f"{root} is not a memory folder of agent {self.agent.id!r}; refusing to read {path!r}")
        found = self.classify(folder / pure)
        if found is None or found.path != path:
            raise PathRefused(f"{path!r} is not a memory file of agent {self.agent.id!r} (hidden, too deep, "
                              "through a symlinked folder, or named differently); refusing to read it")
        return found

    def _candidate(self, pure: PurePosixPath) -> tuple[Path, str] | None:
        text = pure.as_posix()
        if text in ROOT_FILES:
            return self.directory, text
        for root in sorted(self.roots, key=lambda r: len(r.prefix), reverse=True):
            if root.prefix and text.startswith(root.prefix + "/"):
                return root.directory, text[len(root.prefix) + 1:]
        return None


class NotRegularFile(OSError):
    """A memory path that is not a regular file (a FIFO, socket, device, folder or symlink): never read.
    The message says what it is (``a FIFO (named pipe), not a regular file; …``), without the path."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a folder" if stat.S_ISDIR(mode) else "something else"


def open_regular(path: Path) -> int:
    """A read-only descriptor of the regular file at ``path``, or ``NotRegularFile``.

    ``O_NOFOLLOW`` refuses a symlink and ``O_NONBLOCK`` keeps a FIFO from blocking the open;
    ``fstat`` then checks what was opened before a byte is read, and the descriptor is made
    blocking again for reading. ``FileNotFoundError`` passes through.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            kind = "a symlink" if exc.errno == errno.ELOOP else "a socket"
            raise NotRegularFile(f"{kind}, not a regular file; memory files must be real files") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{_kind(mode)}, not a regular file; memory files must be real files")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def file_sha256(path: Path) -> str:
    """sha256 of a regular file, read in 1 MiB blocks (a 50 MB file costs no 50 MB of memory)."""
    digest = hashlib.sha256()
    with os.fdopen(open_regular(path), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_utf8(name: str) -> bool:
    """Whether a name from the file system is valid UTF-8 (Python decodes other bytes to surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(path: str) -> str:
    """``path`` as UTF-8 text: bytes that are not UTF-8 become ``\\xNN`` (lossy, for messages only)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _regular(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode)


def _through_symlink(root: Path, folders: tuple[str, ...]) -> bool:
    """Whether ``root`` or a folder on the way from it (``folders``) is a symlink."""
    if root.is_symlink():
        return True
    current = root
    for part in folders:
        current = current / part
        if current.is_symlink():
            return True
    return False


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False
