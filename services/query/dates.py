"""Dates of memory files: a daily note's date is the ISO date its file name starts with.

``memory/2026-01-20.md`` and ``memory/2026-01-20-standup.md`` (a session note) are dated
2026-01-20; ``MEMORY.md`` and most extraPath files have no date. Used by memory_search
(the ``after``/``before`` filters, temporal decay).
"""

from __future__ import annotations

import datetime as dt
import functools
import re

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")


@functools.lru_cache(maxsize=65536)
def path_date(path: str) -> dt.date | None:
    """The date a file's name starts with (``memory/2026-01-20-standup.md`` → 2026-01-20), or None."""
    match = _DATE.match(path.rsplit("/", 1)[-1])
    if not match:
        return None
    try:
        return dt.date.fromisoformat(match.group(1))
    except ValueError:
        return None

