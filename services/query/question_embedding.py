"""The query side's embeddings: cached, on threads of their provider endpoint's own (one per
remote endpoint; one per in-process model, which embeds the questions waiting for it together),
never awaited inside a snapshot.

A search starts its query's embedding (:meth:`QueryEmbedder.start`) before it takes its
snapshot, on the threads of the provider's endpoint: a hung remote provider of one agent
then holds only its own threads, never another agent's searches nor the agent's index.
The matrix scan that follows the embedding may only run while the search holds its
snapshot, so :class:`VectorSide` starts it (on a scan thread, beside the keyword side) when
the embedding arrives in time, and never after :meth:`VectorSide.close`. A search whose
embedding is late waits for it outside the snapshot, up to
``memorySearch.query.embedTimeoutMs`` (:func:`settle`), and answers from keywords after
that. The embedding goes on in the background and fills the cache for the next search.
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


#: One question to embed: its provider chain, its cache key (embedder, text) and who waits for it.
_Question = tuple[list[providers.Provider], tuple[str, str], Future[Embedded]]


class QueryEmbedder:
    def __init__(self, cache_size: int = d.QUERY_CACHE_SIZE) -> None:
        self.cache_size = cache_size
        self.cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self.inflight: dict[tuple[str, str], Future[Embedded]] = {}
        self.threads: dict[str, ThreadPoolExecutor] = {}
        self.batches: dict[str, _Batches] = {}
        self.lock = threading.Lock()

    def start(self, chain: Sequence[providers.Provider], text: str) -> Future[Embedded]:
        """The query's vector: at once from the cache, else the call in flight for the same text,
        else a new call on the endpoint's own thread(s)."""
        key = (chain[0].embedder, text)
        with self.lock:
            cached = self.cache.get(key)
            if cached is not None:
                self.cache.move_to_end(key)
                return done((cached, None))
            if key in self.inflight:
                return self.inflight[key]
            endpoint = providers.endpoint(chain[0])
            if getattr(chain[0], "embed_queries", None) is not None:  # an in-process model
                if endpoint not in self.batches:
                    self.batches[endpoint] = _Batches(self._embed_together)
                future = self.batches[endpoint].ask(list(chain), key)
            else:
                if endpoint not in self.threads:
                    self.threads[endpoint] = ThreadPoolExecutor(max_workers=d.REMOTE_EMBED_THREADS,
                                                                thread_name_prefix="memoryd-embed")
                future = self.threads[endpoint].submit(self._embed, list(chain), key)
            self.inflight[key] = future
        return future

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

    def _embed_together(self, asked: list[_Question]) -> None:
        """The questions waiting for one in-process model, in one call of its first provider; if
        that fails, each one alone through its chain (its fallbacks, its reason)."""
        try:
            vectors = np.asarray(asked[0][0][0].embed_queries([key[1] for _, key, _ in asked]), dtype=np.float32)
        except ProviderError:
            for chain, key, future in asked:
                _settle(future, lambda chain=chain, key=key: self._embed(chain, key))
            return
        except Exception as exc:  # noqa: BLE001 - handed to each search, as its own call would have raised it
            for _, key, future in asked:
                with self.lock:
                    self.inflight.pop(key, None)
                future.set_exception(exc)
            return
        for (_, key, future), vector in zip(asked, vectors, strict=True):
            self._keep(key, vector)
            with self.lock:
                self.inflight.pop(key, None)
            future.set_result((vector, None))

    def _keep(self, key: tuple[str, str], vector: np.ndarray) -> None:
        with self.lock:
            self.cache[key] = vector
            while len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)

    def close(self) -> None:
        with self.lock:
            threads = list(self.threads.values())
            batches = list(self.batches.values())
        for pool in threads:
            pool.shutdown(wait=False, cancel_futures=True)  # a hung provider must not hold the shutdown
        for batch in batches:
            batch.close()


def _settle(future: Future[Embedded], embed: Callable[[], Embedded]) -> None:
    try:
        future.set_result(embed())
    except Exception as exc:  # noqa: BLE001 - the search that waits for it raises it
        future.set_exception(exc)


class _Batches:
    """One thread for an in-process model: it embeds all the questions that wait when it is free
    (up to ``d.QUERY_EMBED_BATCH``) in one call. A question alone runs alone, at once; searches
    that arrive together share the thread instead of splitting the cores between ONNX runs: a
    float model runs them together (the same vectors, ~¾ of the CPU each), MiniLM's int8 question
    model one after another (providers.LocalProvider.embed_queries)."""

    def __init__(self, embed: Callable[[list[_Question]], None]) -> None:
        self.embed = embed
        self.waiting: list[_Question] = []
        self.changed = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="memoryd-embed", daemon=True)
        self.thread.start()

    def ask(self, chain: list[providers.Provider], key: tuple[str, str]) -> Future[Embedded]:
        future: Future[Embedded] = Future()
        with self.changed:
            if self.closed:
                future.cancel()
                return future
            self.waiting.append((chain, key, future))
            self.changed.notify()
        return future

    def _run(self) -> None:
        while True:
            with self.changed:
                while not self.waiting and not self.closed:
                    self.changed.wait()
                if self.closed:
                    return
                asked, self.waiting = self.waiting[:d.QUERY_EMBED_BATCH], self.waiting[d.QUERY_EMBED_BATCH:]
            self.embed(asked)

    def close(self) -> None:
        with self.changed:
            self.closed = True
            waiting, self.waiting = self.waiting, []
            self.changed.notify()
        for _, _, future in waiting:
            future.cancel()


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
    """One search's scan of the agent's vectors, allowed only while the search holds its snapshot."""

    def __init__(self, embedding: Future[Embedded], scan: Callable[[np.ndarray], list[VectorHit]],
                 pool: Executor) -> None:
        self.embedding = embedding
        self.scan = scan
        self.pool = pool
        self.lock = threading.Lock()
        self.open = True
        self.scanning: Future[Vectors] | None = None
        embedding.add_done_callback(self._embedded)

    def _embedded(self, embedding: Future[Embedded]) -> None:
        if embedding.cancelled() or embedding.exception() is not None:
            return
        vector, _ = embedding.result()
        with self.lock:
            if self.open and vector is not None:
                self.scanning = self.pool.submit(lambda: Vectors(vector, None, self.scan(vector)))

    def close(self) -> Vectors | None:
        """No scan may start after this; → the vector side's outcome, or None if the embedding is
        not there yet. Waits only for a scan already started (bounded by the matrix, not the provider)."""
        with self.lock:
            self.open = False
            scanning = self.scanning
        if scanning is not None:
            return scanning.result()
        if not self.embedding.done():
            return None
        vector, reason = self.embedding.result()
        return Vectors(None, reason) if vector is None else Vectors(vector, None, self.scan(vector))
