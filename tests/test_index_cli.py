"""``memoryd index`` as a person and a program meet it: a live bar on a terminal, plain lines
in a pipe, one JSON object with --json, a clear exit when a job fails for good, and clear
words for a folder without memory files or a workspace that does not exist."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memoryd.services.cli.index import IndexFailed, LocalStages, follow, queue_run, stall_seconds
from memoryd.services.cli.progress import Counts, IndexProgress
from memoryd.shared.runtime import runs
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.runs import active as active_runs
from memoryd.shared.runtime.worker import set_context
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

CLI = [sys.executable, "-m", "memoryd.services.cli"]


def _notes(workspace: Path, count: int, lines: int = 1) -> None:
    for i in range(count):
        body = "".join(f"- moved service {i}-{j} to the new cluster; owner person-{i}-{j}\n" for j in range(lines))
        (workspace / "memory" / f"2026-03-{i:02d}.md").write_text(f"# day {i}\n\n{body}")


def _env(config: Path) -> dict[str, str]:
    return dict(os.environ, MEMORYD_CONFIG=str(config), COLUMNS="120")


def _run_in_pty(argv: list[str], env: dict[str, str], timeout: float = 240) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as stdin/stdout/stderr; → (exit code, everything it drew)."""
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env, close_fds=True)
    os.close(child)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    data = os.read(main, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        else:
            raise AssertionError(f"{argv} did not finish within {timeout}s")
        return proc.wait(timeout=10), out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)


def test_on_a_terminal_the_bar_counts_files_and_chunks_as_they_happen(
        workspace: Path, make_settings, redis_url: str) -> None:
    _notes(workspace, 40, lines=25)  # ~1 s of embedding: the bar (8 frames a second) draws counts on the way
    _, config = make_settings(workspace, redis=redis_url, provider="local")
    code, drawn = _run_in_pty([*CLI, "index", "--agent", "main"], _env(config))
    assert code == 0, drawn
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)
    files = [int(n) for n in re.findall(r"files done\D+?(\d+)/40", plain)]
    chunks = re.findall(r"chunks embedded\D+?(\d+)/(\d+)", plain)
    assert any(0 < n < 40 for n in files), plain[-2000:]  # a count between start and end was drawn
    assert files[-1] == 40 and chunks and chunks[-1][0] == chunks[-1][1] != "0"
    assert "chunks/s" in plain  # the rate
    assert "indexed 40 files of agent main" in plain


def test_piped_it_prints_plain_progress_lines_and_with_json_only_the_object(
        workspace: Path, make_settings, redis_url: str) -> None:
    _notes(workspace, 3)
    _, config = make_settings(workspace, redis=redis_url)
    piped = subprocess.run([*CLI, "index", "--agent", "main"], env=_env(config), capture_output=True, text=True,
                           timeout=120, check=True)
    assert "\x1b[" not in piped.stderr
    assert re.search(r"^memoryd index: 3/3 files done, (\d+)/\1 chunks embedded \(\d", piped.stderr, re.M)
    summary = re.match(r"indexed 3 files of agent main \((\d+) chunks, \1 embedded, 0 from the cache", piped.stdout)
    assert summary, piped.stdout
    quiet = subprocess.run([*CLI, "index", "--agent", "main", "--json"], env=_env(config), capture_output=True,
                           text=True, timeout=120, check=True)
    assert quiet.stderr == ""
    assert json.loads(quiet.stdout)["chunksCached"] == int(summary.group(1))


def test_a_job_that_fails_for_good_ends_the_run_naming_it(workspace: Path, make_settings, redis_url: str) -> None:
    settings, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"jobRetries": 0}})
    _notes(workspace, 2)
    wal = settings.index_path("main").with_name("main.sqlite-wal")
    wal.mkdir(parents=True)  # no index yet, and the indexer cannot create its write-ahead log
    started = time.monotonic()
    out = subprocess.run([*CLI, "index", "--agent", "main"], env=_env(config), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert re.search(r"job \S+ \(index stage, agent main\) of run \w+ failed for good: ", out.stderr), out.stderr
    assert "memoryd retry" in out.stderr and "Traceback" not in out.stderr
    assert time.monotonic() - started < 60  # at once, not after the stall deadline


@pytest.fixture
def workers(workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> Iterator[tuple[Pipeline, Path]]:
    """(pipeline, config) with real chunk, embed and index workers registered on the queues."""
    settings, config = make_settings(workspace, redis=redis_url)
    p = Pipeline(config, redis_url, settings, tmp_path)
    p.start("chunk", "embed", "index")
    try:
        wait_until(lambda: "running workers" in p.cli("index", "--agent", "main", "--json").stdout, timeout=60,
                   what="the workers to register")
        yield p, config
    finally:
        p.stop()


def test_with_running_workers_it_queues_and_returns_unless_told_to_wait(workspace: Path, workers) -> None:
    p, _ = workers
    _notes(workspace, 2)
    queued = json.loads(p.cli("index", "--agent", "main", "--json").stdout)
    assert queued["workedBy"] == "running workers" and queued["queuedFiles"] == 2
    assert "chunks" not in queued
    waited = json.loads(p.cli("index", "--agent", "main", "--wait", "--json").stdout)
    assert waited["workedBy"] == "running workers" and waited["index"]["files"] == 2


def test_a_run_that_stops_moving_ends_at_the_stall_deadline_and_loses_nothing(workspace: Path, workers) -> None:
    """The embed worker is frozen (SIGSTOP): `index --wait` exits 1 once nothing moved for
    --stall-seconds, saying what it waited for; thawed, the worker finishes the run."""
    p, config = workers
    try:
        _notes(workspace, 3)
        p.procs["embed"].send_signal(signal.SIGSTOP)
        started = time.monotonic()
        out = subprocess.run([*CLI, "index", "--agent", "main", "--wait", "--stall-seconds", "3"], env=_env(config),
                             capture_output=True, text=True, timeout=120)
        waited = time.monotonic() - started
        assert out.returncode == 1, out.stderr
        assert re.search(r"nothing moved for 3s with 0/3 files done; waited for the running workers", out.stderr)
        assert 3 <= waited < 30, waited
        p.procs["embed"].send_signal(signal.SIGCONT)
        wait_until(lambda: len(p.query("main", "SELECT path FROM files WHERE status = 'indexed'")) == 3, timeout=60,
                   what="the thawed embed worker to finish the run")
    finally:
        p.procs["embed"].send_signal(signal.SIGCONT)  # a frozen worker would not stop


def test_a_folder_without_memory_files_says_which_files_count(tmp_path: Path, make_settings, redis_url: str) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ideas.md").write_text("an idea\n")
    _, config = make_settings(notes, redis=redis_url)
    out = subprocess.run([*CLI, "index", "--agent", "main", "--json"], env=_env(config), capture_output=True,
                         text=True, timeout=120, check=True)
    assert json.loads(out.stdout)["files"] == 0
    assert "MEMORY.md" in out.stderr and "memory/**/*.md" in out.stderr and "extraPaths" in out.stderr


@pytest.mark.parametrize("how", ["--workspace", "configured"])
def test_a_missing_workspace_is_created_only_when_asked(how: str, tmp_path: Path, make_settings,
                                                        redis_url: str) -> None:
    typo = tmp_path / "clawd-typo"
    _, config = make_settings(typo if how == "configured" else tmp_path, redis=redis_url)
    argv = [*CLI, "index", "--agent", "main", *(["--workspace", str(typo)] if how == "--workspace" else [])]
    refused = subprocess.run(argv, env=_env(config), capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "does not exist" in refused.stderr and "--create" in refused.stderr
    assert not typo.exists()
    made = subprocess.run([*argv, "--create"], env=_env(config), capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert f"created a new workspace for agent main at {typo}" in made.stderr
    assert (typo / "MEMORY.md").exists() and (typo / ".git").exists()


def test_a_workspace_that_cannot_be_created_is_a_clear_error(tmp_path: Path, make_settings, redis_url: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    _, config = make_settings(blocker / "clawd", redis=redis_url)
    out = subprocess.run([*CLI, "index", "--agent", "main", "--create"], env=_env(config), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"cannot create the workspace {blocker / 'clawd'} of agent main" in out.stderr


class _Recorder(IndexProgress):
    def __init__(self, total: int) -> None:
        super().__init__("off", total)
        self.seen: list[Counts] = []

    def update(self, counts: Counts) -> None:
        self.seen.append(Counts(**vars(counts)))


def test_a_job_waiting_for_its_retry_shows_as_retrying_then_fails_the_run(
        workspace: Path, make_settings, redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url, extra={"memoryd": {"jobRetries": 1}})
    _notes(workspace, 1)
    settings.index_path("main").with_name("main.sqlite-wal").mkdir(parents=True)  # the index job fails
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    set_context(settings, bus.conn)
    _, total = queue_run(bus, settings, settings.agent("main"), "run-r")
    progress = _Recorder(total)
    local = LocalStages(bus, "main").start()
    try:
        with pytest.raises(IndexFailed, match=r"of run run-r failed for good"):
            follow(bus, "run-r", total, progress, embedding=True, local=local, stall=stall_seconds(settings))
    finally:
        local.close()
    assert any(c.retrying == 1 for c in progress.seen)  # the retry was waited for, shown, and run


def test_skipped_files_are_counted_apart_from_the_indexed_ones(workspace: Path, make_settings, redis_url: str) -> None:
    _notes(workspace, 2)
    for i in range(3):  # not UTF-8: the chunker skips them
        (workspace / "memory" / f"2026-04-0{i}.md").write_bytes(b"\xff\xfe\x00\x9c not text " * 50)
    _, config = make_settings(workspace, redis=redis_url)
    piped = subprocess.run([*CLI, "index", "--agent", "main"], env=_env(config), capture_output=True, text=True,
                           timeout=120, check=True)
    assert re.search(r"^memoryd index: 5/5 files done \(2 indexed, 3 skipped\), ", piped.stderr, re.M), piped.stderr
    assert piped.stdout.startswith("indexed 2 files of agent main (") and "; 3 skipped, 0 deleted)" in piped.stdout
    result = json.loads(subprocess.run([*CLI, "index", "--agent", "main", "--json"], env=_env(config),
                                       capture_output=True, text=True, timeout=120, check=True).stdout)
    status = json.loads(subprocess.run([*CLI, "status", "--json"], env=_env(config), capture_output=True, text=True,
                                       timeout=60, check=True).stdout)
    assert (result["files"], result["filesSkipped"]) == (2, 3)
    assert status["agents"]["main"]["index"]["files"] == result["files"] == result["index"]["files"]


def test_piped_lines_say_how_many_jobs_are_retrying() -> None:
    out = io.StringIO()
    progress = IndexProgress("lines", 3, stream=out)
    progress.update(Counts(files=3, files_done=1, chunks=4, chunks_done=2, retrying=1))
    progress.close()
    assert "memoryd index: 1/3 files done, 2/4 chunks embedded (" in out.getvalue()
    assert out.getvalue().rstrip().endswith("chunks/s), 1 job retrying")


def test_status_shows_the_counts_of_a_run_in_progress(workspace: Path, make_settings, redis_url: str) -> None:
    settings, config = make_settings(workspace, redis=redis_url)
    _notes(workspace, 2)
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    queue_run(bus, settings, settings.agent("main"), "run-s")  # queued; no worker takes it
    [run] = active_runs(bus)
    assert (run["run"], run["agent"], run["files"], run["files_done"]) == ("run-s", "main", 2, 0)
    shown = subprocess.run([*CLI, "status"], env=_env(config), capture_output=True, text=True, timeout=60,
                           check=True).stdout
    assert "memoryd index run run-s (agent main): 0/2 files done, 0/0 chunks embedded" in shown
    runs.count(bus, "run-s", files_done=2)
    assert active_runs(bus) == []  # done runs are dropped


def test_a_watcher_leaves_a_new_agents_files_to_the_index_run_that_queues_them(
        workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> None:
    """`memoryd index --workspace` of a new agent while a watcher runs: the watcher picks the agent up
    within a second and would reconcile it at once, queuing every file the run is queuing too (the
    duplicates stayed in the bulk queues after the import had finished). Each file is queued once."""
    from tests.pipeline_harness import Pipeline

    settings, config = make_settings(workspace, redis=redis_url)
    p = Pipeline(config, redis_url, settings, tmp_path)
    fresh = tmp_path / "ws-fresh"
    (fresh / "memory").mkdir(parents=True)
    for i in range(300):
        (fresh / "memory" / f"n-{i:03d}.md").write_text(f"- note {i} about the plan for week {i % 52}\n")
    try:
        p.start("watcher")
        wait_until(lambda: p.conn.hget(p.bus.key("reconciled"), "main"), timeout=60, what=f"watcher up\n{p.logs()}")
        done = p.cli("index", "--agent", "fresh", "--workspace", str(fresh), "--json")
        assert json.loads(done.stdout)["files"] == 300
        wait_until(lambda: p.conn.hget(p.bus.key("reconciled"), "fresh"), timeout=60,
                   what=f"the watcher's reconcile of the new agent after the run\n{p.logs()}")
        queued = Counter(e.path for e in p.events("fresh", "file.changed"))
        assert len(queued) == 300
        assert {path: n for path, n in queued.items() if n > 1} == {}
    finally:
        p.stop()
