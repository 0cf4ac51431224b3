"""The durable event log: records on disk in order, content by hash, many writers, torn
tails, delta manifests, checkpoints, retention — real files, real SQLite, real processes."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest
import redis

from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from memoryd.shared.events import ChunksEmbedded, FileChanged, FileDeleted, VectorData
from memoryd.shared.exceptions import BadRequest
from memoryd.shared.index.chunking import Chunker
from memoryd.shared.index.content import ChunkRef, ContentStore
from memoryd.shared.log.checkpoints import compact, entries, fold, oldest_point, stats
from memoryd.shared.log.eventlog import EventLog, content_path, hydrate, log_dir, read, segments
from memoryd.shared.log.fold import Until
from memoryd.shared.runtime.bus import Bus


def _changed(agent: str, path: str, seq: int) -> FileChanged:
    return FileChanged(agent=agent, path=path, seq=seq, root="/w", rel=path, sha256="s", size=1, mtime=0.0)


def _embedded(path: str, seq: int, text: str, embedder: str = "test:model:4") -> ChunksEmbedded:
    chunks = Chunker(tokens=400, overlap=80).chunk(text)
    vectors = [VectorData.pack(c.hash, np.full(4, (i + 1) / 10, np.float32)) for i, c in enumerate(chunks)]
    return ChunksEmbedded(agent="main", path=path, seq=seq, source="memory", sha256=f"sha-{seq}", size=len(text),
                          mtime=0.0, chunker="c", chunks=chunks, embedder=embedder, provider="test", model="m",
                          vectors=vectors, cached=0, embedded=len(vectors))


def _daily(lines: int) -> str:
    return "".join(f"- {i:04d} met person-{i % 37} about the rollout of service {i % 53}; next step agreed\n"
                   for i in range(lines))


def _log_bytes(settings: Settings, agent: str = "main") -> int:
    directory = log_dir(settings, agent)
    return sum((directory / f"{n:08d}.log").stat().st_size for n in segments(directory))


def test_bus_writes_every_emitted_event_to_disk_in_order_and_nothing_to_a_redis_stream(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    events = [_changed("main", f"memory/{i}.md", bus.next_seq("main")) for i in range(5)]
    bus.emit("chunk", events[:3])
    bus.emit("chunk", events[3:])
    records = list(read(log_dir(settings, "main")))
    assert [r.event["event_id"] for r in records] == [e.event_id for e in events]
    assert [r.seq for r in records] == sorted(r.seq for r in records)
    assert all(r.at >= e.emitted_at for r, e in zip(records, events, strict=True))
    assert not [k for k in bus.conn.keys("memoryd:*") if b":log:" in k]  # the stream of whole events is gone


def test_a_save_logs_hashes_and_only_new_content(workspace: Path, make_settings) -> None:
    """Saving one more line of a 2,000-line daily file costs a few KB, not the file's texts and vectors."""
    settings, _ = make_settings(workspace)
    log = EventLog(settings)
    text = _daily(2000)
    first = _embedded("memory/2026-03-03.md", 1, text)
    log.append([first])
    log.close()  # the last connection checkpoints the content store's WAL into its file
    before = _log_bytes(settings) + content_path(settings, "main").stat().st_size
    log = EventLog(settings)
    for save in range(1, 21):
        text += f"- {save}: one more decision noted today\n"
        log.append([_embedded("memory/2026-03-03.md", 1 + save, text)])
    log.close()
    per_save = (_log_bytes(settings) + content_path(settings, "main").stat().st_size - before) / 20
    assert len(text.encode()) > 140_000 and per_save < 8_000, per_save
    record = list(read(log_dir(settings, "main")))[0]
    assert isinstance(record.event["chunks"], str) and "vectors" not in record.event  # refs, not content
    stores = EventLog(settings)
    again = hydrate(record.event, stores.content("main"), stores.vectors)
    stores.close()
    assert again == first  # texts and vectors read back by hash


def _append_many(state_dir: str, worker: int, batches: int) -> None:
    settings = load_settings(state_dir=state_dir)
    settings.memoryd.log.segment_bytes = 4096
    log = EventLog(settings)
    for n in range(batches):
        log.append([_changed("main", f"memory/w{worker}.md", n * 10 + k) for k in range(3)])
    log.close()


def test_appends_from_many_processes_keep_every_record_whole_across_rotations(tmp_path: Path) -> None:
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=_append_many, args=(str(tmp_path / "state"), w, 60)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    directory = tmp_path / "state" / "log" / "main"
    assert len(segments(directory)) > 5  # rotated while four processes appended
    records = list(read(directory))
    assert len(records) == 4 * 60 * 3
    for w in range(4):  # each writer's records in its own order
        mine = [r.seq for r in records if r.path == f"memory/w{w}.md"]
        assert mine == sorted(mine) and len(mine) == 180


def test_a_torn_last_record_is_skipped_and_the_next_append_starts_a_new_line(workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace)
    log = EventLog(settings)
    log.append([_changed("main", "memory/a.md", 1)])
    log.close()
    segment = log_dir(settings, "main") / "00000001.log"
    with open(segment, "ab") as handle:
        handle.write(b'{"at": 1.0, "event": {"type": "file.chan')  # a crash in the middle of a write
    assert [r.seq for r in read(log_dir(settings, "main"))] == [1]
    log = EventLog(settings)
    log.append([_changed("main", "memory/b.md", 2)])
    log.close()
    assert [r.seq for r in read(log_dir(settings, "main"))] == [1, 2]


def test_delta_manifests_resolve_to_every_version(tmp_path: Path) -> None:
    store = ContentStore(tmp_path / "content.sqlite")
    chunker = Chunker(tokens=60, overlap=10)
    lines = _daily(300).splitlines()
    versions = [lines, lines + ["- appended"], lines[:100] + ["- inserted"] + lines[100:] + ["- appended"],
                lines[20:], lines[:50], lines]
    refs = []
    for version in versions * 4:  # more versions than CONTENT_MAX_DELTA_DEPTH: a full list is stored again
        chunks = chunker.chunk("\n".join(version))
        (ref,) = store.put_files([("memory/d.md", [ChunkRef(c.hash, c.start_line, c.end_line, c.tokens)
                                                   for c in chunks], {c.hash: c.text for c in chunks})])
        refs.append((ref, chunks))
    sizes = dict(store.conn.execute("SELECT ref, length(body) FROM manifests"))
    fresh = ContentStore(tmp_path / "content.sqlite")  # nothing cached: every delta chain is walked
    for ref, chunks in refs:
        assert [(c.hash, c.start_line, c.end_line) for c in fresh.manifest(ref)] == \
               [(c.hash, c.start_line, c.end_line) for c in chunks]
    appended = refs[1][0]
    assert sizes[appended] < sizes[refs[0][0]] / 10  # one line more: a small delta of the first list
    assert max(fresh.conn.execute("SELECT depth FROM manifests").fetchone()) < 16


def test_checkpoints_retention_and_content_collection_keep_replays_bounded_and_right(
        workspace: Path, make_settings) -> None:
    settings, _ = make_settings(workspace, extra={"memoryd": {"log": {"segmentBytes": 4096, "retentionDays": 30}}})
    log = EventLog(settings)
    for day in range(40):  # a file rewritten every day, another deleted on day 20
        log.append([_embedded("memory/daily.md", 100 + day, _daily(5 + day % 7) + f"- day {day}\n")])
        if day == 10:
            log.append([_embedded("memory/old.md", 200, "- an old fact\n")])
        if day == 20:
            log.append([FileDeleted(agent="main", path="memory/old.md", seq=300)])
    log.close()
    directory = log_dir(settings, "main")
    whole = fold(settings, "main")
    sealed = len(segments(directory)) - 1
    assert sealed >= 3 and entries(directory) == []
    assert compact(settings, "main")["checkpoints_written"] == sealed
    assert fold(settings, "main").files.keys() == whole.files.keys()
    assert fold(settings, "main").files["memory/daily.md"].seq == 139
    first_at = next(read(directory)).at
    # Forty days later, retention drops every sealed segment: the last checkpoint is where replays start.
    done = compact(settings, "main", now=first_at + 70 * 86400)
    assert done["segments_dropped"] == sealed and len(entries(directory)) == 1
    assert segments(directory)[0] != 1 and oldest_point(directory)["from"].startswith("checkpoint")
    assert done["texts_removed"] > 0  # versions nobody can replay any more
    after = fold(settings, "main")
    assert {p: s.seq for p, s in after.files.items()} == {p: s.seq for p, s in whole.files.items()}
    with pytest.raises(BadRequest, match="reaches back"):
        fold(settings, "main", Until(at=first_at))
    stores = EventLog(settings)
    from memoryd.shared.rebuild.materialize import _chunks

    assert _chunks(stores.content("main"), after.files["memory/daily.md"].chunks)  # the live version's texts kept
    stores.close()


def test_log_stats_shows_bytes_events_and_the_oldest_replayable_moment(workspace: Path, make_settings) -> None:
    settings, config = make_settings(workspace)
    log = EventLog(settings)
    log.append([_changed("main", "memory/a.md", 7), _embedded("memory/a.md", 7, "- a fact\n")])
    log.close()
    found = stats(settings, "main")
    assert found["events"] == 2 and found["events_by_type"] == {"chunks.embedded": 1, "file.changed": 1}
    assert found["bytes"] == _log_bytes(settings) and found["content_bytes"] > 0
    assert found["oldest_replayable"]["seq"] == 7 and found["oldest_replayable"]["from"] == "start of the log"
    out = os.popen(f"MEMORYD_CONFIG={config} {os.sys.executable} -m memoryd.services.cli log stats --agent main "
                   "--json").read()
    assert json.loads(out)["events"] == 2


def test_an_event_of_a_newer_schema_is_refused_with_the_fix() -> None:
    """A log written by a later memoryd is not misread: its events' version is checked."""
    from memoryd.shared.events import SCHEMA_VERSION, parse_event

    event = FileDeleted(agent="main", path="memory/a.md", seq=1)
    assert parse_event(event.model_dump_json()) == event
    newer = json.loads(event.model_dump_json()) | {"version": SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match="upgrade memoryd to read it"):
        parse_event(json.dumps(newer))
