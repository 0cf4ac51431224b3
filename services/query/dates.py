"""Dates of memory files, and the dates a question names.

A daily note's date is the ISO date its file name starts with: ``memory/2026-01-20.md`` and
``memory/2026-01-20-standup.md`` (a session note) are dated 2026-01-20; ``MEMORY.md`` and most
extraPath files have no date. Used by memory_search (the ``after``/``before`` filters, temporal
decay). A question's dates written in words (``on 9 November, 2022``, ``March 3rd``, ``in
December 2023``) are :func:`mentions`: the keyword side looks them up in the files' dates.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")

MONTHS = {name: n for n, names in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
     ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
     ("december", "dec")], start=1) for name in names}
_MONTH = r"(?P<{}>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{}>(?:19|20)\d\d)"
#: A date in words: day month [year] ("9 November, 2022", "3rd of March"), month day [year]
#: ("March 3rd, 2026", "Nov 9"), month year ("December 2023"). Longest forms first.
_MENTION = re.compile(r"\b(?:" + "|".join([
    _DAY.format("d1") + r"\s+(?:of\s+)?" + _MONTH.format("m1") + r"(?:,\s*|\s+)" + _YEAR.format("y1"),
    _MONTH.format("m2") + r"\s+" + _DAY.format("d2") + r"(?:,\s*|\s+)" + _YEAR.format("y2"),
    _MONTH.format("m3") + r"(?:,\s*|\s+)" + _YEAR.format("y3"),
    _DAY.format("d4") + r"\s+(?:of\s+)?" + _MONTH.format("m4"),
    _MONTH.format("m5") + r"\s+" + _DAY.format("d5"),
]) + r")\b", re.IGNORECASE)


@dataclass(frozen=True)
class Mention:
    """A date a question names: where it stands in the question, and the part of a file's ISO
    date it names ("2022-11-09", a month "2022-11", a day of any year "11-09")."""

    start: int
    end: int
    iso: str


def mentions(text: str) -> list[Mention]:
    """The dates ``text`` names in words; an impossible one (31 June) is not a date."""
    out = []
    for m in _MENTION.finditer(text):
        n = next(i for i in range(1, 6) if m.group(f"m{i}"))
        word = m.group(f"m{n}")
        month = MONTHS[word.lower()]
        day = int(m.group(f"d{n}")) if n != 3 else None
        year = int(m.group(f"y{n}")) if n <= 3 else None
        if word == "may" and year is None:
            continue  # "they may 3 times": the verb, unless written as the month's name
        try:
            dt.date(year or 2000, month, day or 1)  # 2000: a leap year, so 29 February stands
        except ValueError:
            continue
        parts = ([f"{year:04d}"] if year else []) + [f"{month:02d}"] + ([f"{day:02d}"] if day else [])
        out.append(Mention(m.start(), m.end(), "-".join(parts)))
    return out


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

