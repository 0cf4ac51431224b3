"""The OpenAI(-compatible) provider against the loopback stub: Retry-After, a small retry budget,
the circuit breaker (open, fail fast, half-open probe, close) and insufficient_quota."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import RemoteSettings
from memoryd.shared.embed.breaker import Breaker
from memoryd.shared.embed.providers import OpenAIProvider
from memoryd.shared.exceptions import ProviderError, ProviderUnavailable, QuotaExhausted
from tests.openai_stub import OpenAIStub
from tests.support import wait_until


@pytest.fixture
def stub():
    with OpenAIStub() as server:
        yield server


def provider(stub: OpenAIStub, **remote: float) -> OpenAIProvider:
    settings = RemoteSettings.model_validate({"baseUrl": stub.base_url, **remote})
    return OpenAIProvider("openai-compatible", "m", settings, "key")


def calls(stub: OpenAIStub) -> int:
    return len(stub.requests("/embeddings"))


def test_a_short_retry_after_is_waited_then_the_call_succeeds(stub: OpenAIStub) -> None:
    stub.set(embeddings="429", retry_after=1, times=1)
    (vector,) = provider(stub).embed_chunks(["hello"])
    assert vector.shape == (1, 64) and abs(float(np.linalg.norm(vector)) - 1) < 1e-5
    first, second = stub.requests("/embeddings")
    assert second["at"] - first["at"] >= 0.95  # the server's Retry-After, not the 0.5 s backoff


def test_a_long_retry_after_fails_at_once_and_keeps_the_breaker_open_that_long(stub: OpenAIStub) -> None:
    p = provider(stub, cooldownSeconds=1)
    stub.set(embeddings="429", retry_after=120)
    with pytest.raises(ProviderError, match="rate limited") as info:
        p.embed_chunks(["a"])
    assert calls(stub) == 1 and info.value.retry_after == 120  # not waited within the call
    assert "not called again until" in str(info.value)
    assert p.breaker.open_until is not None and p.breaker.open_until - p.breaker.clock() > 100
    with pytest.raises(ProviderUnavailable):
        p.embed_chunks(["a"])
    assert calls(stub) == 1


def test_5xx_is_retried_once_then_the_breaker_fails_calls_fast_until_a_probe_succeeds(stub: OpenAIStub) -> None:
    p = provider(stub, cooldownSeconds=0.3)
    stub.set(embeddings="500")
    with pytest.raises(ProviderError, match="gave up after 2 tries") as info:
        p.embed_chunks(["a"])
    assert info.value.retryable and calls(stub) == 2  # one retry: the default budget
    with pytest.raises(ProviderUnavailable, match="not called until .* after 1 failure") as fast:
        p.embed_query("b")
    assert calls(stub) == 2 and fast.value.retry_at > time.time()
    wait_until(lambda: p.breaker.state == "half-open", timeout=10, what="the cooldown to pass")
    with pytest.raises(ProviderError, match="gave up"):  # the probe fails: open again, twice as long
        p.embed_query("b")
    assert calls(stub) == 4 and p.breaker.failures == 2
    assert p.breaker.open_until is not None and p.breaker.open_until - p.breaker.clock() > 0.3
    stub.set(embeddings="ok")
    wait_until(lambda: p.breaker.state == "half-open", timeout=10, what="the doubled cooldown to pass")
    assert p.embed_query("b").shape == (64,)
    assert p.breaker.state == "closed" and p.breaker.failures == 0


def test_a_hung_provider_costs_one_timeout_then_calls_fail_fast(stub: OpenAIStub) -> None:
    p = provider(stub, timeoutSeconds=0.5, maxRetries=3)
    stub.set(embeddings="hang")
    with pytest.raises(ProviderError, match="Timeout"):
        p.embed_chunks(["a"])
    assert calls(stub) == 1  # a timeout is not retried, whatever maxRetries says
    for _ in range(5):
        with pytest.raises(ProviderUnavailable, match="Timeout"):
            p.embed_chunks(["a"])
    assert calls(stub) == 1


def test_while_the_probe_hangs_other_calls_fail_fast(stub: OpenAIStub) -> None:
    p = provider(stub, timeoutSeconds=3, cooldownSeconds=0.2)
    stub.set(embeddings="500", times=2)
    with pytest.raises(ProviderError):
        p.embed_query("a")
    stub.set(embeddings="hang")
    wait_until(lambda: p.breaker.state == "half-open", timeout=10, what="the cooldown to pass")
    probe = threading.Thread(target=p.embed_query, args=("probe",))
    probe.start()
    wait_until(lambda: calls(stub) == 3, timeout=10, what="the probe to reach the stub")
    with pytest.raises(ProviderUnavailable, match="probing"):
        p.embed_query("c")
    stub.set(embeddings="ok")  # the hung probe is answered
    probe.join(timeout=10)
    assert not probe.is_alive() and p.breaker.state == "closed"


def test_insufficient_quota_is_not_retried_and_opens_the_breaker_for_an_hour(stub: OpenAIStub) -> None:
    p = provider(stub, maxRetries=3, cooldownSeconds=0.1)
    stub.set(embeddings="quota")
    with pytest.raises(QuotaExhausted, match="add credit") as info:
        p.embed_chunks(["a"])
    assert not info.value.retryable and calls(stub) == 1
    assert p.breaker.open_until is not None
    assert p.breaker.open_until - p.breaker.clock() > d.QUOTA_COOLDOWN_SECONDS - 60
    stub.set(embeddings="ok")
    time.sleep(0.3)  # longer than cooldownSeconds: the quota cooldown is not the ordinary one
    with pytest.raises(ProviderUnavailable, match="add credit"):
        p.embed_chunks(["a"])
    assert calls(stub) == 1


def test_an_error_of_the_request_itself_does_not_open_the_breaker(stub: OpenAIStub) -> None:
    p = provider(stub)
    stub.set(embeddings="400", times=1)
    with pytest.raises(ProviderError, match="HTTP 400") as info:
        p.embed_query("a")
    assert not info.value.retryable and calls(stub) == 1 and p.breaker.state == "closed"
    assert p.embed_query("a").shape == (64,)


def test_two_providers_of_one_endpoint_share_one_breaker(stub: OpenAIStub) -> None:
    one, two = provider(stub), provider(stub)
    assert one.breaker is two.breaker
    stub.set(embeddings="hang")
    with pytest.raises(ProviderError):
        provider(stub, timeoutSeconds=0.3).embed_query("a")
    with pytest.raises(ProviderUnavailable):
        two.embed_query("a")


def test_breaker_states_with_a_clock() -> None:
    now = [100.0]
    breaker = Breaker("k", clock=lambda: now[0])
    error = ProviderError("p", "HTTP 503", retryable=True, retry_after=45)
    assert breaker.failed(error, cooldown=30) == 45  # Retry-After beats a shorter cooldown
    assert breaker.state == "open"
    now[0] += 45
    assert breaker.state == "half-open"
    breaker.before_call("p")  # the probe
    assert breaker.failed(ProviderError("p", "down", retryable=True), cooldown=30) == 60  # doubled
    now[0] += 60
    breaker.before_call("p")
    for _ in range(10):
        seconds = breaker.failed(ProviderError("p", "down", retryable=True), cooldown=30)
    assert seconds == d.BREAKER_MAX_COOLDOWN_SECONDS
    breaker.succeeded()
    assert breaker.state == "closed"
    breaker.before_call("p")


def test_a_plain_429_is_retried_after_a_short_backoff(stub: OpenAIStub) -> None:
    stub.set(embeddings="429", times=1)
    assert provider(stub).embed_query("a").shape == (64,)
    assert calls(stub) == 2
