"""One reading of the ``openai`` package's errors, for the embedding providers and the session LLM.

``insufficient_quota`` (a 429 that waiting does not cure) fails at once as ``QuotaExhausted``;
other 429s, 5xx, timeouts and connection errors are retryable; other 4xx are not.
"""

from __future__ import annotations

from typing import Any

from memoryd.shared.exceptions import ProviderError, QuotaExhausted


def is_quota(exc: BaseException) -> bool:
    """Whether an OpenAI error says the account's quota is used up (retrying cannot help)."""
    body = getattr(exc, "body", None)
    code = body.get("code") if isinstance(body, dict) else None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
    return code == "insufficient_quota" or "insufficient_quota" in str(exc)


def provider_error(name: str, exc: BaseException, openai: Any) -> ProviderError:
    """The ``ProviderError`` (or ``QuotaExhausted``) for an exception the ``openai`` client raised."""
    if isinstance(exc, openai.RateLimitError):
        if is_quota(exc):
            return QuotaExhausted(name, str(exc))
        return ProviderError(name, f"rate limited: {exc}", retryable=True)
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError | openai.InternalServerError):
        return ProviderError(name, f"{exc.__class__.__name__}: {exc}", retryable=True)
    if isinstance(exc, openai.APIStatusError):
        return ProviderError(name, f"HTTP {exc.status_code}: {exc.message}", retryable=exc.status_code >= 500)
    return ProviderError(name, f"{exc.__class__.__name__}: {exc}", retryable=False)
