"""Fixtures of the fault suite: a Redis the case may kill, the real pipeline on it, and a
record of how long each case took to converge.

Every test under ``tests/faults/`` is marked ``faults``. The convergence times are printed
at the end of the run and, when ``MEMORYD_FAULT_REPORT`` names a file, written there as
JSON (``bench/faults.py`` reads it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.support import FaultTimes, RedisProcess
from tests.pipeline_harness import Pipeline


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    times = FaultTimes.recorded
    if not times:
        return
    terminalreporter.write_sep("-", "fault cases: seconds to converge")
    for case, seconds in sorted(times.items()):
        terminalreporter.write_line(f"{seconds:8.2f}  {case}")
    report = os.environ.get("MEMORYD_FAULT_REPORT")
    if report:
        Path(report).write_text(json.dumps(times, indent=2, sort_keys=True), encoding="utf-8")


@pytest.fixture
def fault_times() -> FaultTimes:
    return FaultTimes()


@pytest.fixture
def fault_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A redis-server of this test alone, on a fixed port, started; the case may kill and restart it."""
    server = RedisProcess(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fault_pipeline(workspace: Path, make_settings, fault_redis: RedisProcess, tmp_path: Path) -> Iterator[Pipeline]:
    """The four pipeline services (not started yet) against ``fault_redis``, provider ``hash``."""
    settings, config = make_settings(workspace, redis=fault_redis.url, debounce_ms=200)
    logs = tmp_path / "logs"
    logs.mkdir()
    pipeline = Pipeline(config, fault_redis.url, settings, logs)
    yield pipeline
    pipeline.stop()
