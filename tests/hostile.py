"""Hostile files for tests: names that are not UTF-8, a folder 1,000 levels deep, a FIFO named ``x.md``.

Deep trees are made and removed without long paths or recursion (``shutil.rmtree`` recurses
once per level on Python 3.11 and would fail pytest's own clean-up), so a test that makes
one removes it with :func:`remove_tree` when it ends (:func:`hostile_files` does).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEPTH = 1000
LATIN1_NAME = b"caf\xe9.md"
LATIN1_FOLDER = b"d\xfcsseldorf"


def deep_tree(base: Path, depth: int = DEPTH) -> Path:
    """``base/a/a/…/a`` ``depth`` levels deep, made level by level (the whole path is too long
    for one call), with ``shallow.md`` 5 levels down and ``bottom.md`` at the bottom; → ``base``."""
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY)
    try:
        for level in range(depth):
            os.mkdir("a", dir_fd=fd)
            child = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
            if level in (4, depth - 1):
                name = "shallow.md" if level == 4 else "bottom.md"
                out = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
                os.write(out, f"note at level {level + 1}\n".encode())
                os.close(out)
    finally:
        os.close(fd)
    return base


def remove_tree(root: Path) -> None:
    """``rm -r root`` with short paths and no recursion: every grandchild folder is moved up
    into ``root``, then each child (now holding only files) is emptied and removed."""
    hoisted = itertools.count()
    while children := list(os.scandir(root)):
        for child in children:
            if not child.is_dir(follow_symlinks=False):
                os.unlink(child.path)
                continue
            for grandchild in list(os.scandir(child.path)):
                if grandchild.is_dir(follow_symlinks=False):
                    os.rename(grandchild.path, os.path.join(root, f"hoisted-{next(hoisted)}"))
                else:
                    os.unlink(grandchild.path)
            os.rmdir(child.path)
    os.rmdir(root)


def write_hostile(memory: Path) -> None:
    """In ``memory``: ``fine.md``, ``caf\\xe9.md`` and ``d\\xfcsseldorf/trip.md`` (Latin-1 names),
    a FIFO ``x.md`` and ``deep/`` (:func:`deep_tree`)."""
    raw = os.fsencode(memory)
    (memory / "fine.md").write_text("A fine note about the garden.\n")
    with open(os.path.join(raw, LATIN1_NAME), "wb") as f:
        f.write(b"a name from an old Latin-1 system\n")
    os.mkdir(os.path.join(raw, LATIN1_FOLDER))
    with open(os.path.join(raw, LATIN1_FOLDER, b"trip.md"), "wb") as f:
        f.write(b"trip\n")
    os.mkfifo(memory / "x.md")
    deep_tree(memory / "deep")


@contextmanager
def hostile_files(memory: Path) -> Iterator[Path]:
    """:func:`write_hostile` into ``memory`` for the block; deep trees (``deep*``) are removed afterwards."""
    try:
        write_hostile(memory)
        yield memory
    finally:
        for tree in memory.glob("deep*"):
            remove_tree(tree)
