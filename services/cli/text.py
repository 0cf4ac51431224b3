"""Words for people: plurals, and search snippets cut where they say so."""

from __future__ import annotations

import re

#: Snippet lines `memoryd search` shows before it cuts (after the line that matched, if later).
SNIPPET_LINES = 8


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``, ``0 files``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def snippet_lines(text: str, query: str | None, chunk_lines: int) -> list[str]:
    """The snippet's lines to show: all of them up to SNIPPET_LINES, else up to the first line
    holding a word of ``query`` (at least SNIPPET_LINES); ``…`` where the snippet was cut or is
    shorter than its chunk's ``chunk_lines`` (``memoryd get`` reads the rest)."""
    lines = text.splitlines()
    shown = lines
    if len(lines) > SNIPPET_LINES:
        terms = [t for t in re.findall(r"\w+", (query or "").lower()) if len(t) > 1]
        hit = next((i for i, line in enumerate(lines) if any(t in line.lower() for t in terms)), None)
        shown = lines[:max(SNIPPET_LINES, (hit or 0) + 1)]
    return shown + (["…"] if len(shown) < max(len(lines), chunk_lines) else [])
