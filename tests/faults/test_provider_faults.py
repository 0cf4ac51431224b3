"""The embedding provider misbehaves while 40 files arrive: it answers 429 with Retry-After, 500,
hangs, or says ``insufficient_quota``. Real watcher and workers, the loopback OpenAI stub.

Every case: the files become keyword-searchable at once (an embed job that gets no vectors
emits its chunks without them; the circuit breaker makes the next jobs fail fast), the index
rows equal a fresh rebuild of the same files, and — once the provider answers — the backfill
fills in every vector. Recorded: seconds until the rows equal the rebuild, and until the
vectors are complete.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.shared.runtime.bus import Bus
from tests.faults.conftest import FaultTimes
from tests.faults.support import RedisProcess, copy_files, staged_import, wait_converged
from tests.openai_stub import OpenAIStub
from tests.pipeline_harness import Pipeline
from tests.support import wait_until

AGENT = "main"
FILES = 40
#: The stub's hung request is cut by the client after this long: one timeout, then fail fast.
TIMEOUT_SECONDS = 2


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def stub_pipeline(workspace: Path, make_settings, fault_redis: RedisProcess, stub: OpenAIStub,
                  tmp_path: Path) -> Iterator[Pipeline]:
    """The four services, embedding through the stub (timeout 2 s, breaker cooldown 1 s, backfill every 1 s)."""
    remote = {"baseUrl": stub.base_url, "timeoutSeconds": TIMEOUT_SECONDS, "cooldownSeconds": 1}
    settings, config = make_settings(workspace, redis=fault_redis.url, provider="openai-compatible",
                                     model="stub-embed", remote=remote)
    logs = tmp_path / "logs"
    logs.mkdir()
    pipeline = Pipeline(config, fault_redis.url, settings, logs)
    yield pipeline
    pipeline.stop()


def _missing_vectors(p: Pipeline) -> int:
    return int(p.query(AGENT, "SELECT count(*) FROM chunks WHERE has_vector = 0")[0][0])


def _chunks(p: Pipeline) -> int:
    return int(p.query(AGENT, "SELECT count(*) FROM chunks")[0][0])


def _arrive(p: Pipeline, stub: OpenAIStub, workspace: Path, tmp_path: Path, what: str,
            **fault: object) -> tuple[float, int, float]:
    """FILES files arrive while the stub answers ``fault``; → (seconds until the rows equal a fresh
    rebuild, provider calls meanwhile, when the files arrived)."""
    staged, expected = staged_import(p, tmp_path, files=FILES, lines=30)
    stub.set(**fault)
    before = len(stub.requests("/embeddings"))
    started = time.monotonic()
    copy_files(staged / "memory", workspace / "memory")
    rows = wait_converged(p.settings, AGENT, expected, since=started, what=what, logs=p.logs())
    assert _chunks(p) == len(expected.chunks)
    return rows, len(stub.requests("/embeddings")) - before, started


@pytest.mark.parametrize("fault", [
    pytest.param({"embeddings": "429", "retry_after": 1, "times": 8}, id="429-retry-after"),
    pytest.param({"embeddings": "500", "times": 8}, id="500"),
])
def test_a_failing_provider_leaves_keyword_chunks_then_the_backfill_fills_the_vectors(
        fault: dict, stub_pipeline: Pipeline, stub: OpenAIStub, workspace: Path, tmp_path: Path,
        fault_times: FaultTimes) -> None:
    p = stub_pipeline
    rows, _, started = _arrive(p, stub, workspace, tmp_path, f"with the provider answering {fault}", **fault)
    wait_until(lambda: _missing_vectors(p) == 0, timeout=120, what=f"every vector backfilled\n{p.logs()}")
    vectors = round(time.monotonic() - started, 2)
    name = "429 with Retry-After: 1" if fault["embeddings"] == "429" else "500"
    fault_times.record(f"provider answers {name} (8 requests), {FILES} files: rows", rows)
    fault_times.record(f"provider answers {name} (8 requests), {FILES} files: all vectors", vectors)


def test_a_hung_provider_costs_one_timeout_not_one_per_job(
        stub_pipeline: Pipeline, stub: OpenAIStub, workspace: Path, tmp_path: Path, fault_times: FaultTimes) -> None:
    p = stub_pipeline
    rows, hung, _ = _arrive(p, stub, workspace, tmp_path, "with the provider hung", embeddings="hang")
    assert _missing_vectors(p) == _chunks(p)  # keyword-searchable, no vector yet
    jobs = len(p.events(AGENT, "chunks.embedded"))
    assert jobs >= 5 and hung <= 3, f"{hung} provider calls for {jobs} embed jobs while it hung"
    stub.set(embeddings="ok")
    released = time.monotonic()
    wait_until(lambda: _missing_vectors(p) == 0, timeout=120, what=f"every vector backfilled\n{p.logs()}")
    fault_times.record(f"provider hangs, {FILES} files: rows (keyword-searchable)", rows)
    fault_times.record(f"provider hangs, {FILES} files: all vectors after it answers again",
                       round(time.monotonic() - released, 2))


def test_insufficient_quota_is_not_retried_and_says_to_add_credit(
        stub_pipeline: Pipeline, stub: OpenAIStub, workspace: Path, tmp_path: Path, fault_times: FaultTimes) -> None:
    p = stub_pipeline
    rows, calls, _ = _arrive(p, stub, workspace, tmp_path, "with the quota exhausted", embeddings="quota")
    before = len(stub.requests("/embeddings")) - calls
    time.sleep(3)  # three backfill periods: none of them may call the provider
    assert len(stub.requests("/embeddings")) - before == calls == 1
    assert _missing_vectors(p) == _chunks(p)
    error = str(Bus(p.conn, p.settings).provider_errors()[AGENT]["error"])
    assert "add credit" in error and "not called" in error
    fault_times.record(f"provider says insufficient_quota, {FILES} files: rows (one provider call in all)", rows)
