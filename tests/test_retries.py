"""Retries really run: a real worker process retries a failed job 1 s later and it succeeds; a
job whose retries are spent waits in the failed registry, visible in `memoryd status`, until
`memoryd retry` puts it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry

from memoryd.shared.config.loader import load_settings
from memoryd.shared.events import FileDeleted
from memoryd.shared.runtime import retries as jobs
from memoryd.shared.runtime.roster import register_agent
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def indexer(workspace: Path, make_settings, redis_url: str, tmp_path: Path):
    settings, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"jobRetries": 1}})
    p = Pipeline(config, redis_url, settings, tmp_path)
    p.start("index")
    yield p
    p.stop()


def _status(p: Pipeline, *args: str) -> dict:
    return json.loads(p.cli("status", "--json", *args).stdout)


def test_a_job_that_fails_once_is_retried_by_the_running_worker(indexer: Pipeline, tmp_path: Path) -> None:
    """The event names an agent the registry does not know yet: the first try fails with
    UnknownAgent, the agent is registered, the retry a second later succeeds."""
    p = indexer
    p.bus.emit("index", [FileDeleted(agent="late", path="memory/gone.md", seq=1)], job_id="late-1")
    job = Job.fetch("late-1", connection=p.conn)
    scheduled = ScheduledJobRegistry(queue=p.bus.lanes("index")[0])  # this node's own: it owns the agent now
    wait_until(lambda: "late-1" in scheduled.get_job_ids() or job.get_status() == JobStatus.FINISHED, timeout=60,
               interval=0.01, what="the first try to fail and be scheduled for a retry")
    job.refresh()
    assert "late" in job.meta["last_error"] and job.retries_left == 0, job.meta
    (tmp_path / "late-ws").mkdir()
    register_agent(p.settings, "late", tmp_path / "late-ws")
    wait_until(lambda: job.get_status() == JobStatus.FINISHED, timeout=30,
               what="the retry to run and succeed")
    assert p.query("late", "SELECT path, status FROM files") == [("memory/gone.md", "deleted")]


def test_spent_retries_park_the_job_until_memoryd_retry(indexer: Pipeline) -> None:
    """The index file cannot be opened (a folder stands in its place): both tries fail, the
    job is failed for good and shown with its error; once fixed, `memoryd retry` runs it."""
    p = indexer
    blocker = p.settings.index_path("main")
    blocker.mkdir(parents=True)
    p.bus.emit("index", [FileDeleted(agent="main", path="memory/x.md", seq=1)], job_id="blocked-1")
    wait_until(lambda: Job.fetch("blocked-1", connection=p.conn).get_status() == JobStatus.FAILED, timeout=60,
               what="the job to spend its retries")

    status = _status(p)
    assert status["queues"]["index"]["failed"] == 1
    [shown] = status["agents"]["main"]["failedJobs"]
    assert shown["id"] == "blocked-1" and shown["stage"] == "index" and shown["retriesLeft"] == 0
    assert "main.sqlite" in shown["error"] or "database" in shown["error"], shown
    assert shown["failedAt"] > 0
    [listed] = _status(p, "--failed")["failed"]
    assert {k: listed[k] for k in ("id", "agent", "stage")} == {"id": "blocked-1", "agent": "main", "stage": "index"}
    human = p.cli("status", "--failed").stdout
    assert "blocked-1" in human and "agent=main" in human and "stage=index" in human

    blocker.rmdir()
    out = json.loads(p.cli("retry", "--agent", "main", "--json").stdout)
    assert out == {"requeued": ["blocked-1"], "notFailed": []}
    wait_until(lambda: Job.fetch("blocked-1", connection=p.conn).get_status() == JobStatus.FINISHED, timeout=30,
               what="the requeued job to succeed")
    assert p.query("main", "SELECT path, status FROM files") == [("memory/x.md", "deleted")]
    assert _status(p)["agents"]["main"]["failedJobs"] == []
    assert p.cli("retry", "nope", check=False).returncode == 1  # naming a job that is not failed


def test_failed_jobs_of_a_run_are_found(indexer: Pipeline) -> None:
    """`memoryd index` asks whether a job of its run failed for good (jobs.failed_jobs(run=…))."""
    p = indexer
    p.settings.index_path("main").mkdir(parents=True)
    p.bus.emit("index", [FileDeleted(agent="main", path="memory/x.md", seq=1, run="run-a")], job_id="run-a-1")
    p.bus.emit("index", [FileDeleted(agent="main", path="memory/y.md", seq=2, run="run-b")], job_id="run-b-1")
    wait_until(lambda: len(jobs.failed_jobs(p.bus)) == 2, timeout=60, what="both jobs to fail")
    assert [j.id for j in jobs.failed_jobs(p.bus, run="run-a")] == ["run-a-1"]
    assert jobs.failed_jobs(p.bus, run="run-c") == []
    assert load_settings(p.config).memoryd.job_retries == 1
