"""``memoryd index``: push every memory file of a workspace through the pipeline and follow it.

The files go on the stages' bulk lanes as one *run* (its id is on every event, and the
stages count the run's progress in Redis). Who works them:

- **running workers** (``memoryd up``, the Procfile, compose) of every stage: without
  ``--wait`` the command queues the run and returns; with it, it follows the run;
- otherwise **this process**: one thread per stage, each an RQ worker of that stage's
  lanes, so chunking, embedding and writing overlap and the embedder (the slow stage
  with the local model) never waits for a whole stage to drain. One model instance.

Following never waits forever: a job of the run that failed for good (its retries
spent) ends the command at once, naming the job and its error; jobs waiting for a retry
show as "retrying"; and a run that makes no progress for a job timeout plus the retry
backoff ends it, naming what it waited for.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from rq import SimpleWorker
from rq.timeouts import TimerDeathPenalty

import memoryd.services.pipeline  # noqa: F401  (the stages register their jobs with the bus)
import memoryd.services.session  # noqa: F401  (so do the session jobs)
from memoryd.services.cli.progress import Counts, IndexProgress, mode_for
from memoryd.services.cli.status import index_counts, print_result
from memoryd.services.cli.text import plural
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import AgentConfig, Settings
from memoryd.shared.embed import providers
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.index import languages
from memoryd.shared.redact import redact
from memoryd.shared.runtime import bus as busmod
from memoryd.shared.runtime import redis_server, runs
from memoryd.shared.runtime import retries as jobs
from memoryd.shared.runtime.liveness import Heartbeat, alive, worker_name
from memoryd.shared.runtime.roster import register_agent
from memoryd.shared.runtime.survey import emit_changed, plan
from memoryd.shared.runtime.worker import Periodic, StageWorker, context, set_context

PIPELINE = ("chunk", "embed", "index")


class IndexFailed(MemorydError):
    code = "index_failed"


def live_stages(bus: busmod.Bus) -> set[str]:
    """The pipeline stages that have a running service worker (not a `memoryd index` thread, not dead)."""
    found = set()
    for stage in PIPELINE:
        for worker in SimpleWorker.all(queue=bus.queues[stage]):
            if worker.name.startswith(f"memoryd-{stage}-index."):
                continue  # a thread of a `memoryd index`: it stops when its own run is done
            if not alive(bus.conn, worker.name):
                continue  # a worker killed without a goodbye, whose heartbeat ran out
            found.add(stage)
    return found


class _ThreadWorker(StageWorker):
    """A stage's RQ worker on a thread of ``memoryd index``: signals stay with the main
    thread, a job's timeout is a timer instead of SIGALRM (main thread only), and registry
    maintenance is left to the service workers."""

    death_penalty_class = TimerDeathPenalty

    def _install_signal_handlers(self) -> None:
        return None

    @property
    def should_run_maintenance_tasks(self) -> bool:
        """No: an idle thread's worker is made anew every second, and RQ would clean every registry
        each time; the service workers (and RQ's TTLs) keep the registries."""
        return False


class LocalStages:
    """One thread per pipeline stage working its lanes, plus the retry scheduler's duty and the
    process's heartbeat (without it, the service workers' orphan sweep would take the threads' jobs)."""

    def __init__(self, bus: busmod.Bus, agent: str) -> None:
        self.bus = bus
        self.agent = agent
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._work, args=(stage,), name=f"memoryd-{stage}", daemon=True)
                        for stage in PIPELINE]
        queues = [q for stage in PIPELINE for q in bus.lanes(stage)]
        self.node = bus.settings.node
        self.retries = jobs.RetryScheduler(queues, worker_name("retries-index", self.node))  # the sweep knows it
        self.heartbeat = Heartbeat(bus.conn, self.node)
        self.beating = Periodic("heartbeat", d.ALIVE_BEAT_SECONDS, self.heartbeat.beat, errors=(redis.RedisError,))

    def start(self) -> LocalStages:
        self.heartbeat.beat()
        self.beating.start()
        for thread in self.threads:
            thread.start()
        return self

    def _work(self, stage: str) -> None:
        lanes = self.bus.lanes(stage)
        if stage == "embed":  # load the model while the chunker reads the first files
            from memoryd.services.pipeline.embedder import chain_for

            with contextlib.suppress(MemorydError):  # the first job meets the same error and reports it
                chain_for(context(), self.agent)
        while not self.stop.is_set():
            try:
                worker = _ThreadWorker(lanes, connection=self.bus.conn, name=worker_name(f"{stage}-index", self.node),
                                       exception_handlers=[jobs.note_error])
                # idle for a second: the loop ends, and a stop request is seen
                worker.work(burst=False, max_idle_time=1, logging_level="CRITICAL")  # failures: see follow()
            except redis.RedisError as exc:
                self.errors.append(f"the {stage} stage lost Redis: {redact(str(exc))}")
                return

    def promote_retries(self) -> None:
        self.retries.promote()

    def close(self) -> None:
        self.stop.set()
        deadline = time.monotonic() + d.INDEX_STOP_SECONDS
        for thread in self.threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.1))
        self.beating.stop.set()
        with contextlib.suppress(redis.RedisError):  # the lock and the key expire by themselves; Redis is gone anyway
            self.retries.release()
            self.heartbeat.clear()


def _checked_workspace(args: argparse.Namespace) -> Path | None:
    """``--workspace`` as a folder to register, refused before anything is changed (a mistyped path
    must not become a new workspace: a missing one is created only with ``--create``)."""
    if not args.workspace:
        return None
    workspace = Path(args.workspace).expanduser()
    if workspace.exists() and not workspace.is_dir():
        raise MemorydError(f"workspace {workspace} is a file, not a folder; fix --workspace")
    if not workspace.exists() and not args.create:
        raise MemorydError(f"workspace {workspace} does not exist: check the path, or add --create to make a "
                           "new workspace there (standard files, memory/, git init)")
    return workspace.absolute()


def _workspace(args: argparse.Namespace, settings: Settings, workspace: Path | None) -> tuple[Settings, AgentConfig]:
    """The agent to index: registered (or moved) at ``workspace`` when given."""
    from memoryd.shared.config.bootstrap import ensure_workspace

    if workspace is not None:
        settings = register_agent(settings, args.agent, workspace)
    agent = settings.agent(args.agent)
    if not agent.workspace.exists():
        if not args.create:
            raise MemorydError(f"agent {agent.id}'s workspace {agent.workspace} does not exist: fix the agent's "
                               "workspace, or add --create to make a new one there (standard files, git init)")
        ensure_workspace(agent)
        print(f"memoryd: created a new workspace for agent {agent.id} at {agent.workspace} "
              "(standard files, memory/, git init)", file=sys.stderr)
    return settings, agent


def no_memory_hint(agent: AgentConfig) -> str:
    extra = ", ".join(p.path for p in agent.extra_paths) or "none"
    return (f"no memory files in {agent.workspace}: memoryd indexes MEMORY.md, memory.md and memory/**/*.md there, "
            f"and *.md under each extraPath (now: {extra}). Move notes into memory/, or add their folder to "
            "agents.defaults.memorySearch.extraPaths (or agents.list[].extraPaths) in the config file")


def queue_run(bus: busmod.Bus, settings: Settings, agent: AgentConfig, run: str) -> tuple[int, int]:
    """Emit the run's events; → (files to chunk, files queued in all)."""
    found = plan(bus, settings, agent.id, origin="index", run=run, every=True)
    events = found.changed
    for start in range(0, len(events), d.FILES_PER_CHUNK_JOB):  # the bulk lane: edits go first
        emit_changed(bus, settings, events[start:start + d.FILES_PER_CHUNK_JOB], bulk=True)
    bus.emit("index", [*found.skipped, *found.gone], bulk=True)
    total = found.files
    runs.start(bus, run, agent.id, total)
    return len(events), total


def _counts(bus: busmod.Bus, run: str, total: int, embedding: bool) -> Counts:
    raw = runs.counts(bus, run)
    done = raw.get("chunks_embedded", 0) + raw.get("chunks_cached", 0) if embedding else raw.get("chunks", 0)
    return Counts(files=total, files_done=raw.get("files_done", 0), skipped=raw.get("files_skipped", 0),
                  deleted=raw.get("files_deleted", 0), chunks=raw.get("chunks_found", 0), chunks_done=done)


def stall_seconds(settings: Settings) -> float:
    """How long a run may make no progress before `memoryd index` gives up: a job that hangs
    until its timeout, then waits out every retry, has moved by then."""
    return settings.memoryd.job_timeout_seconds + sum(d.RETRY_INTERVALS) + d.INDEX_STALL_MARGIN_SECONDS


def follow(bus: busmod.Bus, run: str, total: int, progress: IndexProgress, *, embedding: bool,
           local: LocalStages | None, stall: float) -> Counts:
    """Until every file of ``run`` is applied; raises IndexFailed when a job of the run failed
    for good, a local stage died, or nothing moved for ``stall`` seconds."""
    counts = _counts(bus, run, total, embedding)
    moved_at, last, checked = time.monotonic(), (-1, -1), 0.0
    while counts.files_done < total:
        now = time.monotonic()
        if now - checked >= d.INDEX_CHECK_SECONDS:  # the registries: a scan of every job, not every tick
            checked = now
            if local is not None:
                local.promote_retries()
                if local.errors:
                    raise IndexFailed(f"memoryd index run {run}: {local.errors[0]}")
            failed = jobs.failed_jobs(bus, run=run)
            if failed:
                job = failed[0]
                raise IndexFailed(f"job {job.id} ({job.stage} stage, agent {job.agent}) of run {run} failed for good: "
                                  f"{job.error}. Fix the cause, then `memoryd retry {job.id}`; `memoryd status "
                                  f"--failed` lists {plural(len(failed), 'failed job')} of this run")
            counts.retrying = sum(1 for j in jobs.list_jobs(bus, ["scheduled"]) if run in j.runs)
        progress.update(counts)
        if (counts.files_done, counts.chunks_done) != last:
            moved_at, last = now, (counts.files_done, counts.chunks_done)
        elif now - moved_at > stall:
            waiting = "this process's stage threads" if local else "the running workers (`memoryd status`)"
            raise IndexFailed(f"memoryd index run {run}: nothing moved for {stall:.0f}s with {counts.files_done}/"
                              f"{total} files done; waited for {waiting}. See `memoryd status`")
        time.sleep(d.INDEX_POLL_SECONDS)
        retrying = counts.retrying
        counts = _counts(bus, run, total, embedding)
        counts.retrying = retrying
    progress.update(counts)
    return counts


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    workspace = _checked_workspace(args)
    started = time.monotonic()
    chosen, private = redis_server.ensure_redis(settings, "memoryd index")
    url = chosen.url
    try:
        conn = redis_server.connect(url)
        bus = busmod.Bus(conn, settings)
        run = uuid.uuid4().hex
        runs.claim(bus, run, args.agent)  # before the agent is registered: a watcher leaves its files to this run
        try:
            settings, agent = _workspace(args, settings, workspace)
            # the model that reads this memory is chosen before a chunk is embedded (shared/index/languages.py)
            settings = languages.at_open(settings, agent.id)
        except BaseException:
            runs.forget(bus, run)
            raise
        bus = busmod.Bus(conn, settings)
        set_context(settings, conn)
        workers = live_stages(bus) >= set(PIPELINE) and not private
        local = None if workers else LocalStages(bus, agent.id).start()  # the model loads while files are read
        try:
            chunking, total = queue_run(bus, settings, agent, run)
            if chunking == 0 and total == 0:
                print(f"memoryd: {no_memory_hint(agent)}", file=sys.stderr)
            if workers and not args.wait:
                return _queued(args, agent, run, total, url)
            embedding = providers.describe(agent.memory_search)[0] != "none"
            progress = IndexProgress(mode_for(args.json), total)
            try:
                counts = follow(bus, run, total, progress, embedding=embedding, local=local,
                                stall=args.stall_seconds or stall_seconds(settings))
            finally:
                progress.close()
            raw = runs.counts(bus, run)
        finally:
            if local is not None:
                local.close()
    finally:
        if private:
            private.stop()
    result: dict[str, Any] = {
        "agent": agent.id,
        "workspace": str(agent.workspace),
        "run": run,
        "files": counts.files_done - counts.skipped - counts.deleted,  # indexed: as `memoryd status` counts them
        "files_deleted": counts.deleted,
        "files_skipped": counts.skipped,
        "chunks": raw.get("chunks", 0),
        "chunks_embedded": raw.get("chunks_embedded", 0),
        "chunks_cached": raw.get("chunks_cached", 0),
        "index": index_counts(settings, agent.id),
        "seconds": round(time.monotonic() - started, 3),
        "worked_by": "running workers" if workers else "this process",
        "redis": "private" if private else redact(url),
    }
    if args.json:
        print_result(result, True)
    else:
        print(f"indexed {plural(result['files'], 'file')} of agent {agent.id} ({plural(result['chunks'], 'chunk')}"
              f", {result['chunks_embedded']} embedded, {result['chunks_cached']} from the cache; "
              f"{result['files_skipped']} skipped, {result['files_deleted']} deleted) in {result['seconds']:.1f}s "
              f"by {result['worked_by']}; Redis {result['redis']}")
    return 0


def _queued(args: argparse.Namespace, agent: AgentConfig, run: str, total: int, url: str) -> int:
    """The run is on the queues of running workers; the command returns (no ``--wait``)."""
    result = {"agent": agent.id, "workspace": str(agent.workspace), "run": run, "queued_files": total,
              "worked_by": "running workers", "redis": redact(url)}
    if args.json:
        print_result(result, True)
    else:
        print(f"queued {plural(total, 'file')} of agent {agent.id} for the running workers (run {run}); "
              "`memoryd status` shows their progress, `memoryd index --wait` follows it")
    return 0
