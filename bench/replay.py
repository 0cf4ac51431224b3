"""Replay benchmark: prints one JSON object.

- ``replay``: a log of ~100k chunks (a workspace indexed in-process with the ``hash``
  embedder, which logs like the stages do) folded into a fresh index: seconds (goal ≤ 60)
  and embedding-provider calls (goal 0, counted at ``providers.embed_with_fallback``);
- ``log_bytes``: the log's segment bytes per chunk, and the content and vector stores';
- ``per_save``: what one save of a 2,000-line daily file (one line appended) adds — the
  four events a save makes (file.changed, file.chunked, chunks.embedded, index.applied,
  made by the stages' own functions) to the log, its new texts and chunk list to the
  content store, its new vectors to the vector store — averaged over ``--saves`` saves;
- ``pipeline_noop``: ``bench/pipeline.py --only noop`` (provider ``none``, the log on):
  the pipeline's own throughput in chunks/s (goal ≥ 1,000).

Usage: ``python bench/replay.py [--chunks 100000] [--saves 20] [--skip-pipeline]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # tests/inline_index.py: the pipeline in one process

from inline_index import index_now  # noqa: E402

from memoryd.services.pipeline.embedder import embed_files  # noqa: E402
from memoryd.shared.config.loader import load_settings  # noqa: E402
from memoryd.shared.config.settings import Settings  # noqa: E402
from memoryd.shared.embed import providers  # noqa: E402
from memoryd.shared.events import FileChanged, FileChunked  # noqa: E402
from memoryd.shared.index.apply import apply, open_writer  # noqa: E402
from memoryd.shared.index.chunking import chunk_file  # noqa: E402
from memoryd.shared.log.eventlog import EventLog, content_path, log_dir, segment_path, segments  # noqa: E402
from memoryd.shared.rebuild.replay import replay  # noqa: E402
from memoryd.shared.runtime.worker import WorkerContext  # noqa: E402

AGENT = "bench"
LINES_PER_FILE = 400


def _say(message: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def _settings(tmp: Path, name: str, provider: str = "hash") -> Settings:
    workspace = tmp / name / "workspace"
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    config = tmp / name / "memoryd.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": provider}},
                   "list": [{"id": AGENT, "workspace": str(workspace)}]},
        "memoryd": {"stateDir": str(tmp / name / "state")},
    }))
    return load_settings(config, state_dir=tmp / name / "state")


def _line(i: int, j: int) -> str:
    return (f"- {i:05d}.{j:03d} decided with person-{(i * j) % 97} to move service {j % 41} of team {i % 53} "
            f"to cluster {chr(97 + j % 26)}{i % 7}, ticket OPS-{i * 1000 + j}; review on day {j % 28 + 1}\n")


def _sizes(settings: Settings) -> dict[str, int]:
    directory = log_dir(settings, AGENT)
    cache = settings.state_dir / "cache"
    return {"log": sum(segment_path(directory, n).stat().st_size for n in segments(directory)),
            "content": content_path(settings, AGENT).stat().st_size,
            "vectors": sum(p.stat().st_size for p in cache.glob("*.sqlite"))}


def replay_bench(tmp: Path, target_chunks: int) -> dict[str, Any]:
    settings = _settings(tmp, "replay")
    memory = settings.agent(AGENT).workspace / "memory"
    files = max(1, target_chunks // 105)  # ~105 chunks of 400 tokens per 400-line file
    for i in range(files):
        (memory / f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}-{i:05d}.md").write_text(
            "".join(_line(i, j) for j in range(LINES_PER_FILE)))
    _say(f"indexing {files} files in-process (logged like the stages do) …")
    started = time.monotonic()
    built = index_now(settings, AGENT)
    _say(f"indexed {built['chunks']} chunks in {time.monotonic() - started:.0f} s; replaying …")
    calls = {"calls": 0, "texts": 0}
    real = providers.embed_with_fallback

    def counted(chain: Any, texts: Any) -> Any:
        calls["calls"] += 1
        calls["texts"] += len(texts)
        return real(chain, texts)

    providers.embed_with_fallback = counted  # type: ignore[assignment]
    try:
        started = time.monotonic()
        result = replay(settings, AGENT, into=tmp / "replayed.sqlite")
        seconds = time.monotonic() - started
    finally:
        providers.embed_with_fallback = real  # type: ignore[assignment]
    sizes = _sizes(settings)
    chunks = result["chunks"]
    return {
        "files": result["files"], "chunks": chunks, "seconds": round(seconds, 2),
        "chunks_per_s": round(chunks / seconds), "provider_calls": calls["calls"],
        "texts_embedded": calls["texts"], "chunks_embedded": result["chunks_embedded"],
        "log_bytes": {"log_per_chunk": round(sizes["log"] / chunks, 1),
                      "content_per_chunk": round(sizes["content"] / chunks, 1),
                      "vectors_per_chunk": round(sizes["vectors"] / chunks, 1), "log_total": sizes["log"]},
    }


def per_save_bench(tmp: Path, saves: int) -> dict[str, Any]:
    settings = _settings(tmp, "saves")
    daily = settings.agent(AGENT).workspace / "memory" / "2026-03-03.md"
    daily.write_text("".join(_line(7, j) for j in range(2000)))
    log = EventLog(settings)
    ctx = WorkerContext(settings=settings)
    writer = open_writer(settings, AGENT)

    def save(seq: int) -> None:
        """The four events of one save, made by the stages' functions, logged as the stages do."""
        changed = FileChanged(agent=AGENT, path="memory/2026-03-03.md", seq=seq, root=str(daily.parent.parent),
                              rel="memory/2026-03-03.md", sha256="", size=0, mtime=0.0, origin="watch")
        chunked = chunk_file(changed, settings)
        assert isinstance(chunked, FileChunked)
        embedded = embed_files(ctx, [chunked])
        log.append([changed])
        log.append([chunked])
        log.append(embedded)
        applied = apply(writer, embedded[0])
        assert applied is not None
        log.append([applied])

    def settle() -> dict[str, int]:
        """Close every connection to the stores: their WAL is checkpointed into their files."""
        log.close()
        for value in ctx.cache.values():
            getattr(value, "close", lambda: None)()
        ctx.cache.clear()
        return _sizes(settings)

    save(1)
    before = settle()
    file_bytes = daily.stat().st_size
    for n in range(saves):
        with open(daily, "a") as handle:
            handle.write(f"- save {n}: one more decision noted today\n")
        save(2 + n)
    writer.close()
    after = settle()
    grown = {k: round((after[k] - before[k]) / saves) for k in after}
    return {"file_bytes": file_bytes, "saves": saves, "log_per_save": grown["log"],
            "content_per_save": grown["content"], "vectors_per_save": grown["vectors"],
            "total_per_save": sum(grown.values())}


def pipeline_noop() -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "pipeline.py"), "--only", "noop"], cwd=ROOT,
                         capture_output=True, text=True, check=True, env=dict(os.environ))
    return json.loads(out.stdout)["bulk_noop"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks in the replayed log")
    parser.add_argument("--saves", type=int, default=20, help="saves of the 2,000-line daily file")
    parser.add_argument("--skip-pipeline", action="store_true", help="leave out bench/pipeline.py's no-op run")
    args = parser.parse_args()
    result: dict[str, Any] = {"cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        result["replay"] = replay_bench(tmp, args.chunks)
        _say(f"replay: {json.dumps(result['replay'])}")
        result["per_save"] = per_save_bench(tmp, args.saves)
        _say(f"per_save: {json.dumps(result['per_save'])}")
    if not args.skip_pipeline:
        _say("bench/pipeline.py --only noop …")
        result["pipeline_noop"] = pipeline_noop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
