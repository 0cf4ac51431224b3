"""One reading of the ``openai`` package's errors, for the embedding providers and the session LLM.

``insufficient_quota`` (a 429 that waiting does not cure) fails at once as ``QuotaExhausted``;
other 429s, 5xx, timeouts and connection errors are retryable; other 4xx are not. A 429's
or 503's ``Retry-After`` (seconds or an HTTP date; ``retry-after-ms`` too) travels with
the error as ``retry_after``.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import Any

from memoryd.shared.exceptions import ProviderError, QuotaExhausted


def is_quota(exc: BaseException) -> bool:
    """Whether an OpenAI error says the account's quota is used up (retrying cannot help)."""
    body = getattr(exc, "body", None)
    code = body.get("code") if isinstance(body, dict) else None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
    return code == "insufficient_quota" or "insufficient_quota" in str(exc)


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait before the next request (``Retry-After``), if it said."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None


def provider_error(name: str, exc: BaseException, openai: Any) -> ProviderError:
    """The ``ProviderError`` (or ``QuotaExhausted``) for an exception the ``openai`` client raised."""
    if isinstance(exc, openai.RateLimitError):
        if is_quota(exc):
            return QuotaExhausted(name, str(exc))
        return ProviderError(name, f"rate limited: {exc}", retryable=True, retry_after=retry_after(exc))
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError | openai.InternalServerError):
        return ProviderError(name, f"{exc.__class__.__name__}: {exc}", retryable=True, retry_after=retry_after(exc))
    if isinstance(exc, openai.APIStatusError):
        return ProviderError(name, f"HTTP {exc.status_code}: {exc.message}", retryable=exc.status_code >= 500,
                             retry_after=retry_after(exc))
    return ProviderError(name, f"{exc.__class__.__name__}: {exc}", retryable=False)
