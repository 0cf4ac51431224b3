"""A search is one thread's work, in its turn (services/query/engine.py, question_embedding.py).

The real MiniLM model on the retrieval fixture's index: an in-process model's question is
embedded by the search itself, on its own thread, while it holds its turn, and the vectors are
scanned on that thread too; a second search waits in line meanwhile, its question not embedded
yet. A model that fails hands the question to the next provider of its chain.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from retrieval_set import build
from support import Run, wait_until

from memoryd.services.query import engine
from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.services.query.question_embedding import InTurn, QueryEmbedder
from memoryd.services.query.vectors import VectorIndex
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed.providers import HashProvider, LocalProvider
from memoryd.shared.exceptions import ProviderError

#: A search of the fixture takes milliseconds; one not done by then is stuck.
DEADLINE_S = 30


def test_a_search_embeds_its_question_and_scans_on_its_own_thread_in_its_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d, "SEARCHES_AT_ONCE", 1)
    service = QueryService(build(tmp_path))
    try:
        model = service._chain(service.agent("main"))[0]
        assert isinstance(model, LocalProvider)
        embedded: list[tuple[str, int]] = []  # (thread, turns free) at each model run
        scanned: list[str] = []
        inside, go = threading.Event(), threading.Event()
        embed_queries, search = model.embed_queries, VectorIndex.search

        def gated(texts: Sequence[str]) -> np.ndarray:
            embedded.append((threading.current_thread().name, service._turns._free))
            if not inside.is_set():
                inside.set()
                assert go.wait(DEADLINE_S), "the test never let the first question go"
            return embed_queries(texts)

        def noted(self: VectorIndex, *args: Any) -> Any:
            scanned.append(threading.current_thread().name)
            return search(self, *args)

        monkeypatch.setattr(model, "embed_queries", gated)
        monkeypatch.setattr(VectorIndex, "search", noted)
        first = Run(lambda: service.search("main", SearchRequest(query="Where is the Atlas documentation hosted?")),
                    name="first", deadline=DEADLINE_S)
        try:
            assert inside.wait(DEADLINE_S)
            second = Run(lambda: service.search("main", SearchRequest(query="Who reviews the budget?")),
                         name="second", deadline=DEADLINE_S)
            wait_until(lambda: len(service._turns._waiting) == 1, timeout=DEADLINE_S,
                       what="the second search waiting in line for the one turn")
            assert embedded == [("first", 0)]  # the second's question waits with it, not embedded meanwhile
        finally:
            go.set()
        assert first.result().mode == second.result().mode == "hybrid"
        assert embedded == [("first", 0), ("second", 0)]  # each on its own thread, holding the turn
        assert scanned == ["first", "second"]
    finally:
        service.close()


def test_a_big_indexs_vector_side_runs_beside_the_keyword_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``VECTORS_BESIDE_ROWS`` vectors (here: any) the vector side starts on a thread of its
    own as the search takes its turn, and is under way while the search reads its keyword side."""
    monkeypatch.setattr(d, "VECTORS_BESIDE_ROWS", 1)
    service = QueryService(build(tmp_path))
    try:
        service.search("main", SearchRequest(query="warm up"))  # the model and the vectors loaded
        scanning, keyword_read = threading.Event(), threading.Event()
        scanned: list[str] = []
        search, text_side = VectorIndex.search, QueryService._text_side

        def noted(self: VectorIndex, *args: Any) -> Any:
            scanned.append(threading.current_thread().name)
            scanning.set()
            assert keyword_read.wait(DEADLINE_S), "the keyword side never ran while the vectors were scanned"
            return search(self, *args)

        def keyword(self: QueryService, *args: Any, **kwargs: Any) -> Any:
            assert scanning.wait(DEADLINE_S), "the vector side did not start before the keyword side"
            keyword_read.set()
            return text_side(self, *args, **kwargs)

        monkeypatch.setattr(VectorIndex, "search", noted)
        monkeypatch.setattr(QueryService, "_text_side", keyword)
        answer = Run(lambda: service.search("main", SearchRequest(query="Who reviews the budget?")),
                     name="searching", deadline=DEADLINE_S).result()
        assert answer.mode == "hybrid" and answer.results
        assert len(scanned) == 1 and scanned[0].startswith("memoryd-scan")
    finally:
        service.close()


def test_each_query_process_runs_its_share_of_the_searches_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d, "SEARCHES_AT_ONCE", 4)
    assert [engine.searches_at_once(n) for n in (1, 2, 3, 4, 8)] == [4, 2, 1, 1, 1]


class BrokenModel(LocalProvider):
    """The real model, failing every run as a provider error."""

    def __init__(self) -> None:
        super().__init__(LocalSettings())

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        raise ProviderError("local", "the model failed", retryable=False)


def test_a_failing_in_process_model_hands_the_question_to_the_next_provider_of_its_chain() -> None:
    fallback, embedder = HashProvider(), QueryEmbedder()
    question = "When did Melanie paint a sunrise?"
    asked = embedder.start([BrokenModel(), fallback], question)
    assert isinstance(asked, InTurn)  # in-process: made in the search's turn, not started elsewhere
    vector, reason = embedder.now(asked).result()
    assert reason is None and np.array_equal(vector, fallback.embed_query(question))
    cached = embedder.start([BrokenModel(), fallback], question)  # the same embedder named first: from the cache
    assert not isinstance(cached, InTurn) and np.array_equal(cached.result()[0], vector)
    vector, reason = embedder.now(embedder.start([BrokenModel()], "Where did Jon go?")).result()
    assert vector is None and reason is not None and "the model failed" in reason
    embedder.close()
