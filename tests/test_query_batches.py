"""Questions that arrive together are embedded together (services/query/question_embedding.py).

The real MiniLM model: while the model's one query thread is busy with a first question, the
next ones wait and then go in one run, with the vectors each would have had alone. A run that
fails hands each question to its own chain (its fallback, or its reason).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from memoryd.services.query.question_embedding import QueryEmbedder
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed.providers import HashProvider, LocalProvider
from memoryd.shared.exceptions import ProviderError

#: A question's embedding takes milliseconds; one not there by then is lost.
DEADLINE_S = 30
QUESTIONS = ["What did Caroline research?", "When did Melanie paint a sunrise?", "Where did Jon go on vacation?",
             "How long has Gina been dancing?", "why", "Which book did Melanie read about a girl in the marsh?"]


class GatedModel(LocalProvider):
    """The real model, holding its first run until the test lets it go; it notes each run's size."""

    def __init__(self) -> None:
        super().__init__(LocalSettings())
        self.runs: list[int] = []
        self.started = threading.Event()
        self.go = threading.Event()

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.runs.append(len(texts))
        self.started.set()
        assert self.go.wait(DEADLINE_S), "the test never let the first run go"
        return super().embed_queries(texts)


@pytest.fixture(scope="module")
def alone() -> dict[str, np.ndarray]:
    model = LocalProvider(LocalSettings())
    return {q: model.embed_query(q) for q in QUESTIONS}


def test_questions_waiting_for_the_model_go_in_one_run_with_their_own_vectors(alone: dict[str, np.ndarray]) -> None:
    model = GatedModel()
    embedder = QueryEmbedder()
    try:
        first = embedder.start([model], QUESTIONS[0])
        assert model.started.wait(DEADLINE_S)
        waiting = [embedder.start([model], q) for q in QUESTIONS[1:]]
        model.go.set()
        answers = [f.result(timeout=DEADLINE_S) for f in [first, *waiting]]
    finally:
        embedder.close()
    assert model.runs == [1, len(QUESTIONS) - 1]
    for question, (vector, reason) in zip(QUESTIONS, answers, strict=True):
        assert reason is None
        assert np.array_equal(vector, alone[question]), question  # padding is masked: bit for bit
    again = embedder.start([model], QUESTIONS[3])  # from the cache: no run
    assert again.done() and np.array_equal(again.result()[0], alone[QUESTIONS[3]])
    assert model.runs == [1, len(QUESTIONS) - 1]


def test_no_run_takes_more_than_the_batch_size(alone: dict[str, np.ndarray]) -> None:
    model = GatedModel()
    embedder = QueryEmbedder()
    asked = [f"{q} ({n})" for n in range(2) for q in QUESTIONS]
    try:
        first = embedder.start([model], "a first question")
        assert model.started.wait(DEADLINE_S)
        waiting = [embedder.start([model], q) for q in asked]
        model.go.set()
        for f in [first, *waiting]:
            assert f.result(timeout=DEADLINE_S)[1] is None
    finally:
        embedder.close()
    assert model.runs == [1, d.QUERY_EMBED_BATCH, len(asked) - d.QUERY_EMBED_BATCH]


class BrokenModel(GatedModel):
    """The real model whose first run works and every later one fails as a provider error."""

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if self.runs:
            self.runs.append(len(texts))
            raise ProviderError("local", "the model failed", retryable=False)
        return super().embed_queries(texts)


def test_a_failed_run_sends_each_question_through_its_own_chain(alone: dict[str, np.ndarray]) -> None:
    model = BrokenModel()
    fallback = HashProvider()
    embedder = QueryEmbedder()
    try:
        first = embedder.start([model], QUESTIONS[0])
        assert model.started.wait(DEADLINE_S)
        with_fallback = [embedder.start([model, fallback], q) for q in QUESTIONS[1:4]]
        without = embedder.start([model], QUESTIONS[4])
        model.go.set()
        assert first.result(timeout=DEADLINE_S)[0] is not None
        answers = [f.result(timeout=DEADLINE_S) for f in with_fallback]
        vector, reason = without.result(timeout=DEADLINE_S)
    finally:
        embedder.close()
    assert model.runs == [1, 4, 1, 1, 1, 1]  # the shared run, then each question alone
    for question, (got, why) in zip(QUESTIONS[1:4], answers, strict=True):
        assert why is None and np.array_equal(got, fallback.embed_query(question)), question
    assert vector is None and reason is not None and "the model failed" in reason
