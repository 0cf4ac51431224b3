"""What the heartbeat may promote, and which of it recurs: pure functions over daily-log lines.

:func:`statements` reads one daily log and keeps the lines that could be promoted. Never
kept (docs/sessions.md, "What is never promoted"):

- headings, blank lines, the heartbeat's own lines (``HEARTBEAT_OK``, anything naming the
  heartbeat) and ``NO_REPLY``;
- tool output: fenced blocks, ``[tool result …]`` / ``tool:`` lines, shell prompts, log lines;
- lines that look like a secret (``memoryd.shared.secrets``: what ``redact`` would change);
- lines shorter than ``minChars`` or with fewer than three content words;
- lines of another agent: a section whose heading names another configured agent
  (``## From agent work``), or a line that starts with one (``[work]``, ``work:``, ``agent work:``).

:func:`recurring` groups the statements of *different days* that say the same thing: their
embeddings' cosine reaches ``similarity``, their content words overlap by ``overlap``
(Jaccard) and they hold no conflicting identifiers (numbers, ``team-zeta``, ``@handles``,
capitalised names: "deploy on Tuesday at 14:00" and "… at 16:00", or "debugged it with Bob"
and "… with Carol", are two statements, not one). Identifiers conflict when neither line
names every identifier of the other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from memoryd.shared.secrets import redact

_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")
#: A speaker or time the flush and the notes put in front of a line: "user:", "**Alice**:", "14:05".
_PREFIX = re.compile(r"^(?:(?:user|assistant)\s*:\s*|\*\*[^*]{1,40}\*\*\s*:\s*|\d{1,2}:\d{2}\s*[-–:]?\s*)",
                     re.IGNORECASE)
_HEARTBEAT = re.compile(r"heartbeat|HEARTBEAT_OK|\bNO_REPLY\b", re.IGNORECASE)
_TOOL = re.compile(r"^(?:\[tool result|tool\s*:|\$ |>>> |# ?\$ |Traceback|\w+Error:|exit code)"
                   r"|^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}\S*\s+(?:DEBUG|INFO|WARN|WARNING|ERROR)\b",
                   re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'_-]*|\d[\w:.-]*|[\u3400-\u9fff]")
#: Identifiers: a value that makes two otherwise equal lines different statements — numbers and
#: times, ``team-zeta``, ``@handles``, and names (a capitalised word after the first).
_IDENT = re.compile(r"@\w+|\b\w*\d[\w:.-]*\b|\b[a-z]+(?:[-_][a-z0-9]+)+\b", re.IGNORECASE)
_NAME = re.compile(r"(?<=[\w,;)]\s)[A-Z][A-Za-z]+\b")
_STOP = frozenset(re.split(r"\s+", """
a an the and or but if then so of to in on at by for with from as is are was were be been
being am it its this that these those there here we i you he she they them us our your my
me his her their do does did done not no yes can could will would shall should may might
must have has had just also very into onto over under about after before again than too
only own same such what which who whom when where why how all any both each few more most
other some nor up down out off once today now
""".strip()))
_CJK = re.compile(r"[\u3400-\u9fff]")


@dataclass(frozen=True)
class Statement:
    """A line of a daily log that could be promoted."""

    path: str
    line: int
    day: str
    text: str  # as written, without its bullet
    words: frozenset[str]  # content words, lowercase


#: Endings cut from a word before lines are compared ("deleting" and "delete", "peanuts" and "peanut").
_SUFFIXES = ("ing", "ed", "es", "ic", "y", "s", "e")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[:-len(suffix)]
    return word


def content_words(text: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in (m.lower().strip("'-_") for m in _WORD.findall(text))
                     if w and w not in _STOP and (len(w) > 2 or _CJK.match(w) or w[0].isdigit()))


def identifiers(text: str) -> frozenset[str]:
    return frozenset(m.lower() for m in _IDENT.findall(text) + _NAME.findall(text))


def _length(text: str) -> int:
    """Characters, a CJK character counting as three (a Chinese line says in 20 what English says in 60)."""
    return len(text) + 2 * len(_CJK.findall(text))


def _names_other_agent(text: str, others: frozenset[str]) -> bool:
    words = re.findall(r"[a-z0-9][\w.-]*", text.lower())
    return ("agent" in words or "from" in words) and any(w in others for w in words)


def _starts_with_other_agent(text: str, others: frozenset[str]) -> bool:
    match = re.match(r"^(?:\[([A-Za-z0-9_.-]+)\]|(?:agent\s+)?([A-Za-z0-9_.-]+)\s*:)", text, re.IGNORECASE)
    return bool(match and (match.group(1) or match.group(2)).lower() in others)


def strip_line(raw: str) -> str:
    """A line without its bullet, checkbox and speaker or time prefix."""
    return _PREFIX.sub("", _BULLET.sub("", raw.strip()), count=1).strip()


def statements(path: str, day: str, text: str, *, others: Iterable[str], min_chars: int) -> list[Statement]:
    """The promotable lines of one daily log (``path``, dated ``day``), in order."""
    other = frozenset(o.lower() for o in others)
    found: list[Statement] = []
    fenced = foreign = beat = False
    for number, raw in enumerate(text.split("\n"), start=1):
        if _FENCE.match(raw):
            fenced = not fenced
            continue
        stripped = raw.strip()
        if fenced or not stripped:
            continue
        if stripped.startswith("#"):
            foreign = _names_other_agent(stripped, other)
            beat = bool(_HEARTBEAT.search(stripped))
            continue
        body = strip_line(stripped)
        if (foreign or beat or not body or _HEARTBEAT.search(body) or _TOOL.search(body)
                or _starts_with_other_agent(body, other) or redact(raw) != raw):
            continue
        words = content_words(body)
        if _length(body) < min_chars or len(words) < 3:
            continue
        found.append(Statement(path, number, day, body, words))
    return found


def same_statement(a: Statement | str, b: Statement | str, cosine: float, *, similarity: float,
                   overlap: float) -> bool:
    """Whether two lines say the same thing (the module doc's three tests)."""
    ta, tb = (x.text if isinstance(x, Statement) else x for x in (a, b))
    wa, wb = (x.words if isinstance(x, Statement) else content_words(x) for x in (a, b))
    if cosine < similarity or not wa or not wb:
        return False
    if len(wa & wb) / len(wa | wb) < overlap:
        return False
    ia, ib = identifiers(ta), identifiers(tb)
    return ia <= ib or ib <= ia  # one names every identifier of the other: it adds detail, not a new value


@dataclass
class Group:
    """Statements of several days that say the same thing, oldest first."""

    members: list[Statement] = field(default_factory=list)

    @property
    def days(self) -> list[str]:
        return sorted({m.day for m in self.members})

    def per_day(self) -> list[Statement]:
        """The first occurrence of each day: the provenance of a proposal."""
        seen: dict[str, Statement] = {}
        for m in sorted(self.members, key=lambda s: (s.day, s.line)):
            seen.setdefault(m.day, m)
        return list(seen.values())


def recurring(found: Sequence[Statement], vectors: np.ndarray, *, similarity: float, overlap: float,
              min_days: int) -> list[Group]:
    """Groups (single link over :func:`same_statement`) seen on at least ``min_days`` days.

    ``vectors``: one L2-normalised row per statement, in the order of ``found``."""
    parent = list(range(len(found)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    cosines = vectors @ vectors.T if len(found) else np.zeros((0, 0))
    # Only pairs close enough in meaning get the word tests: a few among the n² of a busy log.
    for i, j in np.argwhere(np.triu(cosines >= similarity, k=1)):
        if found[i].day != found[j].day and same_statement(found[i], found[j], float(cosines[i, j]),
                                                           similarity=similarity, overlap=overlap):
            parent[root(int(j))] = root(int(i))
    groups: dict[int, Group] = {}
    for i, s in enumerate(found):
        groups.setdefault(root(i), Group()).members.append(s)
    kept = [g for g in groups.values() if len(g.days) >= min_days]
    return sorted(kept, key=lambda g: (g.per_day()[0].day, g.per_day()[0].line))
