"""The whole pipeline — read, chunk, embed, apply — in one process without Redis.

Tests and benchmarks that need an index without workers call :func:`index_now`. It runs the
stages' own functions (``chunk_file``, the embedder's ``embed_files``, ``apply``) and logs
what it applies as the stages do, so its index equals the workers' for the same files.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from memoryd.services.pipeline.embedder import embed_files
from memoryd.shared import defaults as d
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.workspace import Workspace
from memoryd.shared.events import FileChanged, FileChunked, FileDeleted
from memoryd.shared.index import languages
from memoryd.shared.index.apply import apply, open_writer, outdated
from memoryd.shared.index.chunking import chunk_file
from memoryd.shared.index.store import IndexWriter
from memoryd.shared.log.eventlog import EventLog
from memoryd.shared.rebuild.sidebyside import rebuild
from memoryd.shared.runtime.survey import skipped_event
from memoryd.shared.runtime.worker import WorkerContext


def index_into(settings: Settings, agent_id: str, writer: IndexWriter) -> dict[str, int]:
    """Make ``writer``'s index hold exactly the agent's memory files on disk now (and log it)."""
    ctx = WorkerContext(settings=settings)
    record = EventLog(settings)
    ws = Workspace(settings.agent(agent_id))
    seq = int(time.time() * 1_000_000)
    stats = {"files": 0, "chunks": 0, "chunks_embedded": 0, "chunks_cached": 0, "files_skipped": 0,
             "files_deleted": 0}
    survey = ws.survey()
    on_disk = survey.files
    batch: list[FileChunked] = []

    def flush() -> None:
        done = embed_files(ctx, batch)
        record.append(done)
        for embedded in done:
            result = apply(writer, embedded)
            stats["chunks"] += result.chunks if result else 0
            stats["chunks_embedded"] += embedded.embedded
            stats["chunks_cached"] += embedded.cached
        batch.clear()

    changes = [FileChanged(agent=agent_id, path=found.path, seq=seq, root=str(found.root), rel=found.rel,
                           source=found.source, sha256="", size=0, mtime=0.0, origin="inline") for found in on_disk]
    record.append(changes)
    for event in changes:
        result = chunk_file(event, settings)
        stats["files"] += 1
        if isinstance(result, FileChunked):
            batch.append(result)
            if len(batch) >= d.FOLD_BATCH_FILES:
                flush()
        else:
            stats["files_skipped" if result.type == "file.skipped" else "files_deleted"] += 1
            record.append([result])
            apply(writer, result)
    flush()
    skipped = [skipped_event(agent_id, s, seq) for s in survey.skipped]
    record.append(skipped)
    for event in skipped:
        apply(writer, event)
        stats["files_skipped"] += 1
    present = {f.path for f in on_disk} | {s.path for s in survey.skipped}
    gone = [FileDeleted(agent=agent_id, path=path, seq=seq, origin="inline")
            for path in sorted(set(writer.live_hashes()) - present)]
    record.append(gone)
    for event in gone:
        apply(writer, event)
        stats["files_deleted"] += 1
    record.close()
    return stats


def index_now(settings: Settings, agent_id: str) -> dict[str, int]:
    """Bring the agent's index at ``settings.index_path(agent_id)`` up to date, in this process
    (rebuilt from its log first if it was built with other settings)."""
    settings = languages.at_open(settings, agent_id)
    writer = open_writer(settings, agent_id)
    if outdated(writer, settings, agent_id):
        writer.close()
        rebuild(settings, agent_id)
        writer = open_writer(settings, agent_id)
    try:
        return index_into(settings, agent_id, writer)
    finally:
        writer.close()


def one_agent(tmp_path: Path, workspace: Path, provider: str) -> Settings:
    """Settings of one agent ``main`` over ``workspace`` with ``provider``, its index brought up to date."""
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": provider}},
                                             "list": [{"id": "main", "workspace": str(workspace)}]}}))
    settings = load_settings(config, state_dir=tmp_path / "state")
    index_now(settings, "main")
    return settings
