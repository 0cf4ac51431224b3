"""Indexer worker — the only writer of ``<state>/memory/<agent>.sqlite``.

Applies ``ChunksEmbedded``, ``FileDeleted``, ``FileSkipped`` and ``VectorsFilled`` through
``memoryd.shared.index.apply.apply``; a live edit's ``FileChunked`` comes first (:func:`text_job`,
texts only: keyword-searchable before the embedder answers) (stale events dropped by sequence number, one
transaction per file, idempotent). The index records its fingerprint (chunker,
tokenizer, FTS tokenizer, embedder); when the configured one differs, the indexer keeps
applying to it and queues a rebuild job (``memoryd.services.pipeline.rebuild``, by name),
which builds the new index side by side from the log and swaps it in: events are applied
under the agent's swap lock (shared), so none lands in the old file after its last fold.

Only the agent's owner writes its index (shared/runtime/lease.py): an event of an agent that
another node holds is passed on to that node's lanes, and every write carries this node's
fencing token, which the index and the log check. The chunkers' and embedders' output
(:func:`record_job`, :func:`fill_job`) is logged here, by the owner, before it is applied.

Each indexer process also watches for a Redis that lost its data and re-drives the lost
work from the log (``memoryd.shared.rebuild.recovery``), seals the log's checkpoints, and
queues backfills of the vectors its agents' indexes lack (:func:`backfill_scheduler`).
"""

from __future__ import annotations

import logging

import redis

from memoryd.shared import defaults as d
from memoryd.shared.events import (
    ChunksEmbedded,
    Event,
    FileChunked,
    FileDeleted,
    FileSkipped,
    IndexApplied,
    VectorsFilled,
    parse_event,
)
from memoryd.shared.exceptions import IndexMissing, MemorydError, NotOwner
from memoryd.shared.index import languages
from memoryd.shared.index.apply import apply, apply_text_first, open_writer, outdated
from memoryd.shared.index.store import META_EMBEDDER, IndexReader, IndexWriter
from memoryd.shared.rebuild.recovery import Recovery
from memoryd.shared.rebuild.sidebyside import request, swap_lock
from memoryd.shared.runtime import runs
from memoryd.shared.runtime.worker import Periodic, WorkerContext, context

log = logging.getLogger("memoryd.indexer")


def _writer(ctx: WorkerContext, agent: str, fence: int | None = None) -> IndexWriter:
    """This process's writer of the agent's index, reopened if another process swapped the file;
    its transactions carry ``fence`` (the agent's lease token)."""
    key = f"writer:{agent}"
    writer: IndexWriter = ctx.memo(key, lambda: _open(ctx, agent))
    if writer.replaced():
        writer.close()
        writer = ctx.cache[key] = _open(ctx, agent)
    writer.fence = fence
    return writer


def _owned(ctx: WorkerContext, job: str, events: list[Event]) -> tuple[list[Event], dict[str, int]]:
    """The events of the agents this node owns, and each such agent's fencing token (a free lease
    is taken). The others go to their owner's lanes of this job's lane."""
    tokens: dict[str, int] = {}
    elsewhere: dict[str, list[Event]] = {}
    for agent in dict.fromkeys(e.agent for e in events):
        ctx.ensure_agent(agent)
        try:
            tokens[agent] = ctx.bus.leases.token(agent)
        except NotOwner as exc:
            assert exc.owner is not None  # token() takes a free lease: a NotOwner names the holder
            elsewhere.setdefault(exc.owner, []).extend(e for e in events if e.agent == agent)
    for node, theirs in elsewhere.items():
        ctx.bus.enqueue(job, [e.model_dump_json() for e in theirs], node=node)
        log.info("passed %d events of agents %s to their owner, node %s", len(theirs),
                 ", ".join(sorted({e.agent for e in theirs})), node)
    return [e for e in events if e.agent in tokens], tokens


def _open(ctx: WorkerContext, agent: str) -> IndexWriter:
    ctx.settings = languages.at_open(ctx.settings, agent)
    writer = open_writer(ctx.settings, agent)
    if outdated(writer, ctx.settings, agent) and ctx.redis_bus is not None:
        request(ctx.bus, agent)  # built side by side; this one answers and takes events meanwhile
    return writer


def _apply(ctx: WorkerContext, event: ChunksEmbedded | FileDeleted | FileSkipped | VectorsFilled,
           fence: int) -> IndexApplied | None:
    with swap_lock(ctx.settings, event.agent).held(exclusive=False):
        return apply(_writer(ctx, event.agent, fence), event)


def _finish(ctx: WorkerContext, agents: dict[str, int], applied: list[IndexApplied]) -> None:
    for agent, fence in agents.items():
        ctx.bus.note_missing_vectors(agent, _writer(ctx, agent, fence).missing_vectors())
    for a in applied:
        runs.count(ctx.bus, a.run, files_done=1, chunks=a.chunks, files_skipped=int(a.action == "skipped"),
                      files_deleted=int(a.action == "deleted"))
    ctx.bus.log(applied)


def _parsed(job: str, events: list[str], kinds: tuple[type[Event], ...]) -> list[Event]:
    parsed = [parse_event(raw) for raw in events]
    for event in parsed:
        if not isinstance(event, kinds):
            raise TypeError(f"{job}_job got a {event.type} event")
    return parsed


def index_job(events: list[str]) -> int:
    """RQ job: apply a batch of logged file events to their agents' indexes."""
    ctx = context()
    mine, tokens = _owned(ctx, "index", _parsed("index", events, (ChunksEmbedded, FileDeleted, FileSkipped)))
    return _index(ctx, mine, tokens)


def record_job(events: list[str]) -> int:
    """RQ job: a chunker's or embedder's file events, logged here (by the owner, under its fencing
    token), then applied."""
    ctx = context()
    mine, tokens = _owned(ctx, "record", _parsed("record", events, (ChunksEmbedded, FileDeleted, FileSkipped)))
    ctx.bus.log(mine)
    return _index(ctx, mine, tokens)


def _index(ctx: WorkerContext, events: list[Event], tokens: dict[str, int]) -> int:
    applied: list[IndexApplied] = []
    for event in events:
        assert isinstance(event, ChunksEmbedded | FileDeleted | FileSkipped)
        result = _apply(ctx, event, tokens[event.agent])
        if result is not None:
            applied.append(result)
    _finish(ctx, tokens, applied)
    _follow_languages(ctx, events, tokens)
    actions: dict[str, int] = {}
    for a in applied:
        actions[a.action] = actions.get(a.action, 0) + 1
    log.info("applied %d events (%s; %d chunks) to agents %s", len(events),
             ", ".join(f"{n} {action}" for action, n in sorted(actions.items())) or "nothing new",
             sum(a.chunks for a in applied), ", ".join(sorted(tokens)))
    return len(applied)


def _follow_languages(ctx: WorkerContext, events: list[Event], tokens: dict[str, int]) -> None:
    """An agent whose memory came to hold CJK text gets the multilingual model: marked, then its
    index rebuilt side by side (shared/index/languages.py)."""
    follower: languages.Follower = ctx.memo("languages", languages.Follower)
    for agent, fence in tokens.items():
        texts = [c.text for e in events if e.agent == agent and isinstance(e, ChunksEmbedded) for c in e.chunks]
        followed = follower.follow(ctx.settings, agent, texts, _writer(ctx, agent, fence).conn)
        if followed is not None:
            ctx.settings = followed
            request(ctx.bus, agent)


def text_job(events: list[str]) -> int:
    """RQ job: a live edit's chunk texts, ahead of their vectors (``apply_text_first``: not logged,
    not counted in a run; the file's ``chunks.embedded`` follows). → files written."""
    ctx = context()
    written = 0
    mine, tokens = _owned(ctx, "text", _parsed("text", events, (FileChunked,)))
    for event in mine:
        assert isinstance(event, FileChunked)
        with swap_lock(ctx.settings, event.agent).held(exclusive=False):
            written += apply_text_first(_writer(ctx, event.agent, tokens[event.agent]), event)
    log.info("stored the texts of %d of %d chunked files ahead of their vectors", written, len(events))
    return written


def fill_job(events: list[str]) -> int:
    """RQ job: an embedder's backfilled vectors, logged here (by the owner), then attached."""
    ctx = context()
    mine, tokens = _owned(ctx, "fill", _parsed("fill", events, (VectorsFilled,)))
    ctx.bus.log(mine)
    for event in mine:
        assert isinstance(event, VectorsFilled)
        _apply(ctx, event, tokens[event.agent])
    _finish(ctx, tokens, [])
    return len(mine)


def recovery_scheduler(ctx: WorkerContext) -> Periodic:
    """In each indexer process: every second, re-drive from the log what a Redis that lost its
    data dropped (at once at start: a Redis restarted while no indexer ran is found too)."""
    recovery = Recovery(ctx.bus)
    return Periodic("log-recovery", d.LOG_RECOVERY_SECONDS, lambda: recovery.check(ctx.settings),
                    errors=(redis.RedisError, OSError, MemorydError), immediately=True)


def schedule_backfills(ctx: WorkerContext) -> None:
    """Queue, for every agent this node owns whose index has chunks without vectors, a backfill of
    up to BACKFILL_BATCH of them (their texts travel with the job: any embedder can take it)."""
    for agent in ctx.bus.agents_missing_vectors():
        owner = ctx.bus.leases.owner(agent)
        job_id = ctx.bus.job_id(f"backfill-{agent}")  # at most one backfill queued per agent
        if owner is None or owner.node != ctx.settings.node or ctx.bus.pending(job_id):
            continue
        try:
            reader = IndexReader(ctx.settings.index_path(agent))
        except IndexMissing:
            continue
        try:
            rows = reader.chunks_missing_vectors(d.BACKFILL_BATCH)
            embedder = reader.meta(META_EMBEDDER)
        finally:
            reader.close()
        if rows:
            ctx.bus.enqueue("backfill", agent, [list(r) for r in rows], embedder, job_id=job_id, bulk=True)


def backfill_scheduler(ctx: WorkerContext) -> Periodic:
    """In each indexer process: every ``vectorRetrySeconds``, queue the backfills that are due."""
    period = min(ctx.settings.agent(a).memory_search.sync.vector_retry_seconds for a in ctx.settings.agent_ids())
    return Periodic("vector-backfill", period, lambda: schedule_backfills(ctx), errors=(redis.RedisError, OSError))
