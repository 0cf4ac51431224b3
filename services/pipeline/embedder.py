"""Embedder worker: ``FileChunked`` → ``ChunksEmbedded``, with the content-hash cache first.

Each chunk is looked up by (embedder, sha256 of its text) in a per-process LRU, then in the
model's cache shared by every agent of the installation (``content.VectorStore``,
``<state>/cache/<embedder>.sqlite``: the event log stores each embedded chunk's vectors there
before it logs the event), then in the agent's own index; only misses go to the provider,
batched across every file. The same note indexed for a second agent costs no provider call.
When no provider works the event still goes on without vectors: the indexer stores the
chunks for keyword search marked "vector missing", and :func:`backfill_job` fills them in
once a provider answers again (queued every ``vectorRetrySeconds`` by the owner's indexer).

Embedders log nothing and write no index: their output goes to each agent's owner
(``Bus.send``), so they run on any node that reaches Redis; the caches on disk they use
when they are there (the model's vector store, the agent's index) are only caches.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from memoryd.shared import defaults as d
from memoryd.shared.embed import providers
from memoryd.shared.events import ChunksEmbedded, FileChunked, VectorData, VectorsFilled, parse_event
from memoryd.shared.exceptions import IndexMissing, ProviderError
from memoryd.shared.index.content import VectorStore
from memoryd.shared.index.store import IndexReader
from memoryd.shared.runtime import runs
from memoryd.shared.runtime.worker import WorkerContext, context

log = logging.getLogger("memoryd.embedder")


class VectorLRU:
    def __init__(self, size: int = d.VECTOR_LRU_ENTRIES) -> None:
        self.size = size
        self.items: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> np.ndarray | None:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def close(self) -> None:
        """Forget every vector (an idle worker's memory comes back down; the disk cache keeps them)."""
        with self.lock:
            self.items.clear()

    def put(self, key: tuple[str, str], value: np.ndarray) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


def _embedder_of(ctx: WorkerContext, agent: str) -> str:
    """The embedder the agent's settings in this process name (its index's, when they are the owner's)."""
    return providers.describe(ctx.settings.agent(agent).memory_search)[2]


def chain_for(ctx: WorkerContext, agent: str) -> list[providers.Provider]:
    search = ctx.settings.agent(agent).memory_search
    return ctx.memo(f"providers:{search.model_dump_json()}", lambda: providers.resolve(search))


def _cached(ctx: WorkerContext, agent: str, embedder: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
    """What is known already: this process's LRU, then the model's shared cache (every agent's
    vectors by text hash), then the agent's own index (a chunk it holds, e.g. moved to another file)."""
    lru: VectorLRU = ctx.memo("lru", VectorLRU)
    found = {h: v for h in hashes if (v := lru.get((embedder, h))) is not None}
    missing = [h for h in hashes if h not in found]
    if missing:
        store: VectorStore = ctx.memo(f"vector-store:{embedder}", lambda: VectorStore(ctx.settings.data_dir, embedder))
        found.update(store.get(missing))
        missing = [h for h in missing if h not in found]
    if missing:
        try:
            reader = IndexReader(ctx.settings.index_path(agent))
        except IndexMissing:
            reader = None
        if reader is not None:
            try:
                found.update(reader.stored_vectors(embedder, missing))
            finally:
                reader.close()
    for h in hashes:
        if h in found:
            lru.put((embedder, h), found[h])
    return found


def embed_files(ctx: WorkerContext, events: Sequence[FileChunked]) -> list[ChunksEmbedded]:
    """One provider call for all cache misses of ``events`` (one agent's or several)."""
    out: list[ChunksEmbedded] = []
    by_agent: dict[str, list[FileChunked]] = {}
    for event in events:
        by_agent.setdefault(event.agent, []).append(event)
    lru: VectorLRU = ctx.memo("lru", VectorLRU)
    for agent, group in by_agent.items():
        chain = chain_for(ctx, agent)
        name, model, embedder = providers.describe(ctx.settings.agent(agent).memory_search)
        hashes = list(dict.fromkeys(c.hash for e in group for c in e.chunks))
        vectors = _cached(ctx, agent, embedder, hashes) if chain else {}
        cached = set(vectors)
        todo = {c.hash: c.text for e in group for c in e.chunks if c.hash not in vectors}
        error = None
        if todo and chain:
            try:
                matrices, used = providers.embed_with_fallback(chain, list(todo.values()))
                for h, m in zip(todo, matrices, strict=True):
                    vectors[h] = m
                    lru.put((embedder, h), m)
                name, model = used.name, used.model
            except ProviderError as exc:
                error = str(exc)
                log.warning("agent %s: %d chunks left without vectors: %s", agent, len(todo), exc)
            if ctx.redis_bus is not None:
                ctx.redis_bus.note_provider_error(agent, error)
        elif todo:
            error = "no embedding provider (memorySearch.provider = none): keyword search only"
        embedded_now = set(todo) & set(vectors)
        for event in group:
            own = list(dict.fromkeys(c.hash for c in event.chunks))
            out.append(ChunksEmbedded(
                agent=event.agent, path=event.path, seq=event.seq, run=event.run, source=event.source,
                sha256=event.sha256, size=event.size, mtime=event.mtime, chunker=event.chunker,
                chunks=event.chunks, embedder=embedder, provider=name, model=model,
                vectors=[VectorData.pack(h, vectors[h]) for h in own if h in vectors],
                cached=sum(1 for h in own if h in cached),
                embedded=sum(1 for h in own if h in embedded_now),
                error=error,
            ))
            embedded_now -= set(own)  # a chunk shared by two files was embedded once
    return out


def embed_job(events: list[str]) -> int:
    """RQ job: embed a batch of chunked files. Idempotent: the cache makes a rerun cheap."""
    ctx = context()
    parsed = [parse_event(raw) for raw in events]
    for event in parsed:
        if not isinstance(event, FileChunked):
            raise TypeError(f"embed_job got a {event.type} event; only file.chunked belongs on this queue")
        ctx.ensure_agent(event.agent)
    results = embed_files(ctx, parsed)  # type: ignore[arg-type]
    for r in results:
        runs.count(ctx.bus, r.run, chunks_embedded=r.embedded, chunks_cached=r.cached)
    ctx.bus.send("record", results)
    log.info("embedded %d chunks, %d from the cache, of %d files (agents %s)%s", sum(r.embedded for r in results),
             sum(r.cached for r in results), len(results), ", ".join(sorted({r.agent for r in results})),
             "".join(sorted({f"; {r.error}" for r in results if r.error})))
    return sum(r.embedded for r in results)


def backfill_job(agent: str, rows: list[list[str]], embedder: str | None = None) -> int:
    """RQ job: embed chunks (hash, text) that the owner's index holds without vectors (queued by the
    owner's indexer, services/pipeline/indexer.py); the vectors go back to it. → how many.
    ``embedder`` is the one the index uses (None in jobs queued by an older memoryd): an embedder
    whose agent settings name another reads them again first, and embeds nothing while they still
    do (the index would drop those vectors, and the backfill would come back every
    ``vectorRetrySeconds``, for good)."""
    ctx = context()
    ctx.ensure_agent(agent)
    if embedder is not None and _embedder_of(ctx, agent) != embedder:
        ctx.ensure_agent(agent, reread=True)
        if (named := _embedder_of(ctx, agent)) != embedder:
            log.warning("agent %s: backfill not embedded: its index uses %s, this embedder's settings name %s "
                        "(the index being rebuilt for it, or this node's config differs from the owner's: "
                        "give it the same memorySearch)", agent, embedder, named)
            return 0
    chain = chain_for(ctx, agent)
    if not chain or not rows:
        return 0
    try:
        matrices, used = providers.embed_with_fallback(chain, [text for _, text in rows])
    except ProviderError as exc:
        log.info("agent %s: backfill waits, provider still failing: %s", agent, exc)
        ctx.bus.note_provider_error(agent, str(exc))
        return 0
    ctx.bus.note_provider_error(agent, None)
    event = VectorsFilled(agent=agent, embedder=used.embedder, embedded=len(rows),
                          vectors=[VectorData.pack(h, m) for (h, _), m in zip(rows, matrices, strict=True)])
    ctx.bus.send("fill", [event])
    return len(rows)
