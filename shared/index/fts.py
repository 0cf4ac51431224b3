"""Text segmentation for the FTS5 index, shared by the indexer (write) and the query service (read).

FTS5's ``unicode61`` tokenizer treats a run of Chinese or Japanese characters as one
token, so a keyword inside it is never found (OpenClaw #20730). We store a segmented
copy of each chunk: every CJK character becomes its own token, everything else is left
to ``unicode61``. A CJK query becomes a phrase of its characters, which FTS5 matches as
consecutive tokens — so ``部署`` finds ``以后部署都用Docker``, in Chinese and Japanese alike,
with no dictionary. Latin text, identifiers, dates and paths keep unicode61's behaviour.
"""

from __future__ import annotations

import re

#: Bumped whenever segmentation changes: it is part of the index fingerprint.
FTS_TOKENIZER = "unicode61+cjk1"

#: Chinese characters (kanji): CJK Extension A, Unified and Compatibility Ideographs (regex class bodies).
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
#: Katakana, full- and half-width (the long-vowel mark ー included).
KATAKANA = "\u30a0-\u30ff\uff66-\uff9f"
#: Hiragana and katakana.
KANA = "\u3040-\u309f" + KATAKANA
#: The character ranges segmented one character per token: kana, Chinese characters, Hangul syllables.
CJK = KANA + HAN + "\uac00-\ud7af"
_CJK_CHAR = re.compile(f"([{CJK}])")
_CJK_RUN = re.compile(f"[{CJK}]+")
#: What unicode61 keeps as token characters (letters, digits); everything else separates.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def segment(text: str) -> str:
    """The text as stored in ``chunks_fts``: CJK characters spaced apart."""
    return _CJK_CHAR.sub(r" \1 ", text)


def cjk_share(text: str) -> float:
    """The share of the text's letters (not spaces or punctuation) that are CJK characters."""
    letters = sum(map(str.isalnum, text))
    return len(_CJK_CHAR.findall(text)) / letters if letters else 0.0


def has_cjk(text: str) -> bool:
    return _CJK_CHAR.search(text) is not None


def query_terms(query: str) -> list[str]:
    """The query's terms as FTS5 phrases: words, and CJK runs as phrases of their characters.

    ``E-404`` → ``"e 404"`` (a phrase: the two tokens next to each other), ``部署方式`` →
    ``"部 署 方 式"``. Duplicates are dropped, order is kept.
    """
    terms: list[str] = []
    for raw in query.split():
        pieces: list[str] = []
        pos = 0
        for m in _CJK_RUN.finditer(raw):
            pieces.extend(_WORD.findall(raw[pos:m.start()]))
            if pieces:
                terms.append(" ".join(pieces))
                pieces = []
            terms.append(" ".join(m.group(0)))
            pos = m.end()
        pieces.extend(_WORD.findall(raw[pos:]))
        if pieces:
            terms.append(" ".join(pieces))
    seen: set[str] = set()
    unique = []
    for term in terms:
        key = term.lower()
        if key not in seen:
            seen.add(key)
            unique.append(term)
    return unique
