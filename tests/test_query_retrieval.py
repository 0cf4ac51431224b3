"""Retrieval quality on the fixed test set with the real local model (MiniLM): hit@k, not "returns something".

The numbers asserted are a little under what bench/retrieval.py measures (docs/query.md),
so a regression fails here while noise in the last decimal does not.
"""

from __future__ import annotations

import pytest
from retrieval_set import build, evaluate, first_hit, questions

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory):
    svc = QueryService(build(tmp_path_factory.mktemp("retrieval"), provider="local"))
    yield svc
    svc.close()


def test_default_fusion_beats_weighted(service: QueryService) -> None:
    qs = questions()
    rrf, weighted = evaluate(service, qs, "rrf"), evaluate(service, qs, "weighted")
    assert rrf["mrr"] > weighted["mrr"]
    assert rrf["recall@1"] > weighted["recall@1"]
    assert rrf["recall@3"] >= weighted["recall@3"]


def test_default_fusion_quality(service: QueryService) -> None:
    scores = evaluate(service, questions(), "rrf")
    assert scores["recall@1"] >= 0.8
    assert scores["recall@3"] >= 0.93
    assert scores["mrr"] >= 0.85


def test_hybrid_beats_either_side_alone(service: QueryService) -> None:
    qs = questions()
    rrf = evaluate(service, qs, "rrf")["mrr"]
    assert rrf > evaluate(service, qs, "keyword")["mrr"]
    assert rrf > evaluate(service, qs, "vector")["mrr"]


@pytest.mark.parametrize("question", [q for q in questions() if q.kind in {"identifier", "date", "cjk"}],
                         ids=lambda q: q.q)
def test_exact_questions_are_answered_first(service: QueryService, question) -> None:
    assert first_hit(service, question, "rrf") == 1


@pytest.mark.parametrize("question", [q for q in questions() if q.kind in {"decision", "person", "preference"}],
                         ids=lambda q: q.q)
def test_questions_about_decisions_people_and_preferences_hit_at_3(service: QueryService, question) -> None:
    rank = first_hit(service, question, "rrf")
    assert rank is not None and rank <= 3


def test_unanswerable_questions_return_nothing_above_min_score(service: QueryService) -> None:
    for query in ("what is the capital of Peru", "recipe for banana bread", "best hiking trails in Patagonia"):
        assert service.search("main", SearchRequest(query=query)).results == []


def test_the_local_model_answers_in_hybrid_mode(service: QueryService) -> None:
    answer = service.search("main", SearchRequest(query="What did we decide about the API?"))
    assert (answer.provider, answer.model, answer.mode) == ("local", "all-MiniLM-L6-v2-int8", "hybrid")
    assert answer.results[0].path in {"memory/2026-01-20.md", "MEMORY.md"}
