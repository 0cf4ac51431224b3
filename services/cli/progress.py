"""The progress of a ``memoryd index`` run, as a person or a program wants it.

On a terminal: a live ``rich`` display on stderr, redrawn as the stages count — files
done (the skipped ones counted apart: they are not indexed) and chunks embedded, each with
its rate and time left, and the jobs waiting for a retry. Piped: one plain line every few
seconds (and the last one), so a log shows how it went. With ``--json``: nothing; the
result is the one JSON object on stdout.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import IO, Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from memoryd.services.cli.text import plural
from memoryd.shared import defaults as d

Mode = Literal["live", "lines", "off"]


@dataclass
class Counts:
    """A run's counters (bumped by the stages in Redis, see ``Bus.count``)."""

    files: int  # files queued: changed, deleted and skipped ones
    files_done: int = 0  # indexed, skipped or deleted: applied to the index one way or another
    skipped: int = 0  # of files_done: not indexed (binary, too big, a name that is not UTF-8, …)
    deleted: int = 0  # of files_done: gone from the workspace, removed from the index
    chunks: int = 0  # chunks found by the chunker so far
    chunks_done: int = 0  # embedded now or found in the cache
    retrying: int = 0  # the run's jobs waiting for a retry


def skipped_note(counts: Counts) -> str:
    """``2 indexed, 3 skipped`` (and deleted ones) when some files done were not indexed; else empty."""
    if not counts.skipped and not counts.deleted:
        return ""
    parts = [f"{counts.files_done - counts.skipped - counts.deleted} indexed"]
    parts += [f"{counts.skipped} skipped"] if counts.skipped else []
    parts += [f"{counts.deleted} deleted"] if counts.deleted else []
    return ", ".join(parts)


class _Rate(ProgressColumn):
    """Items per second over rich's recent samples."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:.1f} {task.fields['unit']}/s", style="progress.data.speed")


def mode_for(as_json: bool, stream: IO[str] | None = None) -> Mode:
    if as_json:
        return "off"
    return "live" if (stream or sys.stderr).isatty() else "lines"


class IndexProgress:
    """Shows :class:`Counts` as they change; :meth:`close` leaves the final state on screen."""

    def __init__(self, mode: Mode, total_files: int, stream: IO[str] | None = None) -> None:
        self.mode = mode
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.last_line = 0.0
        self.last: Counts | None = None
        self.live: Progress | None = None
        if mode == "live":
            self.live = Progress(
                TextColumn("{task.description:<15}"), BarColumn(), MofNCompleteColumn(), _Rate(),
                TimeRemainingColumn(), TextColumn("{task.fields[note]}"),
                console=Console(file=self.stream), transient=False, refresh_per_second=8,
            )
            self.files = self.live.add_task("files done", total=total_files, unit="files", note="")
            self.chunks = self.live.add_task("chunks embedded", total=None, unit="chunks", note="")
            self.live.start()

    def update(self, counts: Counts) -> None:
        self.last = counts
        if self.live is not None:
            retry = f"{plural(counts.retrying, 'job')} retrying" if counts.retrying else ""
            note = ", ".join(n for n in (skipped_note(counts), retry) if n)
            self.live.update(self.files, completed=counts.files_done, note=note)
            self.live.update(self.chunks, completed=counts.chunks_done, total=max(counts.chunks, counts.chunks_done)
                             or None)
        elif self.mode == "lines" and time.monotonic() - self.last_line >= d.PROGRESS_LINE_SECONDS:
            self._line(counts)

    def _line(self, counts: Counts) -> None:
        self.last_line = time.monotonic()
        elapsed = max(self.last_line - self.started, 1e-6)
        retry = f", {plural(counts.retrying, 'job')} retrying" if counts.retrying else ""
        skipped = f" ({skipped_note(counts)})" if counts.skipped or counts.deleted else ""
        print(f"memoryd index: {counts.files_done}/{counts.files} files done{skipped}, "
              f"{counts.chunks_done}/{counts.chunks} chunks embedded ({counts.chunks_done / elapsed:.1f} chunks/s)"
              f"{retry}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
        elif self.mode == "lines" and self.last is not None:
            self._line(self.last)
