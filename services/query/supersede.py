"""Supersession: when a newer line gives a new value for what an older one stated, the newer ranks first.

Among the results of one search, two short lines (statements, not paragraphs of chat) of two
results *conflict* when they are about the same thing and each states a value the other does
not. A line's *values* are its tokens that name one thing among many: a number, date or time
("14:00", "2.4", "12"), an identifier ("team-zeta", "eu-west-1", "a@b.com"), a capitalised word
that does not start a sentence ("Dana", "March", "PDF"). Its other words (without stop words and
the words of change: "changed", "moved", "now", "took", …) say what it is about. Two lines are
about the same thing when they share at least two words (shared values count too), or one when
nothing but their values differs ("Standup is at 09:30" / "Standup moved to 10:00"), and those
are at least half the words of the shorter line, and the query asks about them: its keyword
terms start half the shared words or more, two at least. The newer line must name a value the
older does not, and the older one a value the newer does not, except where the newer names it
as what was left: after "from", "instead of", "replacing", "no longer" ("team-zeta took over the
relay from team-kilo"). A restated value, or one that only adds words, is not a new one. A
speaker label ("**Caroline**:", "Rohan:" before a sentence) is not part of the line.

Of two conflicting lines the newer is the one in the later-dated file (``memory/2026-03-05.md``
after ``memory/2026-03-01.md``), or further down the same undated file; lines of two undated
files are not compared. The older result is marked ``supersededBy: {path, line}`` (the newer
line the query asks most about) and every newer result that ranked below it moves up to just
before it (scores are left as fused, so the list can then hold a higher score below a lower
one). memory_get is unchanged. What this cannot do: values that differ only by synonyms or by
lower-case words ("tea" → "coffee"), a change spread over two lines, a question about one fact
of a subject when another fact of it changed (the subject's words are what both share), or a
statement a person wrote later into an older file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.services.query.models import SearchResult, SupersededBy
from memoryd.shared import defaults as d

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})[^/]*$")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
#: A speaker in front of a line ("**Caroline**: …", "Rohan: …" before a sentence of three words or
#: more): who said it, not what it is about. "Standup: 10:00" is a value, not an utterance.
_SPEAKER = re.compile(r"^(?:\*\*[^*]{1,40}\*\*\s*:|[A-Z][\w'-]{0,30}:(?=(?:\s+\S+){3}))\s*")
_TOKEN = re.compile(r"[A-Za-z0-9][\w'.@:/+-]*[A-Za-z0-9]|[A-Za-z0-9]")
#: Only blanks, quotes or a sentence's end before a token: a capital there starts a sentence.
_SENTENCE_START = re.compile(r"(?:^|[.;!?])[\s\"'(*]*$")
_STOP = frozenset(re.split(r"\s+", """a an the of to in on at by for with from and or is are was were be been
    being am our my your its their this that these those it we i you he she they them us me has have had do does
    did will would can could should may might must shall new old not no so as if then than but also just still
    again every each all any some there here which who what when where why how about into onto over via per"""))
#: Words that say a value changed, not what it is about.
_CHANGE = frozenset(re.split(r"\s+", """now changed change changes moved move moves switched switch switches
    updated update renamed became become becomes went goes go took take takes taken over replaced replacing
    instead longer anymore today yesterday from since starting effective bumped slipped pushed set"""))
#: What follows names the value that was left: "took over from team-kilo", "instead of PDF".
_LEFT = frozenset({"from", "replacing", "replaced", "instead", "longer"})


@dataclass(frozen=True)
class Statement:
    result: int  # index in the results
    line: int
    words: frozenset[str]  # what it is about, and its values
    values: frozenset[str]
    left: frozenset[str]  # values it names as the ones that were left


def _stem(word: str) -> str:
    word = word.lower().strip(".'").removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) else word


def _is_value(token: str, first: bool) -> bool:
    return (any(c.isdigit() for c in token) or any(c in token for c in "-@/_")
            or (not first and token[0].isupper()) or (len(token) > 1 and token.isupper()))


@functools.lru_cache(maxsize=d.SUPERSEDE_PARSED_LINES)
def _parse(raw: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]] | None:
    """(words, values, left) of a line: the same lines come back search after search."""
    line = _SPEAKER.sub("", _BULLET.sub("", raw).strip()).strip()
    if not line or line.startswith(("#", "```", "|", ">")):
        return None
    tokens = list(_TOKEN.finditer(line))
    if not 3 <= len(tokens) <= d.SUPERSEDE_MAX_LINE_WORDS:
        return None
    words, values, left = set(), set(), set()
    after_left = False
    for found in tokens:
        token, stem = found.group(), _stem(found.group())
        if stem not in _STOP and stem not in _CHANGE:
            words.add(stem)
            if _is_value(token, _SENTENCE_START.search(line, 0, found.start()) is not None):
                values.add(stem)
                if after_left:
                    left.add(stem)
        after_left = stem in _LEFT or (after_left and stem in ("of", "the", "a", "an"))
    return frozenset(words), frozenset(values), frozenset(left)


class _Asked:
    """Which words of a line the query's terms (stems) start (of a word with hyphens, a part: "call"
    asks about "on-call"); looked at once per search for each word and each line's set of words."""

    def __init__(self, stems: Sequence[str]) -> None:
        self._starts = re.compile("(?:^|-)(?:" + "|".join(map(re.escape, sorted(set(stems)))) + ")") if stems else None
        self._words: dict[str, bool] = {}
        self._lines: dict[frozenset[str], frozenset[str]] = {}

    def __call__(self, words: frozenset[str]) -> frozenset[str]:
        if (asked := self._lines.get(words)) is None:
            asked = self._lines[words] = frozenset(w for w in words if self._asks(w))
        return asked

    def _asks(self, word: str) -> bool:
        if (known := self._words.get(word)) is None:
            known = self._words[word] = self._starts is not None and self._starts.search(word) is not None
        return known


def _conflict(older: Statement, newer: Statement, asked: frozenset[str]) -> int:
    """How well the query asks about two lines where the newer gives a new value: the shared words it
    asks about (``asked``: the words it asks about of either line); 0 when the newer gives no new
    value, or the query asks about less than half the shared words, or fewer than two (all, when
    fewer are shared)."""
    shared = older.words & newer.words
    hits = len(shared & asked)
    if not hits or hits < min(d.SUPERSEDE_MIN_SHARED_WORDS, len(shared)) or hits * 2 < len(shared) \
            or len(shared) < d.SUPERSEDE_SHARED_SHARE * min(len(older.words), len(newer.words)):
        return 0
    if len(shared) < d.SUPERSEDE_MIN_SHARED_WORDS and not (shared >= older.words - older.values
                                                           and shared >= newer.words - newer.values):
        return 0  # one shared word is enough only when nothing but the values differs
    if not (older.values - (newer.words - newer.left)) or not (newer.values - older.words):
        return 0
    return hits


def _when(result: SearchResult) -> str | None:
    found = _DATE.search(result.path)
    return found.group(1) if found else None


def _order_known(results: Sequence[SearchResult], dates: Sequence[str | None], i: int, j: int) -> bool:
    """Whether results ``i`` and ``j`` have an order: two dates (``dates``: each result's file date), or one file."""
    return bool(dates[i] and dates[j] and dates[i] != dates[j]) or results[i].path == results[j].path


def _ordered(results: Sequence[SearchResult], dates: Sequence[str | None], a: Statement,
             b: Statement) -> tuple[Statement, Statement] | None:
    """(older, newer) of two statements, or None when their order is not known."""
    da, db = dates[a.result], dates[b.result]
    if da and db and da != db:
        return (b, a) if da > db else (a, b)
    if results[a.result].path == results[b.result].path and a.line != b.line:
        return (b, a) if a.line > b.line else (a, b)
    return None


def order(results: list[SearchResult], texts: Sequence[str], terms: Sequence[str]) -> list[SearchResult]:
    """``results`` (``texts``: each one's full text from its ``startLine``) with supersession applied,
    for the statements the query is about (``terms``: its keyword terms, lower case, stems)."""
    dates = [_when(r) for r in results]
    comparable = [i for i in range(len(results))
                  if any(j != i and _order_known(results, dates, i, j) for j in range(len(results)))]
    asked_of = _Asked([_stem(term) for term in terms])
    found: list[tuple[Statement, frozenset[str]]] = []  # a statement with values, and the words asked of it
    for i in comparable:
        for offset, raw in enumerate(texts[i].split("\n")):
            if (parsed := _parse(raw)) is not None and parsed[1] and (asked := asked_of(parsed[0])):
                found.append((Statement(i, results[i].start_line + offset, *parsed), asked))
    by_word: dict[str, list[int]] = {}
    for n, (_, asked) in enumerate(found):
        for word in asked:
            by_word.setdefault(word, []).append(n)
    pairs = sorted({(x, y) for group in by_word.values() for i, x in enumerate(group) for y in group[i + 1:]
                    if found[x][0].result != found[y][0].result})  # lines that share a word the query asks about
    newer_of: dict[int, list[tuple[int, Statement]]] = {}  # older result: (how well asked, newer line)
    for x, y in pairs[:d.SUPERSEDE_MAX_PAIRS]:  # the best-ranked results' lines first
        pair = _ordered(results, dates, found[x][0], found[y][0])
        if pair is not None and (how := _conflict(*pair, found[x][1])):  # shared words: asked of both alike
            newer_of.setdefault(pair[0].result, []).append((how, pair[1]))
    if not newer_of:
        return results
    marks = {old: max(newers, key=lambda n: n[0])[1] for old, newers in newer_of.items()}  # the best asked
    marked = [r.model_copy(update={"superseded_by": SupersededBy(path=results[marks[i].result].path,
                                                                  line=marks[i].line)})
              if i in marks else r for i, r in enumerate(results)]
    ranked = list(range(len(results)))
    for old, newers in sorted(newer_of.items()):
        for new in sorted({n.result for _, n in newers}):  # each newer one above the older
            if ranked.index(new) > ranked.index(old):
                ranked.remove(new)
                ranked.insert(ranked.index(old), new)
    return [marked[i] for i in ranked]
