"""A flush that cannot write today's file records why, lets compaction go on, never loops, never overwrites.

Real Redis, the real RQ session worker (burst, in process), the real ``openai`` client against
the loopback stub; today's daily file is a real symlink (or a FIFO).
"""

from __future__ import annotations

import os
import threading
from datetime import datetime
from pathlib import Path

import pytest

from memoryd.services.session.service import NewMessage, Sessions
from tests.openai_stub import OpenAIStub
from tests.session_support import drain, llm_extra, logged, sessions, words

RULE = "Always confirm before deleting mail."


def _say(s: Sessions, text: str, role: str = "user", session: str = "long") -> dict:
    return s.append("main", session, NewMessage(role=role, content=text))  # type: ignore[arg-type]


def _today(workspace: Path) -> Path:
    """Today's daily file, as the session worker (real clock) names it."""
    return workspace / "memory" / f"{datetime.now().astimezone().date().isoformat()}.md"


@pytest.fixture
def stub():
    with OpenAIStub() as server:
        yield server


def test_a_symlinked_daily_file_is_not_written_and_compaction_goes_on(
        workspace: Path, tmp_path: Path, make_settings, redis_url: str, stub: OpenAIStub) -> None:
    settings, _ = make_settings(workspace, redis=redis_url, extra=llm_extra(stub.base_url))
    target = tmp_path / "outside.md"
    target.write_text("# not memory: a file elsewhere\n", encoding="utf-8")
    _today(workspace).symlink_to(target)
    s = sessions(settings, redis_url)
    first = _say(s, "Please tidy my inbox. " + RULE)
    crossed = _say(s, words(180_000 - first["tokens"]), "assistant")  # past both thresholds at once
    assert crossed["flushRequested"] and crossed["compactionRequested"]

    drain(settings, redis_url)  # the flush job, then the compaction job (which would flush first)

    shown = s.show("main", "long")
    assert shown["compactionCount"] == 1  # compaction was not blocked by the failed write
    assert "symlink" in shown["flushError"] and shown["memoryFlushCompactionCount"] == 0
    assert target.read_text(encoding="utf-8") == "# not memory: a file elsewhere\n"  # never written through
    assert _today(workspace).is_symlink()
    events = logged(redis_url)
    assert events.count("session.flush_failed") == 1 and "session.flushed" not in events
    assert events.index("session.flush_failed") < events.index("session.compacted")
    raw = (workspace / "sessions" / "long.jsonl").read_text(encoding="utf-8")
    assert '"type":"flush"' in raw and RULE in raw.split('"type":"flush"', 1)[1]  # notes kept as `unwritten`
    chats = len(stub.requests("/chat/completions"))
    drain(settings, redis_url)  # nothing is left to retry: no loop
    assert len(stub.requests("/chat/completions")) == chats == 2  # one flush turn, one summary
    assert logged(redis_url).count("session.flush_failed") == 1


def test_a_fifo_as_todays_file_is_refused_without_blocking(
        workspace: Path, make_settings, redis_url: str, stub: OpenAIStub) -> None:
    settings, _ = make_settings(workspace, redis=redis_url, extra=llm_extra(stub.base_url))
    os.mkfifo(_today(workspace))  # a FIFO: opening it for the append must not block
    s = sessions(settings, redis_url)
    _say(s, RULE, session="fifo")
    done: list = []
    worker = threading.Thread(target=lambda: done.append(s.flush("main", "fifo", 0)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the flush blocked on a FIFO"
    assert done[0]["files"] == [] and "not a regular file" in done[0]["error"]
    assert f"memory/{_today(workspace).name}" in done[0]["error"]
    assert s.flush("main", "fifo", 0) is None  # the cycle is closed: not tried again
    assert logged(redis_url).count("session.flush_failed") == 1
    assert s.show("main", "fifo")["flushError"] == done[0]["error"]
