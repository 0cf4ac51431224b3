"""Which files of an agent are memory, and how an index path maps to a file on disk.

Used by the watcher (what to emit), the chunker (what to read) and the query service
(what ``memory_get`` may read), so all three agree. Memory files are ``MEMORY.md``,
``memory.md``, ``memory/**/*.md`` (source ``memory``) and ``*.md`` under each extraPath
(its own source name). Hidden folders and symlinks are never followed or read.

Index paths are POSIX and relative: workspace-relative for files inside the workspace,
``<source>/<relative path>`` for an extraPath that lies outside it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from memoryd.shared.config import AgentConfig
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
        """The memory file at ``absolute``, or None if it is not one (wrong place or name)."""
        if absolute.suffix.lower() != ".md":
            return None
        if absolute.parent == self.directory and absolute.name in ROOT_FILES:
            return MemoryFile(absolute.name, absolute, self.directory, absolute.name, "memory")
        for root in sorted(self.roots, key=lambda r: len(r.directory.parts), reverse=True):
            try:
                rel = absolute.relative_to(root.directory)
            except ValueError:
                continue
            if any(part.startswith(".") for part in rel.parts):
                return None
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
        for name in ROOT_FILES:
            candidate = self.directory / name
            if _regular(candidate):
                found = self.classify(candidate)
                if found:
                    yield found
        seen: set[str] = set()
        for root in self.roots:
            if not root.directory.is_dir() or root.directory.is_symlink():
                continue
            for dirpath, dirnames, filenames in os.walk(root.directory, followlinks=False):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                                     and not os.path.islink(os.path.join(dirpath, d)))
                for name in sorted(filenames):
                    candidate = Path(dirpath) / name
                    if name.startswith(".") or not _regular(candidate):
                        continue
                    found = self.classify(candidate)
                    if found and found.path not in seen:
                        seen.add(found.path)
                        yield found

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

    def _candidate(self, pure: PurePosixPath) -> tuple[Path, str] | None:
        text = pure.as_posix()
        if text in ROOT_FILES:
            return self.directory, text
        for root in sorted(self.roots, key=lambda r: len(r.prefix), reverse=True):
            if root.prefix and text.startswith(root.prefix + "/"):
                return root.directory, text[len(root.prefix) + 1:]
        return None


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB blocks (a 50 MB file costs no 50 MB of memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _regular(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode)


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False
