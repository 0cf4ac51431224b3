"""Worker identity across containers: real ``memoryd worker`` processes on a real Redis.

Every container runs memoryd as pid 1 and, with host networking, under the host's name:
names from host and pid collided (``--scale`` crash-looped) and a dead container's pid
looked alive to the next. Here two processes share one node name (the container case), and
one is killed with ``kill -9`` while it holds a job and the retry scheduler lock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from rq import SimpleWorker
from rq.job import Job

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.retries import scheduler_lock_holder
from tests.support import wait_until

pytestmark = pytest.mark.integration

#: A sweep finds a dead process once its heartbeat expired: the TTL, a sweep interval, a margin.
TAKEN_BACK_SECONDS = d.ALIVE_TTL_SECONDS + d.ORPHAN_SWEEP_SECONDS + 3


class Workers:
    def __init__(self, config: Path, redis_url: str, logs: Path) -> None:
        self.config, self.redis_url, self.logs = config, redis_url, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, node: str, stage: str = "index") -> subprocess.Popen[bytes]:
        env = dict(os.environ, REDIS_URL=self.redis_url, MEMORYD_CONFIG=str(self.config), MEMORYD_NODE=node)
        log = open(self.logs / f"{node}-{len(self.procs)}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-m", "memoryd.services.cli", "worker", stage],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def text(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:] for p in self.logs.glob("*.log"))

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def setup(make_settings, workspace: Path, redis_url: str, tmp_path: Path):
    settings, config = make_settings(workspace, redis=redis_url)
    logs = tmp_path / "logs"
    logs.mkdir()
    workers = Workers(config, redis_url, logs)
    yield settings, workers
    workers.stop()


def _names(bus: Bus, node: str) -> list[str]:
    return sorted(w.name for w in SimpleWorker.all(queue=bus.queues["index"])
                  if w.name.startswith(f"memoryd-index.{node}."))


def test_two_workers_with_one_node_name_both_run(setup: tuple[Settings, Workers]) -> None:
    settings, workers = setup
    bus = Bus(redis.Redis.from_url(workers.redis_url), settings)
    first, second = workers.start("box"), workers.start("box")
    names = wait_until(lambda: len(_names(bus, "box")) == 2 and _names(bus, "box"), timeout=30,
                       what="two registered index workers on node 'box'")
    assert names[0] != names[1]
    time.sleep(d.ALIVE_TTL_SECONDS + d.ORPHAN_SWEEP_SECONDS)  # neither refused, neither judged dead by the other
    assert first.poll() is None and second.poll() is None, workers.text()
    assert _names(bus, "box") == names


def test_a_killed_workers_job_and_retry_lock_are_taken_back_by_another_node(setup: tuple[Settings, Workers]) -> None:
    settings, workers = setup
    conn = redis.Redis.from_url(workers.redis_url)
    bus = Bus(conn, settings)
    queue = bus.queues["index"]
    doomed = workers.start("node-a")
    wait_until(lambda: _names(bus, "node-a") and scheduler_lock_holder(queue), timeout=30,
               what="node-a's worker registered, holding the retry scheduler lock")
    job = queue.enqueue("time.sleep", 30, job_timeout=120)  # a job that is still running when the kill lands
    wait_until(lambda: Job.fetch(job.id, connection=conn).worker_name, timeout=30, what="node-a starting the job")
    workers.start("node-b")
    wait_until(lambda: _names(bus, "node-b"), timeout=30, what="node-b's worker registered")
    assert scheduler_lock_holder(queue).startswith("memoryd-index.node-a.")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    killed = time.monotonic()

    def taken_back() -> bool:
        holder = Job.fetch(job.id, connection=conn).worker_name or ""
        lock = scheduler_lock_holder(queue) or ""
        return holder.startswith("memoryd-index.node-b.") and lock.startswith("memoryd-index.node-b.")

    wait_until(taken_back, timeout=TAKEN_BACK_SECONDS + 10, interval=0.1,
               what=f"node-b running node-a's job and holding its retry lock\n{workers.text()}")
    assert time.monotonic() - killed < TAKEN_BACK_SECONDS
    assert _names(bus, "node-a") == []  # the dead worker's death is recorded


def test_health_answers_for_this_machines_worker_of_a_stage(setup: tuple[Settings, Workers]) -> None:
    settings, workers = setup
    bus = Bus(redis.Redis.from_url(workers.redis_url), settings)

    def health(*args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, REDIS_URL=workers.redis_url, MEMORYD_CONFIG=str(workers.config))
        return subprocess.run([sys.executable, "-m", "memoryd.services.cli", "health", "--json", *args],
                              env=env, capture_output=True, text=True, timeout=60)

    assert health().returncode == 0  # Redis answers
    assert health("--stage", "index").returncode == 1  # no worker yet
    proc = workers.start("box")
    wait_until(lambda: _names(bus, "box"), timeout=30, what="the index worker registered")
    answer = health("--stage", "index")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert _names(bus, "box")[0] in answer.stdout
    assert health("--stage", "embed").returncode == 1
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    wait_until(lambda: health("--stage", "index").returncode == 1, timeout=d.ALIVE_TTL_SECONDS + 10, interval=0.5,
               what="health failing once the killed worker's heartbeat expired")
