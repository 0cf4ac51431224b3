"""The snippet of a long result: the run of lines holding the most of the query's terms by weight."""

from __future__ import annotations

from memoryd.services.query.keyword import Term
from memoryd.services.query.snippets import snippet, start
from memoryd.shared import defaults as d

FILLER = "- **Caroline**: " + "words that answer nothing at all " * 5
LINES = [FILLER] * 12 + ["- **Melanie**: Yeah, I painted that lake sunrise last year!"] + [FILLER] * 12
TEXT = "\n".join(LINES)
CAROLINE, SUNRISE = Term("caroline", identifier=False, prefix=True), Term("sunrise", identifier=False, prefix=True)


def test_a_short_result_is_its_whole_text() -> None:
    assert snippet("- a\n- b", [SUNRISE], [5.0], 0) == "- a\n- b"


def test_the_rare_term_outweighs_a_name_on_every_line() -> None:
    assert len(TEXT) > d.SNIPPET_MAX_CHARS
    # "caroline" is on every line but one and weighs little; "sunrise" is on line 12 only.
    first = start(LINES, [CAROLINE, SUNRISE], [0.1, 4.0], anchor=0)
    cut = snippet(TEXT, [CAROLINE, SUNRISE], [0.1, 4.0], 0)
    assert first <= 12 and "lake sunrise" in cut and len(cut) <= d.SNIPPET_MAX_CHARS
    assert cut.startswith(LINES[first])


def test_of_equal_runs_the_one_nearest_the_best_chunk_wins() -> None:
    assert start(LINES, [SUNRISE], [4.0], anchor=12) == 12
    assert start(LINES, [SUNRISE], [4.0], anchor=0) < 12  # the earliest run that still holds line 12


def test_without_a_term_in_the_text_or_a_keyword_side_the_snippet_starts_at_the_best_chunk() -> None:
    assert start(LINES, [Term("kayak", identifier=False, prefix=True)], [3.0], anchor=7) == 7
    assert snippet(TEXT, [SUNRISE], [], 7).startswith(LINES[7])  # vector-only: no weights
