"""Chunker worker: ``FileChanged`` → ``FileChunked`` (to the embedder) or ``FileSkipped``.

Reads the file once, checks it is memory (not binary, UTF-8, not huge), and splits it
into ~400-token chunks on line boundaries (``memoryd.shared.index.chunking.chunk_file``). The
chunk texts travel in the event, so the later stages and a replay never need the file again.
A live edit's chunks also go straight to the indexer (``text``, not logged), so the file is
keyword-searchable within moments while the embedders are slow, hung or elsewhere. The
chunker logs nothing: what it decides reaches the log through the agent's owner (``record``).
"""

from __future__ import annotations

import logging

from memoryd.shared.events import FileChanged, FileChunked, FileDeleted, FileSkipped, parse_event
from memoryd.shared.index.chunking import chunk_file
from memoryd.shared.runtime import runs
from memoryd.shared.runtime.bus import in_bulk_lane
from memoryd.shared.runtime.worker import context

log = logging.getLogger("memoryd.chunker")


def chunk_job(events: list[str]) -> int:
    """RQ job: chunk a batch of changed files. Idempotent: it only reads and emits."""
    ctx = context()
    chunked: list[FileChunked] = []
    direct: list[FileSkipped | FileDeleted] = []
    for raw in events:
        event = parse_event(raw)
        if not isinstance(event, FileChanged):
            raise TypeError(f"chunk_job got a {event.type} event; only file.changed belongs on this queue")
        ctx.ensure_agent(event.agent)
        result = chunk_file(event, ctx.settings)
        (chunked if isinstance(result, FileChunked) else direct).append(result)
    if chunked and not in_bulk_lane():  # a live edit: its texts go to the index now, the vectors follow
        ctx.bus.send("text", chunked)
    ctx.bus.send("embed", chunked)
    ctx.bus.send("record", direct)
    per_run: dict[str | None, int] = {}
    for c in chunked:
        per_run[c.run] = per_run.get(c.run, 0) + len(c.chunks)
    for run, found in per_run.items():
        runs.count(ctx.bus, run, chunks_found=found)  # `memoryd index` shows how many chunks are to embed
    log.info("chunked %d files into %d chunks; %d skipped or gone (agents %s)", len(chunked),
             sum(per_run.values()), len(direct), ", ".join(sorted({e.agent for e in [*chunked, *direct]})))
    return len(chunked)
