"""A small Python client for the session HTTP API (``services/session_api.py``).

    with SessionClient("http://127.0.0.1:8765", agent="main") as client:
        client.append("chat-1", "user", "Always confirm before deleting mail.")
        context = client.context("chat-1")   # {"messages": [...], "tokens": ...}

``token``: the agent's bearer token (``memoryd agents token main``), which a server listening
beyond loopback requires.
"""

from __future__ import annotations

from typing import Any

import httpx

from memoryd.shared.exceptions import MemorydError


class SessionApiError(MemorydError):
    code = "session_api_error"

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.http_status = status
        self.code = code


class SessionClient:
    def __init__(self, base_url: str, agent: str = "main", *, timeout: float = 120.0, token: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.agent = agent
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport,
                                 headers=headers)

    def _path(self, session: str, tail: str = "") -> str:
        return f"/v1/agents/{self.agent}/sessions/{session}{tail}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.http.request(method, path, json=body)
        if response.is_error:
            try:
                error = response.json().get("error")
            except ValueError:
                error = None
            if isinstance(error, dict):
                raise SessionApiError(response.status_code, error.get("code", "error"), error.get("message", ""))
            raise SessionApiError(response.status_code, "error", response.text)
        return response.json()

    def append(self, session: str, role: str, text: str, **extra: Any) -> dict[str, Any]:
        """Append one turn; ``extra`` may hold ``name``, ``toolCallId``, ``toolCalls``, ``ts``."""
        return self._call("POST", self._path(session, "/messages"), {"role": role, "text": text, **extra})

    def context(self, session: str) -> dict[str, Any]:
        return self._call("GET", self._path(session, "/context"))

    def show(self, session: str) -> dict[str, Any]:
        return self._call("GET", self._path(session))

    def compact(self, session: str, focus: str | None = None) -> dict[str, Any]:
        return self._call("POST", self._path(session, "/compact"), {"focus": focus})

    def new(self, session: str) -> dict[str, Any]:
        return self._call("POST", self._path(session, "/new"))

    def reset(self, session: str) -> dict[str, Any]:
        return self._call("POST", self._path(session, "/reset"))

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> SessionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
