"""Jobs left behind by a worker killed with ``kill -9`` are requeued within one sweep.

A real worker process killed mid-job is covered end to end in test_pipeline_integration;
here each state a dead worker can leave is built with RQ's own calls on the real Redis,
because a kill lands in the narrow ones only by chance.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.executions import Execution
from rq.job import JobStatus
from rq.registry import StartedJobRegistry
from rq.scheduler import RQScheduler

from memoryd.shared.runtime.worker import HOST, requeue_orphans

pytestmark = pytest.mark.integration


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _setup(redis_url: str, pid: int) -> tuple[Queue, SimpleWorker]:
    conn = redis.Redis.from_url(redis_url)
    queue = Queue("memoryd-index", connection=conn)
    worker = SimpleWorker([queue], connection=conn, name=f"memoryd-index.{HOST}.{pid}")
    worker.register_birth()
    return queue, worker


def _take(queue: Queue) -> str:
    """What a worker's dequeue does first: move the job to the intermediate queue."""
    job = queue.enqueue("memoryd.services.pipeline.indexer.index_job", [])
    queue.connection.lmove(queue.key, queue.intermediate_queue_key)
    return job.id


def test_a_half_started_job_of_a_dead_worker_is_requeued(redis_url: str) -> None:
    queue, worker = _setup(redis_url, _dead_pid())
    job_id = _take(queue)
    job = queue.fetch_job(job_id)
    with queue.connection.pipeline() as pipe:  # the execution is recorded, the status not yet set
        Execution.create(job, ttl=120, pipeline=pipe, worker_name=worker.name)
        pipe.execute()
    assert job.get_status() == JobStatus.QUEUED and job_id in StartedJobRegistry(queue=queue).get_job_ids()
    assert requeue_orphans(queue) == 1
    assert queue.get_job_ids() == [job_id]
    assert StartedJobRegistry(queue=queue).get_job_ids(cleanup=False) == []
    assert queue.connection.llen(queue.intermediate_queue_key) == 0
    assert worker.name not in [w.name for w in SimpleWorker.all(queue=queue)]  # its death is recorded


def test_a_started_job_naming_a_dead_worker_is_requeued(redis_url: str) -> None:
    queue, worker = _setup(redis_url, _dead_pid())
    job_id = _take(queue)
    job = queue.fetch_job(job_id)
    with queue.connection.pipeline() as pipe:
        Execution.create(job, ttl=120, pipeline=pipe, worker_name="")
        job.prepare_for_execution(worker.name, pipe)
        pipe.execute()
    assert job.get_status() == JobStatus.STARTED
    assert requeue_orphans(queue) == 1
    assert queue.get_job_ids() == [job_id]


def test_a_job_stuck_in_the_intermediate_queue_is_requeued_after_a_grace_period(redis_url: str) -> None:
    queue, _ = _setup(redis_url, os.getpid())
    job_id = _take(queue)
    assert requeue_orphans(queue) == 0  # first seen now: a live worker may be about to start it
    iq = queue.intermediate_queue
    queue.connection.set(iq.get_first_seen_key(job_id), time.time() - 60)
    assert requeue_orphans(queue) == 1
    assert queue.get_job_ids() == [job_id]


def test_jobs_of_a_live_worker_are_left_alone(redis_url: str) -> None:
    queue, worker = _setup(redis_url, os.getpid())
    job_id = _take(queue)
    job = queue.fetch_job(job_id)
    with queue.connection.pipeline() as pipe:
        Execution.create(job, ttl=120, pipeline=pipe, worker_name=worker.name)
        job.prepare_for_execution(worker.name, pipe)
        pipe.execute()
    assert requeue_orphans(queue) == 0
    assert queue.get_job_ids() == []
    assert job_id in StartedJobRegistry(queue=queue).get_job_ids(cleanup=False)


def test_the_retry_scheduler_lock_of_a_dead_worker_is_freed_and_a_live_ones_kept(redis_url: str) -> None:
    queue, _ = _setup(redis_url, os.getpid())
    key = RQScheduler.get_locking_key(queue.name)
    dead = f"memoryd-index.{HOST}.{_dead_pid()}"
    queue.connection.set(key, dead, ex=61)  # RQ's lease: a minute before another worker could promote retries
    requeue_orphans(queue)
    assert queue.connection.get(key) is None
    live = f"memoryd-index.{HOST}.{os.getpid()}"
    queue.connection.set(key, live, ex=61)
    requeue_orphans(queue)
    assert queue.connection.get(key) == live.encode()
