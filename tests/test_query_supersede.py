"""Supersession in memory_search: the real index (SQLite, built in-process) and the real engine."""

from __future__ import annotations

from pathlib import Path

from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import GetRequest, SearchRequest, SearchResult, dump
from memoryd.services.query.supersede import order
from memoryd.shared import defaults as d


def _result(path: str, line: int) -> SearchResult:
    return SearchResult(path=path, start_line=line, end_line=line, score=0.5, snippet="-", source="memory")


def test_the_newer_value_ranks_first_and_the_older_is_marked(workspace: Path, make_settings) -> None:
    memory = workspace / "memory"
    (memory / "2026-03-01.md").write_text("# 2026-03-01\n\n- The owner of the billing service is team-alpha.\n"
                                          "- The billing service owner team-alpha reviews every billing change.\n")
    (memory / "2026-03-09.md").write_text("# 2026-03-09\n\n- Lunch with Sam.\n"
                                          "- The billing service owner changed to team-zeta.\n")
    settings, _ = make_settings(workspace, query={"supersede": True})
    index_now(settings, "main")
    service = QueryService(settings)
    try:
        answer = dump(service.search("main", SearchRequest(query="billing service owner team-alpha", minScore=0)))
        paths = [r["path"] for r in answer["results"]]
        assert paths.index("memory/2026-03-09.md") < paths.index("memory/2026-03-01.md")
        older = answer["results"][paths.index("memory/2026-03-01.md")]
        assert older["supersededBy"] == {"path": "memory/2026-03-09.md", "line": 4}
        assert "supersededBy" not in answer["results"][paths.index("memory/2026-03-09.md")]
        got = dump(service.get("main", GetRequest(path="memory/2026-03-01.md")))
        assert got == {"path": "memory/2026-03-01.md",
                       "text": (memory / "2026-03-01.md").read_text().removesuffix("\n")}
    finally:
        service.close()


def test_only_a_new_value_for_the_same_subject_supersedes() -> None:
    results = [_result("memory/2026-03-01.md", 1), _result("memory/2026-03-05.md", 1), _result("MEMORY.md", 1),
               _result("notes.md", 1)]
    texts = ["- The deploy window is Tuesday 14:00 UTC",
             "- The deploy window is Tuesday 14:00 UTC, after the standup",  # adds detail: no new value
             "- The lunch place is Luigi's",
             "- The lunch place is the canteen"]  # two undated files: order unknown
    assert order(results, texts, ["deploy", "window", "lunch", "place"]) == results
    renamed = ["- Alice's team is platform", "- Alice's laptop is a ThinkPad"]  # other subjects
    assert order(results[:2], renamed, ["alice", "team", "laptop"]) == results[:2]


def test_only_what_the_query_asks_about_is_compared() -> None:
    results = [_result("memory/2026-03-01.md", 1), _result("memory/2026-03-05.md", 1)]
    texts = ["- The VPN on-call is Heidi", "- The VPN on-call is now Mallory"]
    assert order(results, texts, ["who", "own", "billing"]) == results
    assert order(results, texts, ["vpn", "call"])[0].path == "memory/2026-03-05.md"
    restated = ["- The chat widget owner is team-delta", "- Checked again: the chat widget owner is team-delta"]
    assert order(results, restated, ["own", "chat", "widget"]) == results


def test_further_down_one_undated_file_is_newer() -> None:
    results = [_result("MEMORY.md", 3), _result("MEMORY.md", 40)]
    done = order(results, ["- Standup is at 09:30", "- Standup moved to 10:00"], ["standup"])
    assert [r.start_line for r in done] == [40, 3]
    assert done[1].superseded_by is not None and done[1].superseded_by.line == 40


def test_lines_of_chat_are_not_statements_of_a_value() -> None:
    results = [_result("memory/2023-05-08.md", 5), _result("memory/2023-06-09.md", 9)]
    texts = ["- **Caroline**: Hey Mel, good to see you! How have you been doing lately with the kids?",
             "- **Caroline**: The best moment was when I saw my mentee's face light up at the art show."]
    assert order(results, texts, ["caroline", "mel"]) == results


def test_a_new_value_named_with_the_one_it_replaced_supersedes() -> None:
    results = [_result("memory/2026-03-02.md", 1), _result("memory/2026-03-20.md", 1)]
    texts = ["- Team-kilo maintains the mail relay.", "- Team-zeta took over the mail relay from team-kilo today."]
    done = order(results, texts, ["team", "maintains", "mail", "relay"])
    assert [r.path for r in done] == ["memory/2026-03-20.md", "memory/2026-03-02.md"]
    assert done[1].superseded_by is not None and done[1].superseded_by.path == "memory/2026-03-20.md"
    named = ["- Team-kilo maintains the mail relay.", "- Team-kilo took over the mail relay from team-zeta today."]
    assert order(results, named, ["team", "maintains", "mail", "relay"]) == results  # kilo is not what was left


def test_every_newer_value_ranks_above_the_older_line() -> None:
    results = [_result("memory/2026-03-01.md", 1), _result("memory/2026-03-05.md", 1),
               _result("memory/2026-03-09.md", 1)]
    texts = ["- The owner of the VPN is team-lima.\n- The VPN is pinned to version 2.4.",
             "- Bumped the VPN pin to version 3.1 today.",
             "- The VPN owner changed to team-sigma."]
    done = order(results, texts, ["owns", "vpn", "version", "pinn"])  # asked about both of its values
    assert done[-1].path == "memory/2026-03-01.md"
    assert done[-1].superseded_by is not None and done[-1].superseded_by.path in {r.path for r in done[:2]}


def test_lines_of_a_chat_without_bold_names_are_not_compared_by_their_speaker() -> None:
    results = [_result("memory/2025-06-08.md", 3), _result("memory/2025-07-04.md", 3)]
    texts = ["Rohan: I finally tried the Japanese place near the Barbican, very smart.",
             "Rohan: Judith picked me up at the station on Monday, mostly for the train."]
    assert order(results, texts, ["rohan", "japanese", "judith"]) == results


def test_a_search_compares_at_most_the_bounded_number_of_line_pairs(monkeypatch) -> None:
    results = [_result("memory/2026-03-01.md", 1), _result("memory/2026-03-05.md", 1)]
    texts = ["- The VPN on-call is Heidi", "- The VPN on-call is now Mallory"]
    assert order(results, texts, ["vpn", "call"])[0].path == "memory/2026-03-05.md"
    monkeypatch.setattr(d, "SUPERSEDE_MAX_PAIRS", 0)
    assert order(results, texts, ["vpn", "call"]) == results
