"""Embedding a batch of chunked files: the content-hash cache first, then one provider call.

Each chunk is looked up by (embedder, sha256 of its text) in a per-process LRU, then in the
model's cache shared by every agent of the installation (``content.VectorStore``,
``<state>/cache/<embedder>.sqlite``: the event log stores each embedded chunk's vectors there
before it logs the event), then in the agent's own index; only misses go to the provider,
batched across every file. The same note indexed for a second agent costs no provider call.
When no provider works the files still go on,
without those vectors: the indexer stores the chunks for keyword search marked
"vector missing", and the embedder's backfill fills them in once a provider answers.

Used by the embedder stage and by the in-process fold (``memoryd.shared.indexing``).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from memoryd.shared import defaults as d
from memoryd.shared import providers
from memoryd.shared.content import VectorStore
from memoryd.shared.events import ChunksEmbedded, FileChunked, VectorData
from memoryd.shared.exceptions import IndexMissing, ProviderError
from memoryd.shared.store import IndexReader
from memoryd.shared.worker import WorkerContext

log = logging.getLogger("memoryd.embedding")


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

    def put(self, key: tuple[str, str], value: np.ndarray) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


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
        store: VectorStore = ctx.memo(f"vector-store:{embedder}", lambda: VectorStore(ctx.settings.state_dir, embedder))
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
