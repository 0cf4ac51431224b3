"""The helpers every kind of test needs: a free loopback port, a bounded wait, a call on a thread
of its own, an app served on loopback, an exact FTS5 query."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run(threading.Thread):
    """``call()`` on a thread named ``name``, started at once; :meth:`result` waits for its answer at
    most ``deadline`` seconds and raises what the call raised."""

    def __init__(self, call: Callable[[], Any], name: str, deadline: float = 30.0) -> None:
        super().__init__(name=name, daemon=True)
        self.call, self.deadline = call, deadline
        self.answer: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.answer = self.call()
        except BaseException as exc:  # handed to the test, which raises it
            self.error = exc

    def result(self) -> Any:
        self.join(timeout=self.deadline)
        assert not self.is_alive(), f"{self.name!r} did not finish within {self.deadline:g} s"
        if self.error is not None:
            raise self.error
        return self.answer


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, *,
               what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy (→ that value); fail after ``timeout``
    seconds naming ``what`` and the last value. A liveness bound, not a timing assertion."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not met within {timeout}s (last value: {value!r})")


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def foreign_packages_dir(path: Path) -> Path:
    """``path`` holding its own ``services`` and ``shared`` packages (as a user's project might),
    both of which fail on import: a memoryd process started there must not pick them up."""
    for name in ("services", "shared"):
        (path / name).mkdir(parents=True)
        (path / name / "__init__.py").write_text(f"raise ImportError('the user\\'s own {name} package')\n")
        (path / name / "cli.py").write_text("raise SystemExit('wrong cli')\n")
    return path


def match_expression(terms: list[str], *, operator: str = "OR") -> str:
    """An FTS5 MATCH expression; each term quoted so no query text is read as syntax."""
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms]
    return f" {operator} ".join(quoted)


@contextmanager
def silent_redis() -> Iterator[str]:
    """The URL of a "Redis" that takes connections and never answers (a paused or stopped one): a
    listening socket nobody reads, the kernel completing the handshakes into its backlog."""
    hung = socket.create_server(("127.0.0.1", 0), backlog=64)
    try:
        yield f"redis://127.0.0.1:{hung.getsockname()[1]}/0"
    finally:
        hung.close()


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` (ASGI) on a real uvicorn server on a free loopback port, for the block: its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=30, interval=0.01, what="uvicorn started")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
