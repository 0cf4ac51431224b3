"""Dates a question names in words ("on 9 November, 2022", "in December 2023", "March 3rd") are
looked up in the daily files' dates (services/query/dates.py ``mentions``, keyword.parse)."""

from __future__ import annotations

from pathlib import Path

from inline_index import one_agent

from memoryd.services.query.dates import mentions
from memoryd.services.query.engine import QueryService
from memoryd.services.query.keyword import parse
from memoryd.services.query.models import SearchRequest


def test_dates_in_words_are_read() -> None:
    said = {
        "What dish did Nate make on 9 November, 2022?": ["2022-11-09"],
        "the weekend before April 10, 2023": ["2023-04-10"],
        "What class did Maria start in December 2023?": ["2023-12"],
        "on the 3rd of March": ["03-03"],
        "Nov 9 and Sept. 12th, 2025": ["11-09", "2025-09-12"],
        "in May 2023": ["2023-05"],
        "shared on December 1,2023": ["2023-12-01"],
        "31 June 2022": [],  # no such day
        "they may 3 times ask": [],  # the verb, not the month
        "what happened in May?": [],  # a month of no year names too many files
    }
    assert {q: [m.iso for m in mentions(q)] for q in said} == said


def test_a_date_is_one_identifier_of_the_files_date_not_its_words_and_numbers() -> None:
    query = parse("What dish did Nate make on 9 November, 2022?")
    assert [(t.phrase, t.identifier) for t in query.terms] == \
        [("2022 11 09", True), ("dish", False), ("nate", False), ("make", False)]
    assert query.path_fragments == ("2022-11-09",)
    assert not query.codes_only  # the words are still read by the vector side


def test_the_log_of_the_day_a_question_names_answers_it(tmp_path: Path) -> None:
    """Two days' logs that both talk of cooking: the one of the date asked about answers, though
    the other shares more of the question's words."""
    workspace = tmp_path / "workspace"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "memory" / "2022-11-09.md").write_text(
        "# 2022-11-09\n\n- **Nate**: My tournament got pushed back, so I made coconut ice cream tonight.\n"
        "- **Joanna**: Sounds delicious!\n", encoding="utf-8")
    (workspace / "memory" / "2022-10-21.md").write_text(
        "# 2022-10-21\n\n- **Nate**: What dish should I make? I make a dish every week, maybe a curry dish.\n"
        "- **Joanna**: Make the curry!\n", encoding="utf-8")
    service = QueryService(one_agent(tmp_path, workspace, "hash"))
    try:
        dated = service.search("main", SearchRequest(query="What dish did Nate make on 9 November, 2022?"))
        undated = service.search("main", SearchRequest(query="What dish did Nate make?"))
    finally:
        service.close()
    assert dated.results[0].path == "memory/2022-11-09.md"
    assert undated.results[0].path == "memory/2022-10-21.md"  # without the date, the words decide
