"""A service told to stop stops within moments and cleans up, whenever the request comes (real
Redis, real RQ, real processes).

Before, 1 in 15 chunk workers sent SIGTERM in their first seconds ran on for a minute: RQ's stop
waits for the thread that reads the worker's command channel, which RQ had reading for 60 s at a
time; a reply read just before the request sent it back into such a read (CI: a node's worker
missed the test harness's 20 s). A watcher had no handler at all: SIGTERM killed it with its
leases held (another node waited them out), and as a container's pid 1 it ignored SIGTERM until
docker killed it 10 s later."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import redis
from rq import Queue, SimpleWorker

from memoryd.shared import defaults as d
from memoryd.shared.runtime.bus import JOBS, Bus
from memoryd.shared.runtime.lease import Leases
from memoryd.shared.runtime.worker import StageWorker, run_worker
from tests.nodes_harness import Node
from tests.support import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def handlers_restored():
    """work() installs RQ's SIGTERM/SIGINT handlers in this (pytest's) process: put them back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_stop_waits_for_the_channel_reader_no_longer_than_one_read_when_no_message_comes(redis_url: str) -> None:
    conn = redis.Redis.from_url(redis_url)
    worker = StageWorker([Queue("stop-test", connection=conn)], connection=conn, name="stop-test-reader")
    worker.subscribe()
    reader = worker.pubsub_thread
    assert reader is not None
    # the state RQ's stop met: the UNSUBSCRIBE's reply already read, the reader back in a read
    # that no message will end
    time.sleep(0.3)
    worker.pubsub.unsubscribe()
    time.sleep(0.3)
    started = time.monotonic()
    reader.stop(timeout=10)  # what RQ's teardown calls (it waits for the thread)
    waited = time.monotonic() - started
    assert not reader.is_alive(), "the command channel's reader was still reading 10 s after it was told to stop"
    assert waited <= d.WORKER_CHANNEL_READ_SECONDS + 0.5, f"the stop waited {waited:.2f} s for the reader"
    worker.pubsub.close()


def test_a_stop_asked_before_rqs_handlers_are_in_place_ends_the_worker_before_its_first_job(
        redis_url: str, handlers_restored: None) -> None:
    conn = redis.Redis.from_url(redis_url)
    queue = Queue("stop-test", connection=conn)
    job = queue.enqueue("os.getpid")
    worker = StageWorker([queue], connection=conn, name="stop-test-early")
    # run_worker's own handlers set this when SIGTERM comes while a worker is made anew after Redis
    # came back; RQ's handlers, installed next, know nothing of it
    worker.asked_to_stop = threading.Event()
    worker.asked_to_stop.set()
    assert worker.work(burst=True, logging_level="WARNING") is False
    assert worker.stop_requested
    assert queue.get_job_ids() == [job.id], "the worker ran a job after it was asked to stop"


def test_a_stop_asked_while_the_worker_starts_ends_it_before_its_first_job(
        workspace: Path, make_settings, redis_url: str, handlers_restored: None) -> None:
    settings, _ = make_settings(workspace, redis=redis_url)
    conn = redis.Redis.from_url(redis_url)
    job = Bus(conn, settings).lanes("chunk")[0].enqueue(JOBS["chunk"], [])  # chunks nothing
    asked: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _: asked.append(signum))  # pytest lives on if no other handler

    def stop_while_starting() -> None:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)

    # Redis answers nothing for 1.5 s: the worker is held in its start (its first look at its
    # queues) when SIGTERM comes, well before RQ's handlers are in place
    redis.Redis.from_url(redis_url).execute_command("CLIENT", "PAUSE", 1500, "ALL")
    threading.Thread(target=stop_while_starting, daemon=True).start()
    started = time.monotonic()
    run_worker("chunk", settings, conn, burst=True)
    assert time.monotonic() - started < 10
    assert asked == [], "run_worker left SIGTERM to a handler of before its start"
    assert job.id in Bus(conn, settings).lanes("chunk")[0].get_job_ids(), "the worker ran a job after SIGTERM"
    assert SimpleWorker.all(connection=conn) == []


def test_a_watcher_told_to_stop_gives_its_leases_back_at_once(tmp_path: Path, workspace: Path, make_settings,
                                                              redis_url: str) -> None:
    settings, config = make_settings(workspace, redis=redis_url, extra={"memoryd": {"dataDir": str(tmp_path / "data")}})
    leases = Leases(redis.Redis.from_url(redis_url), settings.namespace, "observer")
    node = Node("n1", tmp_path / "node", config, redis_url)
    node.start("watcher")
    try:
        wait_until(lambda: (o := leases.owner("main")) is not None and o.node == "n1", timeout=60,
                   what=f"the watcher holding agent main's lease\n{node.logs()}")
        proc = node.procs["watcher"]
        node.stop("watcher")  # SIGTERM, then at most 20 s
        assert proc.returncode == 0, f"the watcher ended with {proc.returncode}\n{node.logs()}"
        # not waited out (LEASE_TTL_SECONDS): given back as it stopped
        assert leases.owner("main") is None, f"the lease is still held after the watcher stopped\n{node.logs()}"
    finally:
        node.shutdown()
