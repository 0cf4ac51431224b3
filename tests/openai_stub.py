"""An OpenAI-compatible HTTP server on loopback, for tests that drive the real ``openai`` client.

``/v1/embeddings`` returns deterministic feature-hash vectors; ``/v1/chat/completions``
returns a scripted reply (default: the user lines that state a rule or decision, or
``NO_REPLY``). ``POST /control`` switches failure modes at run time: ``{"embeddings":
"ok" | "500" | "429" | "quota"}``, ``{"chat": "ok" | "500"}``, ``{"reply": "text"}``,
``{"delay": seconds}`` (per embeddings request).
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


class StubState:
    def __init__(self) -> None:
        self.modes: dict[str, str] = {"embeddings": "ok", "chat": "ok"}
        self.reply: str | None = None
        self.delay = 0.0
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()


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

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

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
                with state.lock:
                    for key in ("embeddings", "chat"):
                        if key in body:
                            state.modes[key] = body[key]
                    if "reply" in body:
                        state.reply = body["reply"]
                    if "delay" in body:
                        state.delay = float(body["delay"])
                self._send(200, {"ok": True})
                return
            kind = "embeddings" if self.path.endswith("/embeddings") else "chat"
            with state.lock:
                state.requests.append({"path": self.path, "body": body})
                mode = state.modes[kind]
                reply = state.reply
                delay = state.delay if kind == "embeddings" else 0.0
            if delay:
                time.sleep(delay)
            if mode == "500":
                self._send(500, {"error": {"message": "stub is down", "type": "server_error"}})
            elif mode == "429":
                self._send(429, {"error": {"message": "slow down", "type": "rate_limit", "code": "rate_limit"}})
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
        with self.state.lock:
            for key, value in modes.items():
                if key == "reply":
                    self.state.reply = str(value)
                elif key == "delay":
                    self.state.delay = float(value)
                else:
                    self.state.modes[key] = str(value)

    def requests(self, kind: str) -> list[dict[str, Any]]:
        with self.state.lock:
            return [r for r in self.state.requests if r["path"].endswith(kind)]

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
