"""An OpenAI-compatible HTTP server on loopback, for tests that drive the real ``openai`` client.

``/v1/embeddings`` returns deterministic feature-hash vectors; ``/v1/chat/completions``
returns a scripted reply (default: the user lines that state a rule or decision, or
``NO_REPLY``). ``stub.set(...)`` (or ``POST /control``) switches failure modes at run time:

- ``embeddings``: ``ok``; ``500``; ``429`` (a rate limit; with ``retry_after=S`` it carries
  ``Retry-After: S``); ``quota`` (429 ``insufficient_quota``); ``hang`` (no answer until the
  mode changes or the stub stops); ``400`` (the request's fault: input too long);
- ``times=N``: the embeddings mode holds for the next N requests only, then ``ok`` again;
- ``chat``: ``ok`` | ``500``; ``reply``: the chat answer; ``delay``: seconds per embeddings request.

Every request is recorded and readable at ``GET /requests``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

DIMS = 64
_WORD = re.compile(r"\w+", re.UNICODE)
_RULE = re.compile(r"\b(always|never|decid\w*|prefer\w*|remember|rule)\b", re.IGNORECASE)


def hash_vector(text: str) -> list[float]:
    v = np.zeros(DIMS, dtype=np.float64)
    for word in _WORD.findall(text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
        v[h % DIMS] += 1.0
    if not v.any():
        v[0] = 1.0
    return (v / np.linalg.norm(v)).tolist()


#: A hung request is answered after this long at most, so a forgotten stub never holds a test.
HANG_LIMIT_SECONDS = 120.0


class StubState:
    def __init__(self) -> None:
        self.modes: dict[str, str] = {"embeddings": "ok", "chat": "ok"}
        self.reply: str | None = None
        self.delay = 0.0
        self.retry_after: str | None = None
        self.times: int | None = None  # embeddings requests left in the current mode (None: all)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.closing = False

    def update(self, values: dict[str, Any]) -> None:
        with self.lock:
            for key in ("embeddings", "chat"):
                if key in values:
                    self.modes[key] = str(values[key])
            if "embeddings" in values:
                self.times = None
                self.retry_after = None
            if "reply" in values:
                self.reply = str(values["reply"])
            if "delay" in values:
                self.delay = float(values["delay"])
            if "retry_after" in values:
                self.retry_after = str(values["retry_after"])
            if "times" in values:
                self.times = int(values["times"])
            self.changed.notify_all()

    def take_embeddings_mode(self) -> str:
        """The mode for this embeddings request (counting down ``times``); call with the lock held."""
        mode = self.modes["embeddings"]
        if self.times is not None:
            self.times -= 1
            if self.times <= 0:
                self.modes["embeddings"], self.times = "ok", None
        return mode

    def hang(self) -> None:
        """Block this request until the embeddings mode is no longer ``hang`` (or the stub stops)."""
        with self.lock:
            self.changed.wait_for(lambda: self.closing or self.modes["embeddings"] != "hang",
                                  timeout=HANG_LIMIT_SECONDS)


def _default_reply(messages: list[dict[str, Any]]) -> str:
    lines = []
    for message in messages:
        if message.get("role") != "user":
            continue
        for line in str(message.get("content", "")).splitlines():
            if _RULE.search(line):
                lines.append(f"- {line.strip()}")
    return "\n".join(dict.fromkeys(lines)) or "NO_REPLY"


def _handler(state: StubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout) while this request hung: nothing to answer

        def do_GET(self) -> None:
            if self.path == "/requests":
                with state.lock:
                    self._send(200, {"requests": state.requests})
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/control":
                state.update(body)
                self._send(200, {"ok": True})
                return
            kind = "embeddings" if self.path.endswith("/embeddings") else "chat"
            with state.lock:
                state.requests.append({"path": self.path, "body": body, "at": time.monotonic()})
                mode = state.take_embeddings_mode() if kind == "embeddings" else state.modes[kind]
                reply = state.reply
                delay = state.delay if kind == "embeddings" else 0.0
                retry_after = {"Retry-After": state.retry_after} if state.retry_after is not None else {}
            if delay:
                time.sleep(delay)
            if mode == "hang":
                state.hang()
                mode = "ok"
            if mode == "500":
                self._send(500, {"error": {"message": "stub is down", "type": "server_error"}})
            elif mode == "429":
                self._send(429, {"error": {"message": "slow down", "type": "rate_limit", "code": "rate_limit"}},
                           retry_after)
            elif mode == "400":
                self._send(400, {"error": {"message": "input is too long", "type": "invalid_request_error"}})
            elif mode == "quota":
                self._send(429, {"error": {"message": "You exceeded your current quota",
                                           "type": "insufficient_quota", "code": "insufficient_quota"}})
            elif kind == "embeddings":
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                self._send(200, {
                    "object": "list", "model": body.get("model", "stub"),
                    "data": [{"object": "embedding", "index": i, "embedding": hash_vector(t)}
                             for i, t in enumerate(inputs)],
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                })
            else:
                content = reply if reply is not None else _default_reply(body.get("messages", []))
                self._send(200, {
                    "id": "chatcmpl-stub", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "stub"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                })

    return Handler


class OpenAIStub:
    """``with OpenAIStub() as stub:`` — ``stub.base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self) -> None:
        self.state = StubState()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def set(self, **modes: str | float) -> None:
        self.state.update(modes)

    def requests(self, kind: str) -> list[dict[str, Any]]:
        with self.state.lock:
            return [r for r in self.state.requests if r["path"].endswith(kind)]

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.state.lock:
            self.state.closing = True
            self.state.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()
