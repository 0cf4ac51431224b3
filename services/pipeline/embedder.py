"""Embedder worker: ``FileChunked`` → ``ChunksEmbedded``, with the content-hash cache first.

The work itself is ``memoryd.shared.embedding.embed_files``. When no provider works the
event still goes on without vectors, and :func:`backfill_job` fills them in once a
provider answers again (queued every ``vectorRetrySeconds`` by :func:`backfill_scheduler`).
"""

from __future__ import annotations

import logging

import redis
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from memoryd.shared import defaults as d
from memoryd.shared import providers
from memoryd.shared.embedding import chain_for, embed_files
from memoryd.shared.events import FileChunked, VectorData, VectorsFilled, parse_event
from memoryd.shared.exceptions import IndexMissing, ProviderError
from memoryd.shared.store import IndexReader
from memoryd.shared.worker import Periodic, WorkerContext, context

log = logging.getLogger("memoryd.embedder")


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
        ctx.bus.count(r.run, chunks_embedded=r.embedded, chunks_cached=r.cached)
    ctx.bus.emit("index", results)
    log.info("embedded %d chunks, %d from the cache, of %d files (agents %s)%s", sum(r.embedded for r in results),
             sum(r.cached for r in results), len(results), ", ".join(sorted({r.agent for r in results})),
             "".join(sorted({f"; {r.error}" for r in results if r.error})))
    return sum(r.embedded for r in results)


def backfill_job(agent: str) -> int:
    """RQ job: embed chunks the index holds without vectors; → how many were filled."""
    ctx = context()
    ctx.ensure_agent(agent)
    chain = chain_for(ctx, agent)
    if not chain:
        return 0
    try:
        reader = IndexReader(ctx.settings.index_path(agent))
    except IndexMissing:
        return 0
    try:
        rows = reader.chunks_missing_vectors(d.BACKFILL_BATCH)
    finally:
        reader.close()
    if not rows:
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
    ctx.bus.emit("fill", [event])
    return len(rows)


def _pending(ctx: WorkerContext, job_id: str) -> bool:
    try:
        status = Job.fetch(job_id, connection=ctx.bus.conn).get_status()
    except NoSuchJobError:
        return False
    return status in (JobStatus.QUEUED, JobStatus.STARTED, JobStatus.SCHEDULED, JobStatus.DEFERRED)


def schedule_backfills(ctx: WorkerContext) -> None:
    """Queue a backfill for every agent whose index has chunks without vectors."""
    for agent in ctx.bus.agents_missing_vectors():
        job_id = ctx.bus.job_id(f"backfill-{agent}")  # at most one backfill queued per agent
        if not _pending(ctx, job_id):
            ctx.bus.enqueue("backfill", agent, job_id=job_id, bulk=True)


def backfill_scheduler(ctx: WorkerContext) -> Periodic:
    """In each embedder process: every ``vectorRetrySeconds``, queue the backfills that are due."""
    period = min(ctx.settings.agent(a).memory_search.sync.vector_retry_seconds for a in ctx.settings.agent_ids())
    return Periodic("vector-backfill", period, lambda: schedule_backfills(ctx), errors=(redis.RedisError,))
