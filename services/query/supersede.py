"""Supersession: when a newer line gives a new value for what an older one stated, the newer ranks first.

Among the results of one search, a line that states a value — "the owner of billing is
team-alpha", "billing's owner changed to team-zeta", "deploy window: Tuesday 14:00" — is read
as (subject, value): the words before the verb (``is``, ``are``, ``is now``, ``changed to``,
``moved to``, ``switched to``; else ``:`` or ``=``) and after it. Two lines of different
results *conflict* when the query is about their subject (its terms start at least half the
subject's words: other values a result happens to hold are not what was asked), their
subjects share at least half their content words and their values differ (neither holds
every word of the other). A subject or value of more than six content words is a sentence,
not a value, and a speaker label (``**Alice**:``) is not a subject. Of two conflicting lines
the newer is the one in the later-dated file (``memory/2026-03-05.md`` after
``memory/2026-03-01.md``), or further down the same undated file; lines of two undated files
are not compared.

The older result is marked ``supersededBy: {path, line}`` (the newer line) and, when it ranked
above the newer one, the newer one moves up to just before it (scores are left as fused, so
the list can then hold a higher score below a lower one). memory_get is unchanged.
What this cannot do: a new value stated without a verb it knows ("team-zeta owns billing
now" against "billing is owned by team-alpha" has two different subjects), values that differ
only by synonyms, or a change spread over two lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.services.query.models import SearchResult, SupersededBy
from memoryd.shared import defaults as d

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})[^/]*$")
_VERB = (r"(?:\b(?:has|have|was|were)\s+)?(?:\b(?:changed|moved|switched|went|updated|renamed)\b"
         r"(?:\s+from\s+.+?)?\s+to\b|\bis now\b|\bare now\b|\bnow is\b|\bis\b|\bare\b)")
#: A verb first ("Checked again: the owner is team-x" is about the owner); a ``:`` or ``=`` only
#: where there is none ("Billing on-call: Ivan").
_CLAIMS = [re.compile(rf"^(?P<subject>.{{3,120}}?)\s*{verb}\s*(?P<value>.{{1,160}})$", re.IGNORECASE)
           for verb in (_VERB, r"[:=]")]
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
#: A speaker in front of a line ("**Caroline**: …", "user: …"): who said it, not what it is about.
_SPEAKER = re.compile(r"^(?:\*\*[^*]{1,40}\*\*|user|assistant)\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9][a-z0-9_'.-]*[a-z0-9]|[a-z0-9]|[\u3400-\u9fff]")
_STOP = frozenset(re.split(r"\s+", "a an the of to in on at by for with from and or is are was were be been now "
                                   "our my your its their this that it we i you they has have had new old"))


@dataclass(frozen=True)
class Claim:
    result: int  # index in the results
    line: int
    subject: frozenset[str]
    value: frozenset[str]


def _words(text: str) -> frozenset[str]:
    return frozenset(w.strip(".'") for w in _WORD.findall(text.lower()) if w.strip(".'") not in _STOP)


def claims(index: int, start_line: int, text: str) -> list[Claim]:
    out = []
    for offset, raw in enumerate(text.split("\n")):
        line = _SPEAKER.sub("", _BULLET.sub("", raw).strip()).strip().rstrip(".")
        match = next((m for c in _CLAIMS if (m := c.match(line))), None) if line and not line.startswith("#") \
            else None
        if match:
            subject, value = _words(match["subject"]), _words(match["value"])
            if 0 < len(subject) <= d.SUPERSEDE_MAX_PART_WORDS and 0 < len(value) <= d.SUPERSEDE_MAX_PART_WORDS:
                out.append(Claim(index, start_line + offset, subject, value))
    return out


def _asked(claim: Claim, terms: Sequence[str]) -> bool:
    """The query is about the claim's subject: its terms (stems) start half its words or more."""
    hits = sum(any(word.startswith(term) for term in terms) for word in claim.subject)
    return hits * 2 >= len(claim.subject)


def _conflict(a: Claim, b: Claim) -> bool:
    shared = len(a.subject & b.subject) / len(a.subject | b.subject)
    return shared >= d.SUPERSEDE_SUBJECT_OVERLAP and not (a.value <= b.value or b.value <= a.value)


def _when(result: SearchResult) -> str | None:
    found = _DATE.search(result.path)
    return found.group(1) if found else None


def _newer(results: Sequence[SearchResult], a: Claim, b: Claim) -> Claim | None:
    """The newer of two conflicting claims, or None when their order is not known."""
    ra, rb = results[a.result], results[b.result]
    da, db = _when(ra), _when(rb)
    if da and db and da != db:
        return a if da > db else b
    if ra.path == rb.path and a.line != b.line:
        return a if a.line > b.line else b
    return None


def order(results: list[SearchResult], texts: Sequence[str], terms: Sequence[str]) -> list[SearchResult]:
    """``results`` (``texts``: each one's full text from its ``startLine``) with supersession applied,
    for the statements the query is about (``terms``: its keyword terms, lower case, stems)."""
    found = [c for i, (r, t) in enumerate(zip(results, texts, strict=True)) for c in claims(i, r.start_line, t)
             if _asked(c, terms)]
    newer_of: dict[int, Claim] = {}
    for i, a in enumerate(found):
        for b in found[i + 1:]:
            if a.result == b.result or not _conflict(a, b):
                continue
            new = _newer(results, a, b)
            if new is not None:
                old = b if new is a else a
                newer_of.setdefault(old.result, new)
    if not newer_of:
        return results
    marked = [r.model_copy(update={"superseded_by": SupersededBy(path=results[newer_of[i].result].path,
                                                                  line=newer_of[i].line)})
              if i in newer_of else r for i, r in enumerate(results)]
    ranked = list(range(len(results)))
    for old, new in sorted(newer_of.items()):
        if ranked.index(new.result) > ranked.index(old):
            ranked.remove(new.result)
            ranked.insert(ranked.index(old), new.result)
    return [marked[i] for i in ranked]
