"""Words for people: plurals, results as text (not Python values), and search snippets cut where they say so."""

from __future__ import annotations

import re

#: Snippet lines `memoryd search` shows before it cuts (after the line that matched, if later).
SNIPPET_LINES = 8


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``, ``0 files``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def spoken(value: object) -> str:
    """A value as a person reads it: ``yes``/``no``, ``—`` for nothing, a dict as ``key value, …``,
    a list comma-separated (``none`` when empty) — never Python's ``True``, ``None`` or ``{'a': 1}``."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{words(str(k))} {spoken(v)}" for k, v in value.items() if v is not None) or "none"
    if isinstance(value, list | tuple):
        return ("; " if any(isinstance(v, dict) for v in value) else ", ").join(spoken(v) for v in value) or "none"
    return str(value)


def words(key: str) -> str:
    """A field name as words: ``workspaceCreated`` and ``files_skipped`` → ``workspace created``, ``files skipped``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: " " + m[1].lower(), key).replace("_", " ")


def key_lines(data: dict[str, object]) -> str:
    """One ``key: value`` line per field, in words; fields that are None are left out."""
    return "\n".join(f"{words(key)}: {spoken(value)}" for key, value in data.items() if value is not None)


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
