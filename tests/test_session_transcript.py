"""The JSONL store: round trip, concurrent appenders, torn lines, ids."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from memoryd.services.session.transcript import Compaction, Message, Transcript, segment
from memoryd.shared.exceptions import BadRequest

WRITERS = 6
PER_WRITER = 150


def _message(i: int, text: str) -> Message:
    return Message(ts="2026-03-01T10:00:00+00:00", role="user", content=text, tokens=i)


def _writer(path: str, writer: int) -> None:
    transcript = Transcript(Path(path))
    for i in range(PER_WRITER):
        # 20 KB lines: far beyond PIPE_BUF, so only the lock keeps them whole
        transcript.append(_message(i, f"w{writer}-{i}-" + "x" * 20_000))


def test_round_trip_keeps_every_field_in_camel_case(workspace: Path) -> None:
    transcript = Transcript.of(workspace, "chat-1")
    message = Message(ts="2026-03-01T10:00:00+00:00", role="tool", content="ok", tokens=1, name="exec",
                      tool_call_id="call_1")
    transcript.append(message)
    raw = json.loads(transcript.path.read_text(encoding="utf-8"))
    assert raw["toolCallId"] == "call_1" and raw["type"] == "message"
    assert transcript.read() == [message]
    assert transcript.path == workspace / "sessions" / "chat-1.jsonl"


def test_concurrent_appenders_never_interleave_or_lose_a_line(workspace: Path) -> None:
    path = Transcript.of(workspace, "busy").path
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    raw_lines = path.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    entries = [json.loads(line) for line in raw_lines[:-1]]  # every line is whole JSON
    assert len(entries) == WRITERS * PER_WRITER
    for w in range(WRITERS):
        mine = [e["content"].split("-")[1] for e in entries if e["content"].startswith(f"w{w}-")]
        assert mine == [str(i) for i in range(PER_WRITER)]  # each writer's lines, all, in its order


def test_a_torn_last_line_is_skipped_and_the_next_append_starts_fresh(workspace: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    transcript = Transcript.of(workspace, "torn")
    transcript.append(_message(1, "before"))
    with transcript.path.open("ab") as handle:
        handle.write(b'{"type":"message","role":"us')  # a crash mid-write
    transcript.append(_message(2, "after"))
    assert [e.content for e in transcript.read()] == ["before", "after"]  # type: ignore[union-attr]
    assert "torn" in caplog.text


@pytest.mark.parametrize("bad", ["../etc/passwd", "a/b", ".hidden", "", "x" * 200])
def test_session_ids_that_are_not_plain_file_names_are_refused(workspace: Path, bad: str) -> None:
    with pytest.raises(BadRequest, match="session id"):
        Transcript.of(workspace, bad)


def test_live_messages_start_at_the_first_kept_turn_of_the_latest_compaction(workspace: Path) -> None:
    m = [_message(i, f"m{i}") for i in range(4)]
    c = Compaction(ts="2026-03-01T10:00:00+00:00", summary="s", first_kept_id=m[2].id, tokens=1,
                   tokens_before=10, tokens_after=3, compaction_count=1)
    late = _message(9, "late")
    seg = segment([*m, c, late])
    assert [x.content for x in seg.live_messages()] == ["m2", "m3", "late"]
    assert seg.compaction_count == 1
