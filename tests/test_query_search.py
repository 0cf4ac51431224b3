"""memory_search: the contract, both fusion modes, identifiers, CJK, sources, degraded modes, freshness.

Plumbing runs on the ``hash`` provider (no model) over the retrieval fixture workspace,
indexed for real by ``tests/inline_index.py's index_now`` into a real SQLite file with sqlite-vec.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from inline_index import index_now
from retrieval_set import build

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import GetRequest, SearchRequest, dump
from memoryd.shared import defaults as d
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from memoryd.shared.index.store import IndexWriter


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    """(settings, service) over the fixture workspace, shared by the read-only tests of this module."""
    settings = build(tmp_path_factory.mktemp("corpus"), provider="hash")
    service = QueryService(settings)
    yield settings, service
    service.close()


@pytest.fixture
def fresh(tmp_path: Path):
    """A corpus of this test's own, for tests that change files or the index."""
    settings = build(tmp_path, provider="hash")
    service = QueryService(settings)
    yield settings, service
    service.close()


def with_provider(settings: Settings, provider: str, tmp_path: Path) -> Settings:
    """The same agents and state, another embedding provider."""
    data = settings.model_dump(by_alias=True, exclude={"source_file"})
    data["agents"]["defaults"]["memorySearch"]["provider"] = provider
    config = tmp_path / f"{provider}.json"
    config.write_text(json.dumps(data), encoding="utf-8")
    return load_settings(config, state_dir=settings.state_dir)


def search(service: QueryService, query: str, **kw: object):
    return service.search("main", SearchRequest(query=query, **kw))


def chunk_spans(settings: Settings, path: str) -> list[tuple[int, int]]:
    """(start_line, end_line) of each chunk of ``path`` in the main agent's index, in line order."""
    writer = IndexWriter(settings.index_path("main"))
    try:
        return writer.conn.execute("SELECT start_line, end_line FROM chunks WHERE path = ? ORDER BY start_line",
                                   (path,)).fetchall()
    finally:
        writer.close()


def keyword_results(settings: Settings, query: str) -> list:
    """The main agent's keyword-only results for ``query``, from a service of its own."""
    service = QueryService(settings)
    try:
        return search(service, query, fusion="keyword").results
    finally:
        service.close()


def read_lines(settings: Settings, result) -> str:
    """What memory_get returns for a result's lines."""
    service = QueryService(settings)
    try:
        return service.get("main", GetRequest(path=result.path, **{"from": result.start_line},
                                              lines=result.end_line - result.start_line + 1)).text
    finally:
        service.close()


def test_the_answer_is_spec_shaped(corpus) -> None:
    settings, service = corpus
    answer = dump(search(service, "REST or GraphQL for the public API"))
    assert set(answer) == {"results", "provider", "model", "mode", "fusion"}
    assert (answer["provider"], answer["model"], answer["mode"], answer["fusion"]) == \
        ("hash", "feature-hash-256", "hybrid", "rrf")
    assert 1 <= len(answer["results"]) <= 6
    workspace = settings.agent("main").workspace
    for r in answer["results"]:
        assert set(r) == {"path", "startLine", "endLine", "score", "snippet", "source"}
        assert 0.35 <= r["score"] <= 1
        assert r["source"] in {"memory", "kb"}
        assert len(r["snippet"]) <= d.SNIPPET_MAX_CHARS
        lines = (workspace / r["path"]).read_text(encoding="utf-8").split("\n")
        assert r["snippet"] in "\n".join(lines[r["startLine"] - 1:r["endLine"]])
    scores = [r["score"] for r in answer["results"]]
    assert scores == sorted(scores, reverse=True)


def test_max_results_and_min_score_are_obeyed(corpus) -> None:
    _, service = corpus
    assert len(search(service, "clinic", max_results=2, min_score=0).results) == 2
    assert all(r.score >= 0.6 for r in search(service, "clinic", min_score=0.6).results)
    assert search(service, "zzzz qqqq xyzzy").results == []


@pytest.mark.parametrize("identifier, path, line", [
    ("POSTGRES_URL", "MEMORY.md", 20),
    ("E-404", "MEMORY.md", 31),
    ("2026-01-20", "memory/2026-01-20.md", 1),
    ("api/v2/users", "memory/2026-01-20.md", 8),
    ("v2.3.0", "memory/2026-01-20.md", 11),
])
@pytest.mark.parametrize("fusion", ["keyword", "rrf"])
def test_identifiers_are_found_by_exact_keyword_search(corpus, identifier: str, path: str, line: int,
                                                       fusion: str) -> None:
    _, service = corpus
    results = search(service, identifier, fusion=fusion).results
    assert any(r.path == path and r.start_line <= line <= r.end_line for r in results)
    assert results[0].score >= 0.8


def test_an_identifier_does_not_match_its_neighbours(corpus) -> None:
    _, service = corpus
    texts = [r.snippet for r in search(service, "E-409", fusion="keyword").results]
    assert texts and all("E-409" in t for t in texts)


def test_weighted_fusion_loses_a_keyword_only_identifier_that_rrf_keeps(corpus) -> None:
    """The seed's trap: with 0.7 × vector + 0.3 × text, a keyword-only hit scores ≤ 0.3 < minScore."""
    _, service = corpus
    weighted = search(service, "2026-01-20", fusion="weighted", explain=True).results
    assert not any(r.path == "memory/2026-01-20.md" and r.explain.vector is None for r in weighted)
    rrf = search(service, "2026-01-20", fusion="rrf", explain=True).results
    assert rrf[0].path == "memory/2026-01-20.md"


def test_weighted_scores_are_the_seeds_formula(corpus) -> None:
    _, service = corpus
    for r in search(service, "billing rewrite invoices", fusion="weighted", explain=True, min_score=0).results:
        e = r.explain
        bm25 = abs(e.bm25) if e.bm25 is not None else 0.0
        expected = 0.7 * max(e.vector or 0.0, 0.0) + 0.3 * bm25 / (1 + bm25)
        assert r.score == pytest.approx(expected, abs=2e-4)


def test_a_natural_language_question_matches_on_the_keyword_side(corpus) -> None:
    """Words joined with OR (not AND): the question's words need not all be in one chunk."""
    _, service = corpus
    results = search(service, "What did we decide about the API?", fusion="keyword").results
    assert any(r.path == "memory/2026-01-20.md" for r in results)


@pytest.mark.parametrize("query, line", [
    ("部署", 4),
    ("数据库备份", 5),
    ("翻译文件", 10),
    ("日本語版", 14),
    ("田中さん", 15),
])
def test_chinese_and_japanese_are_searchable_by_keyword(corpus, query: str, line: int) -> None:
    _, service = corpus
    results = search(service, query, fusion="keyword").results
    assert results[0].path == "memory/2026-02-26.md"
    assert results[0].start_line <= line <= results[0].end_line


def test_source_filter_keeps_knowledge_base_files_out(corpus) -> None:
    _, service = corpus
    everything = search(service, "E-503 calendar sync down", max_results=10, min_score=0).results
    assert {r.source for r in everything} == {"memory", "kb"}
    memory = search(service, "E-503 calendar sync down", source="memory", max_results=10, min_score=0).results
    kb = search(service, "E-503 calendar sync down", source="kb", max_results=10, min_score=0).results
    assert memory and {r.source for r in memory} == {"memory"}
    assert kb and {r.source for r in kb} == {"kb"} and kb[0].path == "kb/runbook-incidents.md"
    assert search(service, "E-503", source="nosuchsource").results == []


def test_explain_shows_each_side_and_the_fused_score(corpus) -> None:
    _, service = corpus
    (top, *_) = search(service, "E-404", explain=True).results
    assert top.explain.text == pytest.approx(1.0)
    assert top.explain.text_rank == 1 and top.explain.bm25 < 0
    assert top.explain.fused == pytest.approx(top.score)
    assert dump(search(service, "E-404").results[0]).get("explain") is None


def test_vector_only_mode(corpus) -> None:
    _, service = corpus
    answer = search(service, "E-404", fusion="vector", explain=True, min_score=0)
    assert answer.mode == "vector-only"
    assert all(r.explain.text is None for r in answer.results)


def test_provider_none_answers_keyword_only_and_says_so(fresh, tmp_path: Path) -> None:
    service = QueryService(with_provider(fresh[0], "none", tmp_path))
    answer = search(service, "E-404")
    assert answer.mode == "keyword-only" and "none" in answer.reason
    assert answer.results and all("E-404" in r.snippet for r in answer.results)


def test_an_index_of_another_embedder_is_not_mixed(fresh, tmp_path: Path) -> None:
    """The index holds hash vectors; configured for the local model, the service answers by keyword."""
    answer = search(QueryService(with_provider(fresh[0], "local", tmp_path)), "POSTGRES_URL")
    assert answer.mode == "keyword-only"
    assert "hash:feature-hash:256" in answer.reason and "not mixed" in answer.reason
    assert "MEMORY.md" in [r.path for r in answer.results]  # among the four notes naming it


def test_an_index_of_other_local_windows_still_answers_with_vectors(workspace: Path, make_settings) -> None:
    """Windows change how chunks become vectors, not the model: after a window change (0.2 made
    them 96/24) the old index answers with vectors until the indexer has rebuilt it."""
    (workspace / "MEMORY.md").write_text("# Home\n\n- Biscuit sleeps in the blue laundry basket.\n")
    (workspace / "memory" / "2026-02-01.md").write_text("# 2026-02-01\n\n- Renewed the car insurance.\n")
    old, _ = make_settings(workspace, provider="local", local={"windowPieces": 256, "windowOverlap": 32})
    index_now(old, "main")
    new, _ = make_settings(workspace, provider="local")
    service = QueryService(new)
    try:
        answer = service.search("main", SearchRequest(query="where does the cat sleep?", explain=True))
    finally:
        service.close()
    writer = IndexWriter(new.index_path("main"))
    assert writer.meta("embedder").endswith(":w256/32")  # not rebuilt yet
    writer.close()
    assert (answer.mode, answer.reason) == ("hybrid", None)
    assert answer.results[0].path == "MEMORY.md" and answer.results[0].explain.vector_rank == 1


def test_neighbouring_chunks_that_both_answer_are_one_passage(workspace: Path, make_settings) -> None:
    """Small chunks (32 tokens here) that touch and both rank come back as one result whose lines
    span them, and memory_get reads the whole passage; with passages off they are separate results."""
    (workspace / "memory" / "2026-03-29.md").write_text(
        "# 2026-03-29\n"
        "Maureen: Biscuit stayed with me all week while you were away in Lisbon.\n"
        "Gordon: Did Biscuit chew anything while staying with you, Maureen?\n"
        "Maureen: Biscuit chewed one of my sheepskin slippers on the second night.\n"
        "Gordon: Sorry! Biscuit owes you a new pair of slippers, I will order them.\n"
        "Maureen: The garden centre had the tomato seedlings I wanted at last.\n")
    (workspace / "memory" / "2026-04-02.md").write_text("# 2026-04-02\nGordon: The car insurance renewal is due.\n")
    # widening off: this is about the chunks that answered (widening is the next test's)
    joined, _ = make_settings(workspace, chunking={"tokens": 32, "overlap": 0}, query={"passages": {"widen": False}})
    index_now(joined, "main")
    apart, _ = make_settings(workspace, chunking={"tokens": 32, "overlap": 0}, query={"passages": {"enabled": False}})
    chunks = chunk_spans(joined, "memory/2026-03-29.md")
    assert len(chunks) >= 3  # the note really is several small chunks
    question = "what did Biscuit chew while staying with Maureen?"
    separate = [r for r in keyword_results(apart, question) if r.path == "memory/2026-03-29.md"]
    together = [r for r in keyword_results(joined, question) if r.path == "memory/2026-03-29.md"]
    assert len(separate) >= 2 and all((r.start_line, r.end_line) in chunks for r in separate)
    assert len(together) < len(separate)
    top = together[0]
    assert top.start_line <= min(r.start_line for r in separate) and top.end_line >= max(r.end_line for r in separate)
    assert sum(1 for start, end in chunks if top.start_line <= start and end <= top.end_line) >= 2
    assert "stayed with me" in top.snippet and "sheepskin slippers" in top.snippet  # the passage's text
    text = read_lines(joined, top)
    assert "stayed with me" in text and "sheepskin slippers" in text


def test_a_result_is_widened_to_the_chunk_after_it_that_holds_the_answer(workspace: Path, make_settings) -> None:
    """The question's words in one small chunk, the answer in the next, which shares none of them:
    widened, the result's lines hold the answer and memory_get reads it; unwidened, no result does."""
    (workspace / "memory" / "2026-11-15.md").write_text(
        "# 2026-11-15\n"
        "- A change of plan for Christmas this year: not Edinburgh after all.\n"
        "- The whole family is coming down here to Ludlow instead, eight of us plus the baby.\n"
        "- The garden centre finally had the tomato seedlings I wanted.\n")
    (workspace / "memory" / "2026-11-20.md").write_text("# 2026-11-20\n- The car insurance renewal is due.\n")
    widened, _ = make_settings(workspace, chunking={"tokens": 32, "overlap": 0})
    index_now(widened, "main")
    narrow, _ = make_settings(workspace, chunking={"tokens": 32, "overlap": 0}, query={"passages": {"widen": False}})
    christmas, ludlow = 2, 3
    chunks = chunk_spans(widened, "memory/2026-11-15.md")
    assert not any(start <= christmas and ludlow <= end for start, end in chunks)  # two chunks
    question = "what is the plan for Christmas?"
    assert not any(r.path == "memory/2026-11-15.md" and r.start_line <= ludlow <= r.end_line
                   for r in keyword_results(narrow, question))
    top = keyword_results(widened, question)[0]
    assert top.path == "memory/2026-11-15.md" and top.start_line <= christmas and ludlow <= top.end_line
    text = read_lines(widened, top)
    assert "Christmas" in text and "Ludlow" in text


def test_new_content_is_seen_as_soon_as_it_is_committed(fresh) -> None:
    settings, service = fresh
    assert search(service, "ZEBRA-7781").results == []
    note = settings.agent("main").workspace / "memory" / "2026-03-02.md"
    note.write_text("# 2026-03-02\n- Ticket ZEBRA-7781: the zebra crossing widget is broken.\n", encoding="utf-8")
    index_now(settings, "main")
    results = search(service, "ZEBRA-7781", explain=True).results
    assert results[0].path == "memory/2026-03-02.md"
    assert results[0].explain.vector_rank is not None  # the vector matrix was refreshed too


def test_deleted_content_disappears_from_both_sides(fresh) -> None:
    settings, service = fresh
    assert search(service, "atlas-docs-eu").results
    (settings.agent("main").workspace / "memory" / "2026-01-29.md").unlink()
    index_now(settings, "main")
    index = service.index("main")
    assert not any(r.path == "memory/2026-01-29.md"
                   for r in search(service, "atlas-docs-eu", fusion="vector", min_score=0, max_results=50).results)
    assert search(service, "atlas-docs-eu", fusion="keyword").results == []
    with index.snapshot() as snap:
        (vectors,) = snap.conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()
        assert len(snap.vector_index()) == vectors


def test_an_index_replaced_by_a_rebuild_is_reopened(fresh, tmp_path: Path) -> None:
    settings, service = fresh
    assert search(service, "atlas-docs-eu").results
    other = build(tmp_path / "other", provider="hash")
    workspace = other.agent("main").workspace
    shutil.rmtree(workspace / "memory")
    (workspace / "memory").mkdir()
    (workspace / "MEMORY.md").write_text("# Memory\n- The fox codename is KESTREL-42.\n", encoding="utf-8")
    index_now(other, "main")
    target = settings.index_path("main")
    before = os.stat(target).st_ino
    os.replace(other.index_path("main"), target)
    assert os.stat(target).st_ino != before
    assert search(service, "KESTREL-42").results[0].snippet.endswith("KESTREL-42.")
    assert search(service, "atlas-docs-eu").results == []


def test_a_search_never_blocks_the_indexer(fresh) -> None:
    """A reader holding its snapshot open (WAL) does not stop a write transaction from committing."""
    settings, service = fresh
    index = service.index("main")
    with index.snapshot():
        writer = IndexWriter(settings.index_path("main"))
        with writer.transaction():
            writer.set_meta("probe", "written while a search was open")
        writer.close()
    assert search(service, "E-404").results


def test_the_service_opens_indexes_read_only(fresh) -> None:
    _, service = fresh
    index = service.index("main")
    with index.snapshot() as snap, pytest.raises(Exception, match="readonly"):
        snap.conn.execute("INSERT INTO meta(key, value) VALUES ('x', 'y')")


def test_query_embeddings_are_cached(corpus) -> None:
    _, service = corpus
    search(service, "a question asked twice about invoices")
    cached = len(service._embeddings.cache)
    search(service, "a question asked twice about invoices")
    assert len(service._embeddings.cache) == cached
    assert ("hash:feature-hash:256", "a question asked twice about invoices") in service._embeddings.cache


def test_unknown_agent_and_missing_index_are_errors(fresh, tmp_path: Path) -> None:
    from memoryd.shared.exceptions import IndexMissing, UnknownAgent

    settings, service = fresh
    with pytest.raises(UnknownAgent):
        service.search("nobody", SearchRequest(query="x"))
    settings.index_path("main").unlink()
    with pytest.raises(IndexMissing):
        search(service, "x")
