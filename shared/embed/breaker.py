"""A circuit breaker per embedding endpoint and process: a failing provider costs one failure, not one per job.

Closed, calls go through. A call that fails in a way waiting can cure (timeout, connection
error, 5xx, 429) or that says the quota is used up **opens** the breaker: for a cooldown
(``memorySearch.remote.cooldownSeconds``, doubled for each further failure in a row up to
``BREAKER_MAX_COOLDOWN_SECONDS``), at least as long as the server's ``Retry-After``, and
for ``QUOTA_COOLDOWN_SECONDS`` after ``insufficient_quota``. While it is open every call
fails at once with :class:`ProviderUnavailable`, which says why and when the provider is
tried again. After the cooldown it is **half-open**: one call (the probe) goes through
and the others keep failing fast until the probe answers; success closes it, failure
opens it again.

Breakers live in this process (:func:`breaker_for`), keyed by the endpoint (provider,
model and base URL): two agents on one endpoint share one, so a hung server is found
out once per process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from memoryd.shared import defaults as d
from memoryd.shared.exceptions import ProviderError, ProviderUnavailable, QuotaExhausted


class Breaker:
    def __init__(self, key: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self.clock = clock
        self.lock = threading.Lock()
        self.failures = 0  # in a row
        self.open_until: float | None = None  # clock time; None = closed
        self.probing = False
        self.last_error: str | None = None  # the last failure's own message

    @property
    def state(self) -> str:
        with self.lock:
            if self.open_until is None:
                return "closed"
            return "half-open" if self.probing or self.clock() >= self.open_until else "open"

    def before_call(self, provider: str) -> None:
        """Let a call through (the probe, when half-open), or raise ``ProviderUnavailable`` at once."""
        with self.lock:
            if self.open_until is None:
                return
            now = self.clock()
            failed = f"{self.failures} failure(s) in a row; last: {self.last_error}"
            if self.probing:
                raise ProviderUnavailable(provider, f"one call is probing it after {failed}", retry_at=time.time())
            if now >= self.open_until:
                self.probing = True
                return
            retry_at = time.time() + (self.open_until - now)
            raise ProviderUnavailable(provider, f"not called until {_clock(retry_at)} (in {self.open_until - now:.0f} "
                                                f"s) after {failed}", retry_at=retry_at)

    def succeeded(self) -> None:
        """The provider answered (maybe with an error that is the request's fault): close."""
        with self.lock:
            self.failures = 0
            self.open_until = None
            self.probing = False
            self.last_error = None

    def abandoned(self) -> None:
        """The call ended without an answer either way (a bug, an interrupt): let the next call probe."""
        with self.lock:
            self.probing = False

    def failed(self, error: ProviderError, cooldown: float) -> float:
        """Open for the cooldown this failure earns; → seconds open. Adds when to ``error``'s message."""
        with self.lock:
            self.failures += 1
            self.probing = False
            self.last_error = str(error)
            if isinstance(error, QuotaExhausted):
                seconds = d.QUOTA_COOLDOWN_SECONDS
            else:
                seconds = min(cooldown * 2 ** (self.failures - 1), max(d.BREAKER_MAX_COOLDOWN_SECONDS, cooldown))
                if error.retry_after is not None:
                    seconds = max(seconds, min(error.retry_after, d.QUOTA_COOLDOWN_SECONDS))
            self.open_until = self.clock() + seconds
        _annotate(error, f"not called again until {_clock(time.time() + seconds)} (in {seconds:.0f} s)")
        return seconds


def _clock(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%H:%M:%S UTC")


def _annotate(error: ProviderError, note: str) -> None:
    """Append ``note`` to the message ``str(error)`` gives (status and logs show it)."""
    error.args = (f"{error.args[0] if error.args else ''}; {note}",)


_BREAKERS: dict[str, Breaker] = {}
_LOCK = threading.Lock()


def breaker_for(key: str) -> Breaker:
    """This process's breaker of the endpoint ``key``."""
    with _LOCK:
        if key not in _BREAKERS:
            _BREAKERS[key] = Breaker(key)
        return _BREAKERS[key]
