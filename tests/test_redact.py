"""Credentials in URLs are masked in everything memoryd prints: errors, doctor, logs, HTTP."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.services.cli.redactlog import RedactingFilter
from memoryd.shared.exceptions import RedisUnavailable
from memoryd.shared.redact import redact
from memoryd.shared.runtime.redis_server import connect
from tests.support import free_port


@pytest.mark.parametrize("text,shown", [
    ("redis://:secret@host:6379/0", "redis://:***@host:6379/0"),
    ("redis://user:secret@host", "redis://user:***@host"),
    ("rediss://token@host", "rediss://***@host"),
    ("cannot reach redis://:p%40ss@10.0.0.1:6379 now", "cannot reach redis://:***@10.0.0.1:6379 now"),
    ("two: http://a:b@x/ and https://c:d@y/path?q=1", "two: http://a:***@x/ and https://c:***@y/path?q=1"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("no url at all: a:b@c", "no url at all: a:b@c"),
])
def test_redact_masks_the_password_of_every_url(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_cannot_reach_redis_error_hides_the_password() -> None:
    with pytest.raises(RedisUnavailable) as caught:
        connect(f"redis://:hunter2@127.0.0.1:{free_port()}/0")
    assert "hunter2" not in str(caught.value) and ":***@127.0.0.1" in str(caught.value)


def test_log_records_are_redacted() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "lost %s", ("redis://:hunter2@h:1",), None)
    RedactingFilter().filter(record)
    assert record.getMessage() == "lost redis://:***@h:1"


def test_doctor_and_status_never_print_the_password(tmp_path: Path) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "hash"}},
                                             "list": [{"id": "main", "workspace": str(tmp_path / "ws")}]},
                                  "memoryd": {"stateDir": str(tmp_path / "state"), "redisUrl": url}}))
    for argv in (["doctor"], ["doctor", "--json"], ["status", "--json"], ["status"], ["status", "--failed"],
                 ["retry"], ["watcher"]):
        out = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), *argv],
                             capture_output=True, text=True, timeout=120)
        printed = out.stdout + out.stderr
        assert "hunter2" not in printed, (argv, printed)
        assert ":***@127.0.0.1" in printed, (argv, printed)
