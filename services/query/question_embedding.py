"""The query side's embeddings: cached; a remote provider's on its endpoint's own threads, an
in-process model's by the search itself, in its turn.

A search asks for its query's embedding (:meth:`QueryEmbedder.start`) before it takes its
turn. A remote provider's call starts at once, on the threads of the provider's endpoint: a
hung remote provider of one agent then holds only its own threads, never another agent's
searches nor the agent's index. A search whose remote embedding is late waits for it outside
its snapshot, up to ``memorySearch.query.embedTimeoutMs`` (:func:`settle`), and answers from
keywords after that; the call goes on in the background and fills the cache for the next search.

An in-process model (MiniLM, e5) has no one to wait for: the search embeds its question itself
(:class:`InTurn`, :meth:`QueryEmbedder.now`), in its turn, on its own thread, then scans the
vectors there too (:class:`VectorSide`). A search is one thread's work on one core, and the
searches of a process run one after another, first come first served (services/query/turns.py):
with eight callers on two cores the model's thread, the scan's threads and the searches had
traded each core and the GIL among them, and the unlucky waited longest (docs/query.md,
*Concurrency*).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import numpy as np

from memoryd.services.query.vectors import VectorHit
from memoryd.shared import defaults as d
from memoryd.shared.embed import providers
from memoryd.shared.exceptions import ProviderError

#: A query's vector, or why there is none.
Embedded = tuple[np.ndarray | None, str | None]


@dataclass
class Vectors:
    """The vector side's outcome for one search: the query vector and its hits, or why there is none."""

    query: np.ndarray | None
    reason: str | None
    hits: list[VectorHit] = field(default_factory=list)


def done(value: Embedded) -> Future[Embedded]:
    future: Future[Embedded] = Future()
    future.set_result(value)
    return future


@dataclass(frozen=True)
class InTurn:
    """A question for an in-process model: its provider chain and its cache key (embedder, text)."""

    chain: list[providers.Provider]
    key: tuple[str, str]


class QueryEmbedder:
    def __init__(self, cache_size: int = d.QUERY_CACHE_SIZE) -> None:
        self.cache_size = cache_size
        self.cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self.inflight: dict[tuple[str, str], Future[Embedded]] = {}
        self.threads: dict[str, ThreadPoolExecutor] = {}
        self.lock = threading.Lock()

    def start(self, chain: Sequence[providers.Provider], text: str) -> Future[Embedded] | InTurn:
        """The query's vector: at once from the cache, else the call in flight for the same text,
        else a new call on a remote endpoint's own thread(s); for an in-process model, the question
        to embed in the search's turn (:meth:`now`)."""
        key = (chain[0].embedder, text)
        with self.lock:
            cached = self.cache.get(key)
            if cached is not None:
                self.cache.move_to_end(key)
                return done((cached, None))
            if getattr(chain[0], "embed_queries", None) is not None:  # an in-process model
                return InTurn(list(chain), key)
            if key in self.inflight:
                return self.inflight[key]
            endpoint = providers.endpoint(chain[0])
            if endpoint not in self.threads:
                self.threads[endpoint] = ThreadPoolExecutor(max_workers=d.REMOTE_EMBED_THREADS,
                                                            thread_name_prefix="memoryd-embed")
            future = self.threads[endpoint].submit(self._embed, list(chain), key)
            self.inflight[key] = future
        return future

    def now(self, question: InTurn) -> Future[Embedded]:
        """An in-process model's question, embedded on this thread (through its chain on a provider error)."""
        return done(self._embed(question.chain, question.key))

    def _embed(self, chain: list[providers.Provider], key: tuple[str, str]) -> Embedded:
        errors = []
        try:
            for provider in chain:
                try:
                    vector = np.asarray(provider.embed_query(key[1]), dtype=np.float32)
                except ProviderError as exc:
                    errors.append(str(exc))
                    continue
                self._keep(key, vector)
                return vector, None
            return None, "embedding the query failed (" + "; ".join(errors) + "): answered by keyword"
        finally:
            with self.lock:
                self.inflight.pop(key, None)

    def _keep(self, key: tuple[str, str], vector: np.ndarray) -> None:
        with self.lock:
            self.cache[key] = vector
            while len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)

    def close(self) -> None:
        with self.lock:
            threads = list(self.threads.values())
        for pool in threads:
            pool.shutdown(wait=False, cancel_futures=True)  # a hung provider must not hold the shutdown


def settle(embedding: Future[Embedded], seconds: float, budget_ms: int) -> Future[Embedded]:
    """``embedding`` once it is done, waiting at most ``seconds``; after that, a keyword-only reason."""
    try:
        embedding.result(timeout=max(seconds, 0.0))
    except FutureTimeout:
        return done((None, f"the query's embedding took longer than {budget_ms} ms "
                           "(memorySearch.query.embedTimeoutMs): the provider is slow or not answering; "
                           "answered by keyword"))
    return embedding


class VectorSide:
    """One search's scan of the agent's vectors, once its query is embedded: on the search's own
    thread, or, given ``beside`` (a big index: services/query/engine.py), started at once on a
    thread of that pool while the search reads its keyword side."""

    def __init__(self, embedding: Future[Embedded], scan: Callable[[np.ndarray], list[VectorHit]],
                 beside: Executor | None = None) -> None:
        self.embedding = embedding
        self.scan = scan
        self.running = beside.submit(self._scanned) if beside is not None and embedding.done() else None

    def scanned(self) -> Vectors | None:
        """The vector side's outcome; None if the (remote) embedding is not there yet."""
        return self.running.result() if self.running is not None else self._scanned()

    def _scanned(self) -> Vectors | None:
        if not self.embedding.done():
            return None
        vector, reason = self.embedding.result()
        return Vectors(None, reason) if vector is None else Vectors(vector, None, self.scan(vector))
