"""A worker told to stop stops within moments, whenever the request comes (real Redis, real RQ).

Before, 1 in 15 chunk workers sent SIGTERM in their first seconds ran on for a minute: RQ's stop
waits for the thread that reads the worker's command channel, which RQ had reading for 60 s at a
time; a reply read just before the request sent it back into such a read (CI: a node's worker
missed the test harness's 20 s)."""

from __future__ import annotations

import signal
import threading
import time

import pytest
import redis
from rq import Queue

from memoryd.shared import defaults as d
from memoryd.shared.runtime.worker import StageWorker

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
