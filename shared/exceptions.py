"""Every error memoryd raises on purpose. Messages carry the identifiers and the fix.

They become CLI exit codes, HTTP statuses and MCP errors only at the edge
(services/cli.py, services/query_http.py, services/mcp_server.py).
"""

from __future__ import annotations

#: ``typing.TYPE_CHECKING`` without importing ``typing`` (5 ms of a `memoryd search` answered by a server);
#: type checkers treat any name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Protocol

    class _Invalid(Protocol):
        """A pydantic ``ValidationError`` or FastAPI's ``RequestValidationError``."""

        def errors(self) -> Sequence[Any]: ...


class MemorydError(Exception):
    """Base class. ``code`` is the stable machine-readable name used by the HTTP API."""

    code = "memoryd_error"
    http_status = 500


class ConfigError(MemorydError):
    code = "invalid_config"
    http_status = 400


class UnknownAgent(MemorydError):
    code = "unknown_agent"
    http_status = 404

    def __init__(self, agent_id: str, known: list[str]) -> None:
        super().__init__(
            f"unknown agent {agent_id!r}; configured agents: {', '.join(known) or 'none'}. "
            "Add it with `memoryd agents add ID --workspace DIR` (or to agents.list in the config file)."
        )
        self.agent_id = agent_id


class PathRefused(MemorydError):
    """A memory_get path outside what the agent may read."""

    code = "path_refused"
    http_status = 403


class IndexMissing(MemorydError):
    code = "index_missing"
    http_status = 404


class SqliteExtensionUnavailable(MemorydError):
    code = "sqlite_vec_unavailable"


class ProviderError(MemorydError):
    """An embedding or chat provider failed. ``retryable`` says whether trying later can help."""

    code = "provider_error"
    http_status = 502

    def __init__(self, provider: str, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(f"provider {provider}: {message}")
        self.provider = provider
        self.retryable = retryable
        #: Seconds the provider asked us to wait (a 429's or 503's ``Retry-After``), if it said.
        self.retry_after = retry_after


class QuotaExhausted(ProviderError):
    """``insufficient_quota``: retrying cannot help until someone adds credit."""

    code = "quota_exhausted"

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(provider, f"{message} (quota exhausted: add credit or switch provider)", retryable=False)


class ProviderUnavailable(ProviderError):
    """The provider's circuit breaker is open: it failed moments ago and is not called again until
    ``retry_at`` (a Unix time). Nothing was sent; the message says why and when."""

    code = "provider_unavailable"
    http_status = 503

    def __init__(self, provider: str, message: str, *, retry_at: float) -> None:
        super().__init__(provider, message, retryable=True)
        self.retry_at = retry_at


class BadRequest(MemorydError):
    code = "bad_request"
    http_status = 400


class RedisUnavailable(MemorydError):
    code = "redis_unavailable"
    http_status = 503


class NotOwner(MemorydError):
    """This node does not hold the agent's lease: another node does, or none (shared/runtime/lease.py)."""

    code = "agent_elsewhere"
    http_status = 503

    def __init__(self, agent_id: str, owner: str | None, *, address: str | None = None) -> None:
        where = f"node {owner} holds its lease" if owner else "no live node holds its lease now"
        there = f" and answers at {address}" if address else ""
        super().__init__(f"agent {agent_id!r} is not this node's: {where}{there}; "
                         "ask that node, or wait: a node that can reach its data takes it within seconds")
        self.agent_id, self.owner, self.address = agent_id, owner, address


class Fenced(MemorydError):
    """A write whose fencing token is older than one the index or log has seen: a late write of an old owner."""

    code = "fenced"
    http_status = 409

    def __init__(self, agent_id: str, where: str, token: int, seen: int) -> None:
        super().__init__(f"agent {agent_id!r}: write refused by {where}: its fencing token {token} is older than "
                         f"{seen}, which it has seen; another node took the agent over, and this one stops writing it")
        self.agent_id, self.token, self.seen = agent_id, token, seen


class MemoryFileMissing(MemorydError):
    """memory_get of a path the agent may read but that does not exist (now)."""

    code = "not_found"
    http_status = 404


def validation_problems(exc: _Invalid) -> str:
    """A pydantic error as one line: ``field.path: message; …`` (no links, no input echo)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}" for e in exc.errors())
