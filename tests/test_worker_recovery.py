"""Jobs left behind by a worker killed with ``kill -9`` are requeued within one sweep.

A real worker process killed mid-job is covered end to end in test_pipeline_integration
and test_worker_identity; here each state a dead worker can leave is built with RQ's own
calls on the real Redis, because a kill lands in the narrow ones only by chance. Dead
means: no heartbeat key for the worker's process identity (``shared/runtime/liveness``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.scheduler import RQScheduler

from memoryd.shared import defaults as d
from memoryd.shared.runtime.liveness import alive_key
from memoryd.shared.runtime.redis_server import start_private_redis
from memoryd.shared.runtime.worker import requeue_orphans
from tests.support import wait_until

pytestmark = pytest.mark.integration

LIVE, DEAD = "node-a.0badc0de", "node-a.deadbeef"  # two process identities on one node name


@pytest.fixture
def settled(redis_url: str) -> Iterator[str]:
    """The Redis with its heartbeat grace over (a fresh server judges nobody) and LIVE beating."""
    conn = redis.Redis.from_url(redis_url)
    wait_until(lambda: int(conn.info("server")["uptime_in_seconds"]) > d.ALIVE_TTL_SECONDS,
               timeout=d.ALIVE_TTL_SECONDS + 5, interval=0.2, what="the heartbeat grace of a fresh Redis")
    conn.set(alive_key(LIVE), os.getpid(), ex=60)
    yield redis_url


def _setup(redis_url: str, ident: str) -> tuple[Queue, SimpleWorker]:
    conn = redis.Redis.from_url(redis_url)
    queue = Queue("memoryd-index", connection=conn)
    worker = SimpleWorker([queue], connection=conn, name=f"memoryd-index.{ident}")
    worker.register_birth()
    return queue, worker


def _take(queue: Queue) -> str:
    """What a worker's dequeue does first: move the job to the intermediate queue."""
    job = queue.enqueue("memoryd.services.pipeline.indexer.index_job", [])
    queue.connection.lmove(queue.key, queue.intermediate_queue_key)
    return job.id


def _started(queue: Queue, worker: SimpleWorker, job_id: str, *, named: bool = True) -> Job:
    """What a worker's start of ``job_id`` leaves: an execution (naming the worker, or nobody) and
    the job marked started by ``worker``."""
    job = queue.fetch_job(job_id)
    with queue.connection.pipeline() as pipe:
        Execution.create(job, ttl=120, pipeline=pipe, worker_name=worker.name if named else "")
        job.prepare_for_execution(worker.name, pipe)
        pipe.execute()
    return job


def test_a_half_started_job_of_a_dead_worker_is_requeued(settled: str) -> None:
    queue, worker = _setup(settled, DEAD)
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


def test_a_started_job_naming_a_dead_worker_is_requeued(settled: str) -> None:
    queue, worker = _setup(settled, DEAD)
    job_id = _take(queue)
    job = _started(queue, worker, job_id, named=False)
    assert job.get_status() == JobStatus.STARTED
    assert requeue_orphans(queue) == 1
    assert queue.get_job_ids() == [job_id]


def test_a_job_stuck_in_the_intermediate_queue_is_requeued_after_a_grace_period(settled: str) -> None:
    queue, _ = _setup(settled, LIVE)
    job_id = _take(queue)
    assert requeue_orphans(queue) == 0  # first seen now: a live worker may be about to start it
    iq = queue.intermediate_queue
    queue.connection.set(iq.get_first_seen_key(job_id), time.time() - 60)
    assert requeue_orphans(queue) == 1
    assert queue.get_job_ids() == [job_id]


def test_jobs_of_a_live_worker_are_left_alone(settled: str) -> None:
    queue, worker = _setup(settled, LIVE)
    job_id = _take(queue)
    _started(queue, worker, job_id)
    assert requeue_orphans(queue) == 0
    assert queue.get_job_ids() == []
    assert job_id in StartedJobRegistry(queue=queue).get_job_ids(cleanup=False)


def test_a_pid_named_worker_whose_pid_is_alive_is_judged_by_its_heartbeat(settled: str) -> None:
    """A name of memoryd 0.2 (``<stage>.<host>.<pid>``) with a pid that is alive here, as pid 1 is in
    every container: no heartbeat, so its job is taken back all the same."""
    queue, worker = _setup(settled, f"node-a.{os.getpid()}")
    job_id = _take(queue)
    _started(queue, worker, job_id)
    assert requeue_orphans(queue) == 1
    assert queue.get_job_ids() == [job_id]


def test_a_fresh_redis_judges_nobody(tmp_path: Path) -> None:
    """Right after a restart that lost the heartbeat keys, a live worker has not refreshed its key yet."""
    server = start_private_redis(tmp_path)
    try:
        queue, worker = _setup(server.url, DEAD)
        job = _started(queue, worker, _take(queue))
        assert requeue_orphans(queue) == 0
        assert job.id in StartedJobRegistry(queue=queue).get_job_ids(cleanup=False)
    finally:
        server.stop()


def test_the_retry_scheduler_lock_of_a_dead_worker_is_freed_and_a_live_ones_kept(settled: str) -> None:
    queue, _ = _setup(settled, LIVE)
    key = RQScheduler.get_locking_key(queue.name)
    dead = f"memoryd-index.{DEAD}"
    queue.connection.set(key, dead, ex=61)  # RQ's lease: a minute before another worker could promote retries
    requeue_orphans(queue)
    assert queue.connection.get(key) is None
    live = f"memoryd-index.{LIVE}"
    queue.connection.set(key, live, ex=61)
    requeue_orphans(queue)
    assert queue.connection.get(key) == live.encode()
