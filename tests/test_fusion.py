"""The scoring math (services/fusion.py) and the keyword side's query parsing (services/query_keyword.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.services.query import fusion
from memoryd.services.query import keyword as query_keyword
from memoryd.services.query.fusion import Candidate
from memoryd.shared import defaults as d
from memoryd.shared.defaults import MIN_SCORE as DEFAULT_MIN_SCORE
from memoryd.shared.defaults import TEXT_WEIGHT as DEFAULT_TEXT_WEIGHT
from memoryd.shared.defaults import VECTOR_WEIGHT as DEFAULT_VECTOR_WEIGHT


def test_weighted_is_the_seeds_formula() -> None:
    c = Candidate(1, vector=0.8, vector_rank=1, bm25=-3.0, text_rank=1)
    text = query_keyword.squash_bm25(c.bm25)
    assert fusion.weighted(c, 0.7, 0.3, text) == pytest.approx(0.7 * 0.8 + 0.3 * 0.75)


def test_weighted_caps_a_keyword_only_hit_at_the_text_weight_so_min_score_drops_it() -> None:
    """The seed's trap, kept in ``weighted`` on purpose: an exact ID found only by keyword vanishes."""
    c = Candidate(1, bm25=-1e9, text_rank=1)
    score = fusion.weighted(c, DEFAULT_VECTOR_WEIGHT, DEFAULT_TEXT_WEIGHT, query_keyword.squash_bm25(c.bm25))
    assert score == pytest.approx(DEFAULT_TEXT_WEIGHT)
    assert score < DEFAULT_MIN_SCORE


def test_squashed_bm25_reads_negative_scores_and_keeps_their_order() -> None:
    """The old ``1/(1+max(0, rank))`` gave every (negative) BM25 score 1.0."""
    strong, weak = query_keyword.squash_bm25(-8.0), query_keyword.squash_bm25(-0.5)
    assert 0 < weak < strong < 1
    assert query_keyword.squash_bm25(None) == 0.0


def test_calibrated_rrf_lets_an_exact_keyword_hit_pass_min_score() -> None:
    c = Candidate(1, text=d.IDENTIFIER_FLOOR, text_rank=1)
    assert fusion.calibrated_rrf(c, sides=2) > DEFAULT_MIN_SCORE


def test_calibrated_rrf_never_exceeds_the_evidence_and_stays_in_0_1() -> None:
    for v in (0.0, 0.2, 0.5, 0.9, 1.0, 1.3, -0.4):
        for t in (None, 0.0, 0.3, 1.0):
            for ranks in ((1, 1), (1, None), (None, 7), (24, 24)):
                c = Candidate(1, vector=v, vector_rank=ranks[0], text=t, text_rank=ranks[1])
                evidence = 1 - (1 - min(max(v, 0), 1)) * (1 - (t or 0))
                score = fusion.calibrated_rrf(c, sides=2)
                assert 0.0 <= score <= 1.0
                assert score <= evidence + 1e-9


def test_calibrated_rrf_rewards_agreement_and_rank() -> None:
    both = fusion.calibrated_rrf(Candidate(1, vector=0.5, vector_rank=1, text=0.5, text_rank=1), sides=2)
    vector_alone = fusion.calibrated_rrf(Candidate(1, vector=0.5, vector_rank=1), sides=2)
    lower_rank = fusion.calibrated_rrf(Candidate(1, vector=0.5, vector_rank=20), sides=2)
    assert both > vector_alone > lower_rank


def test_calibrated_rrf_keeps_weak_signals_weak() -> None:
    """Unrelated chunks (low cosine, one common word) stay under the default minScore."""
    c = Candidate(1, vector=0.15, vector_rank=1, text=0.1, text_rank=1)
    assert fusion.calibrated_rrf(c, sides=2) < DEFAULT_MIN_SCORE


def test_one_sided_search_is_not_penalised_for_the_missing_side() -> None:
    c = Candidate(1, text=0.9, text_rank=1)
    assert fusion.calibrated_rrf(c, sides=1) == pytest.approx(0.9)


def test_natural_language_questions_drop_stop_words_and_or_the_rest() -> None:
    q = query_keyword.parse("What did we decide about the API?")
    assert [t.phrase for t in q.terms] == ["decide", "api"]
    assert all(not t.identifier for t in q.terms)


@pytest.mark.parametrize("query,terms", [
    ("what's Gareth's number?", ["gareth", "number"]),  # not the identifiers "what s", "gareth s"
    ("how did the argument with Sam’s mum get resolved", ["argument", "sam", "mum", "resolv"]),
    ("we didn't ship O'Brien's E-404 fix", ["ship", "o brien", "e 404", "fix"]),
])
def test_contractions_and_possessives_are_cut_before_words_are_read(query: str, terms: list[str]) -> None:
    parsed = query_keyword.parse(query).terms
    assert [t.phrase for t in parsed] == terms
    assert not any(t.identifier for t in parsed if " " not in t.phrase)


def test_a_question_of_only_stop_words_still_searches() -> None:
    assert [t.phrase for t in query_keyword.parse("what is it").terms] == ["what", "is", "it"]


def test_words_match_their_other_forms_by_prefix() -> None:
    term = query_keyword.parse("decided invoices").terms
    assert [(t.phrase, t.prefix) for t in term] == [("decid", True), ("invoic", True)]
    assert term[0].found_in(query_keyword.token_string("We decide today"))


@pytest.mark.parametrize("query, phrase", [
    ("POSTGRES_URL", "postgres url"),
    ("E-404", "e 404"),
    ("2026-01-20", "2026 01 20"),
    ("api/v2/users", "api v2 users"),
    ("v2.3.0", "v2 3 0"),
])
def test_identifiers_are_exact_phrases(query: str, phrase: str) -> None:
    (term,) = query_keyword.parse(query).terms
    assert (term.phrase, term.identifier, term.prefix) == (phrase, True, False)


def test_dates_and_versions_are_also_looked_for_in_paths() -> None:
    assert query_keyword.parse("what happened on 2026-01-20?").path_fragments == ("2026-01-20",)


def test_cjk_runs_become_their_words_then_their_characters() -> None:
    assert [t.phrase for t in query_keyword.parse("数据库备份").terms] == [
        "数 据", "据 库", "数 据 库", "备 份", "数", "据", "库", "备", "份"]
    assert [t.phrase for t in query_keyword.parse("部署").terms] == ["部 署", "部", "署"]


def test_text_evidence_is_the_weighted_share_of_terms_found() -> None:
    q = query_keyword.parse("invoice rounding")
    half = query_keyword.evidence(q, [1.0, 1.0], "the invoice is ready", "memory/a.md", 1, -1.0)
    full = query_keyword.evidence(q, [1.0, 1.0], "invoice rounding bug", "memory/a.md", 1, -2.0)
    assert half.score == pytest.approx(0.5)
    assert full.score == pytest.approx(1.0)


def test_a_chunk_holding_every_identifier_scores_at_least_the_floor() -> None:
    q = query_keyword.parse("what does E-404 mean for clinics")
    ev = query_keyword.evidence(q, [5.0, 3.0, 3.0], "E-404: slot taken", "MEMORY.md", 1, -1.0)
    assert ev.score >= d.IDENTIFIER_FLOOR


def test_the_other_words_still_order_chunks_that_hold_the_identifier() -> None:
    # "Flat 2" is in every note about the flat: the one that also says "keys" must score higher
    q = query_keyword.parse("how many keys did we hand over for Flat 2")
    weights = [1.0] * len(q.terms)
    keys = query_keyword.evidence(q, weights, "Flat 2: keys given, 2 front door", "memory/2026-07-08.md", 1, -2.0)
    other = query_keyword.evidence(q, weights, "Flat 2: boiler serviced", "memory/2026-03-24.md", 2, -1.0)
    assert d.IDENTIFIER_FLOOR <= other.score < keys.score < 1.0


def test_a_date_in_the_path_counts_as_found() -> None:
    q = query_keyword.parse("2026-01-20")
    ev = query_keyword.evidence(q, [3.0], "## API Discussion", "memory/2026-01-20.md", None, None)
    assert ev.score == pytest.approx(1.0)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=200))
def test_ascii_token_strings_are_the_runs_of_letters_and_digits_fts5_sees(text: str) -> None:
    """token_string's fast ASCII path (one translate and split) against its definition."""
    assert query_keyword.token_string(text) == " " + " ".join(re.findall(r"[a-z0-9]+", text.lower())) + " "
