"""The keyword side of memory_search: FTS5 candidates and a text score that means something.

Three traps of the seed are avoided here (docs/query.md):

- terms are joined with **OR**, not AND, so a natural-language question still matches;
- FTS5's ``bm25()`` is *negative* (more negative = better); it is only used to order
  candidates and, for the ``weighted`` mode, squashed as ``|bm25| / (1 + |bm25|)``;
- the calibrated text score is the IDF-weighted share of the query's terms that the
  chunk contains: 1.0 when every meaningful word is there, whatever the corpus size.

Identifiers (``E-404``, ``POSTGRES_URL``, ``2026-01-20``, ``api/v2/users``, ``v2.3.0``) are
phrases of several tokens or contain digits. They weigh more, and a chunk containing every
identifier of the query (in its text or its path) scores at least ``d.IDENTIFIER_FLOOR``.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.services.query import dates
from memoryd.services.query.dates import path_date
from memoryd.services.query.ranking import DateWindow
from memoryd.shared import defaults as d
from memoryd.shared.index import fts
from memoryd.shared.index.store import chunk_count

#: English function words: alone they match everything, so they are not searched for
#: (unless the query has nothing else). Content words are never in this list. The second
#: block is how people *ask* ("what's the latest…", "has anyone…", "how much…"): those words
#: say nothing about the note that answers (recall set, tune: R@1 0.547 → 0.553, keyword
#: side alone R@6 0.421 → 0.443).
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could", "did", "do", "does",
    "doing", "for", "from", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me",
    "my", "of", "on", "or", "our", "should", "so", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "why",
    "will", "with", "would", "you", "your", "about", "again", "any",
    "now", "latest", "current", "currently", "those", "days", "anyone", "anything", "everything", "someone",
    "something", "much", "many", "get", "got", "go", "went", "ever", "still", "just", "up", "out", "all",
    "some", "being", "one", "ones", "thing", "things", "she", "he", "her", "him", "his", "hers", "us", "also",
    "other", "else",
    # what is left of a negative contraction once its ending is cut (``didn't`` → ``didn``)
    "don", "doesn", "didn", "isn", "aren", "wasn", "weren", "won", "wouldn", "couldn", "shouldn", "haven",
    "hasn", "hadn", "ain",
})
#: English contraction and possessive endings (``what's``, ``Gareth's``, ``don't``, ``we've``):
#: cut before the words are read. Kept, ``gareth's`` was the phrase ``gareth s`` — an
#: identifier no note contains, weighing three words — and ``what's`` one too.
_CONTRACTION = re.compile(r"(?<=[^\W\d_])['’](?:s|t|re|ve|ll|d|m)\b", re.IGNORECASE)

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_TOKEN = re.compile(f"^[{fts.CJK}]$")
_HAN = re.compile(f"[{fts.HAN}]")
_KANA = re.compile(f"[{fts.KANA}]")
#: A Japanese word: a run of kanji, or of katakana (with its long-vowel mark).
_JAPANESE_WORD = re.compile(f"[{fts.HAN}]+|[{fts.KATAKANA}]+")
#: A query word that can name a file: letters/digits joined by - _ . / (a date, a version, a path).
_PATHLIKE = re.compile(r"[0-9A-Za-z]+(?:[-_./][0-9A-Za-z]+)+")


def normalise(text: str) -> str:
    """Lower case without diacritics: what ``unicode61 remove_diacritics 2`` compares."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


#: ASCII text to its tokens: every character that is not a lower-case letter or a digit becomes a space.
_ASCII_SPLIT = str.maketrans({chr(c): " " for c in range(128) if not chr(c).isdigit() and not "a" <= chr(c) <= "z"})


def token_string(text: str) -> str:
    """The text as FTS5 sees it, as `` tok tok … `` so a phrase is a substring test."""
    if text.isascii():  # its runs of [a-z0-9], in C: half the time of a regex findall
        return " " + " ".join(text.lower().translate(_ASCII_SPLIT).split()) + " "
    return " " + " ".join(_WORD.findall(normalise(fts.segment(text)))) + " "


#: Word endings cut before a word is matched as a prefix (``decided`` → ``decid*``): unicode61
#: does not stem, and a question rarely uses the tense or number of the note it looks for.
SUFFIXES = ("ing", "ed", "es", "s")


@dataclass(frozen=True)
class Term:
    phrase: str  # tokens separated by one space, normalised: an FTS5 phrase
    identifier: bool
    prefix: bool = False  # match any token starting with the (single-token) phrase

    @property
    def fts(self) -> str:
        """The term as an FTS5 query atom, quoted so no query text is read as syntax."""
        return '"' + self.phrase.replace('"', '""') + '"' + ("*" if self.prefix else "")

    @functools.cached_property
    def needle(self) -> str:
        """What a :func:`token_string` holding the term contains."""
        return f" {self.phrase}" if self.prefix else f" {self.phrase} "

    def found_in(self, tokens: str) -> bool:
        """Whether ``tokens`` (a :func:`token_string`) holds the term."""
        return self.needle in tokens


def _word_term(word: str) -> Term:
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= d.KEYWORD_MIN_PREFIX:
            return Term(word[: -len(suffix)], identifier=False, prefix=True)
    return Term(word, identifier=False, prefix=len(word) >= d.KEYWORD_MIN_PREFIX)


@dataclass(frozen=True)
class KeywordQuery:
    terms: tuple[Term, ...]
    #: Raw identifiers (``2026-01-20``) also looked for in chunk paths, lower case.
    path_fragments: tuple[str, ...]
    #: Only files dated inside this window (``after``/``before``); open = every file.
    window: DateWindow = DateWindow()

    @property
    def empty(self) -> bool:
        return not self.terms

    @functools.cached_property
    def has_identifier(self) -> bool:
        return any(t.identifier for t in self.terms)

    @property
    def codes_only(self) -> bool:
        """Every term is an identifier with a digit (``E-4711``, ``what was INC-2026-031?``, ``2026-01-20``):
        nothing an embedding model reads as words (in ``POSTGRES_URL`` or ``follow-up`` it does)."""
        return bool(self.terms) and all(t.identifier and any(ch.isdigit() for ch in t.phrase) for t in self.terms)


def parse(query: str, window: DateWindow | None = None) -> KeywordQuery:
    """The query's search terms: stop words dropped, CJK runs as overlapping bigrams.

    A CJK run (``部署方式``) is one phrase in ``memoryd.shared.index.fts.query_terms``; as a whole it
    matches only that exact run, so a question in Chinese would find nothing. Its bigrams
    (``部署``, ``署方``, ``方式``) find every chunk sharing a word with it; the share found is the score.
    """
    terms: list[Term] = []
    stop: list[Term] = []
    fragments = []
    # A date in words ("on 9 November, 2022") is one identifier, the part of a file's ISO date it
    # names, looked up in the paths too (that day's log): not the words and numbers it is written with.
    words = query
    for mention in reversed(dates.mentions(query)):
        terms.append(Term(mention.iso.replace("-", " "), identifier=True))
        fragments.append(mention.iso)
        words = words[:mention.start] + " " + words[mention.end:]
    for raw in fts.query_terms(_CONTRACTION.sub("", words)):
        tokens = _WORD.findall(normalise(raw))
        if not tokens:
            continue
        if all(_CJK_TOKEN.match(t) for t in tokens):
            terms.extend(cjk_terms(tokens))
            continue
        phrase = " ".join(tokens)
        if phrase in STOPWORDS:
            stop.append(Term(phrase, identifier=False))
        elif len(tokens) > 1 or any(ch.isdigit() for ch in phrase):
            terms.append(Term(phrase, identifier=True))
        else:
            terms.append(_word_term(phrase))
    unique = list({t.phrase: t for t in (terms or stop)}.values())
    for match in _PATHLIKE.finditer(query):
        fragment = match.group(0).lower()
        if len(fragment) >= d.MIN_PATH_FRAGMENT and any(ch.isdigit() for ch in fragment):
            fragments.append(fragment)
    return KeywordQuery(tuple(unique), tuple(dict.fromkeys(fragments)), window or DateWindow())


#: Chinese function words and question words: like English stop words they match everything.
CJK_STOPWORDS = frozenset({
    "的", "了", "吗", "呢", "吧", "是", "在", "有", "和", "与", "我",
    "我们", "你", "你们", "他", "她", "它", "他们", "哪", "哪天", "哪里",
    "哪个", "哪些", "哪家", "什么", "怎么", "怎样", "多少", "为什么", "谁",
    "时候", "什么时候", "现在", "最终", "最后", "一个", "这个", "那个", "这",
    "那", "都", "就", "也", "还", "要", "会", "能", "可以", "之前",
    "之后",
})


@functools.cache
def _jieba() -> Any:
    """jieba's tokenizer, loaded on the first Chinese or Japanese query (~1 s, its dictionary)."""
    import jieba

    jieba.setLogLevel(60)
    return jieba.Tokenizer()


def cjk_terms(chars: list[str]) -> list[Term]:
    """A CJK run's terms: its words, each a phrase of its characters, without function words;
    then the Chinese characters of those words, each a term of its own.

    The index stores every CJK character as a token, so a word is found wherever its
    characters stand together. Chinese words are jieba's (``cut_for_search``: a long word and
    its parts). Japanese (a run with kana) is cut where the script changes: its kanji runs and
    katakana runs are the words, the hiragana between them particles and endings (jieba's
    dictionary is Chinese: it cut ``在留期間の更新申請`` into ``留期間``, ``更新``, ``申請``). Overlapping
    bigrams (``数据库备份`` → ``数据 据库 库备 备份``) also made junk terms across word boundaries
    (``们最``, ``天搬``) whose high IDF drowned the real words; they remain the fallback when no
    word is found (a run of hiragana alone).
    A character of a word counts on its own because a note often says the same thing with
    another word sharing it (``柜子`` asked, ``衣柜`` and ``橱柜`` written; ``定做`` / ``定制``): a
    chunk with the word holds its characters too, one with only some of them gets part of the
    score, and IDF keeps common characters light.
    """
    run = "".join(chars)
    if _KANA.search(run):
        pieces = [w for w in _JAPANESE_WORD.findall(run) if w not in CJK_STOPWORDS]
        words = [w for w in pieces if len(w) > 1]
    else:
        pieces = words = [w for w in _jieba().cut_for_search(run) if len(w) > 1 and w not in CJK_STOPWORDS]
    characters = [ch for w in pieces for ch in w if _HAN.match(ch) and ch not in CJK_STOPWORDS]
    if not words and not characters:
        return [Term(" ".join(chars[i:i + 2]), identifier=False) for i in range(max(len(chars) - 1, 1))]
    return [Term(" ".join(w), identifier=False) for w in dict.fromkeys(words + characters)]


@dataclass
class TextEvidence:
    """The keyword side's view of one chunk."""

    rank: int | None  # 1-based BM25 rank, None if only its path matched
    bm25: float | None  # FTS5's raw (negative) score
    score: float  # calibrated 0..1


def prepare(conn: Any) -> None:
    """Set a new read connection up for the keyword side (outside any transaction: a
    snapshot's ROLLBACK would drop the vocabulary table again)."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.memoryd_vocab USING fts5vocab(main, chunks_fts, row)")
    conn.create_function("memoryd_path_date", 1, _sql_path_date, deterministic=True)


class Stats:
    """What the keyword side knows of one committed generation, shared by its searches: read
    when the generation is first seen, document frequencies and the newest date as asked (two
    searches asking at once compute the same value)."""

    def __init__(self, conn: Any) -> None:
        self.total = chunk_count(conn)
        self.trigram = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'file_paths'").fetchone() is not None
        self.df: dict[str, int] = {}
        self.newest: tuple[dt.date | None] | None = None


class KeywordSearcher:
    """Runs the keyword side on one search's connection (read-only, :func:`prepare`-d) and the
    :class:`Stats` of the generation its snapshot sees."""

    def __init__(self, conn: Any, stats: Stats) -> None:
        self.conn = conn
        self.stats = stats

    def newest_date(self) -> dt.date | None:
        """The date of the newest dated file in the index (read once per generation)."""
        if self.stats.newest is None:
            rows = self.conn.execute("SELECT path FROM files WHERE status = 'indexed'")
            dates = [d for (p,) in rows if (d := path_date(p)) is not None]
            self.stats.newest = (max(dates) if dates else None,)
        return self.stats.newest[0]

    def candidates(self, query: KeywordQuery, limit: int, source: str | None,
                   alone: bool = False) -> list[tuple[int, float]]:
        """(chunk id, bm25) of the best ``limit`` chunks by BM25 with the terms OR-ed.

        When every term is common the keyword side finds nothing the vector side would not,
        at a high cost, so it only searches (its rarest term) when it is ``alone``.
        """
        if query.empty:
            return []
        dfs = [self._document_frequency(t) for t in query.terms]
        searched = [t for t, df in zip(query.terms, dfs, strict=True) if df <= d.KEYWORD_COMMON_DF]
        if not searched and not alone:
            return []
        if not searched:
            searched = [query.terms[dfs.index(min(dfs))]]
        match = " OR ".join(t.fts for t in searched)
        if not source and query.window.open:
            return self._best_by_bm25(match, limit)
        where, params = "", [match]
        if source:
            where, params = " AND c.source = ?", [*params, source]
        if not query.window.open:
            where += " AND memoryd_path_date(c.path) BETWEEN ? AND ?"
            params += [str(query.window.after or dt.date.min), str(query.window.before or dt.date.max)]
        sql = (
            "SELECT chunks_fts.rowid, bm25(chunks_fts) AS b FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
            # equal BM25: by place, not by row id, so a rebuilt or replayed index ranks the same
            f"WHERE chunks_fts MATCH ?{where} ORDER BY b, c.path, c.start_line, c.end_line LIMIT ?"
        )
        return [(int(r), float(b)) for r, b in self.conn.execute(sql, (*params, limit))]

    def _best_by_bm25(self, match: str, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` best by BM25, equal scores by place, reading the place of only ``limit +
        d.KEYWORD_TIE_MARGIN`` rows (joining every match to its chunk row costs more than ranking them: 24 ms
        against 10 at 1M chunks), or of the rows of the score at the cut when equal scores run past those."""
        rows = self.conn.execute("SELECT rowid, bm25(chunks_fts) AS b FROM chunks_fts WHERE chunks_fts MATCH ? "
                                 "ORDER BY b LIMIT ?", (match, limit + d.KEYWORD_TIE_MARGIN)).fetchall()
        if len(rows) == limit + d.KEYWORD_TIE_MARGIN and rows[-1][1] <= rows[limit - 1][1]:
            # Equal scores run past the rows read: the first of the score at the cut by place, in SQL
            # (a tie can hold more rows than one statement takes parameters); CROSS JOIN keeps FTS5
            # the outer loop (the planner would walk every chunk by path and probe FTS5 for each).
            tie = rows[limit - 1][1]
            better = [r for r in rows if r[1] < tie]
            rows = better + [(r, tie) for (r,) in self.conn.execute(
                "SELECT c.id FROM chunks_fts CROSS JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ? "
                "AND bm25(chunks_fts) = ? ORDER BY c.path, c.start_line, c.end_line LIMIT ?",
                (match, tie, limit - len(better)))]
        marks = ",".join("?" * len(rows))
        places = {r[0]: r[1:] for r in self.conn.execute(
            f"SELECT id, path, start_line, end_line FROM chunks WHERE id IN ({marks})", [r[0] for r in rows])}
        rows = [r for r in rows if r[0] in places]
        rows.sort(key=lambda r: (r[1], *places[r[0]]))
        return [(int(r), float(b)) for r, b in rows[:limit]]

    def path_candidates(self, query: KeywordQuery, limit: int, source: str | None) -> list[int]:
        """Chunks whose path contains one of the query's identifiers (a date names a daily log)."""
        found: list[int] = []
        for fragment in query.path_fragments:
            if self.stats.trigram:  # the paths holding the fragment, from their trigrams
                sql = ("SELECT id, path FROM chunks WHERE path IN (SELECT f.path FROM file_paths p JOIN files f "
                       "ON f.rowid = p.rowid WHERE file_paths MATCH ? AND f.status = 'indexed')")
                params: list[Any] = ['"' + fragment.replace('"', '""') + '"']
            else:  # an index from before migration 4: every path is read
                escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                sql = ("SELECT id, path FROM chunks WHERE path IN (SELECT path FROM files WHERE status = 'indexed' "
                       "AND lower(path) LIKE ? ESCAPE '\\')")
                params = [f"%{escaped}%"]
            if source:
                sql += " AND source = ?"
                params.append(source)
            found += [r for (r, p) in self.conn.execute(sql + " ORDER BY path, start_line, end_line LIMIT ?",
                                                         (*params, limit))
                      if query.window.holds(p)]
        return list(dict.fromkeys(found))

    def weights(self, query: KeywordQuery) -> list[float]:
        """BM25's IDF of each term (× d.IDENTIFIER_WEIGHT for identifiers)."""
        n = max(self.stats.total, 1)
        out = []
        for term in query.terms:
            df = min(self._document_frequency(term), n)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            out.append(idf * (d.IDENTIFIER_WEIGHT if term.identifier else 1.0))
        return out

    def _document_frequency(self, term: Term) -> int:
        """Chunks holding the term's rarest token (for a prefix: the sum over its words; an upper
        bound either way, read from the FTS vocabulary without touching a document)."""
        df = self.stats.df.get(term.fts)
        if df is None:
            counts = []
            for token in term.phrase.split():
                if term.prefix:
                    row = self.conn.execute(
                        "SELECT coalesce(sum(doc), 0) FROM temp.memoryd_vocab WHERE term >= ? AND term < ?",
                        (token, token + "\U0010ffff"),
                    ).fetchone()
                else:
                    row = self.conn.execute("SELECT doc FROM temp.memoryd_vocab WHERE term = ?", (token,)).fetchone()
                counts.append(row[0] if row else 0)
            df = self.stats.df[term.fts] = min(counts)
        return df


def _sql_path_date(path: str) -> str | None:
    day = path_date(path)
    return None if day is None else day.isoformat()


def evidence(query: KeywordQuery, weights: Sequence[float], text: str, path: str,
             rank: int | None, bm25: float | None) -> TextEvidence:
    """The calibrated text score of one chunk: the weighted share of the terms it contains."""
    if query.empty:
        return TextEvidence(rank, bm25, 0.0)
    haystack = token_string(text)
    path_tokens = _path_tokens(path) if query.has_identifier else ""
    total = sum(weights) or 1.0
    matched = 0.0
    words, words_matched = 0.0, 0.0  # the terms that are not identifiers
    identifiers_found = True
    for term, weight in zip(query.terms, weights, strict=True):
        in_text = term.found_in(haystack)
        in_path = term.identifier and term.found_in(path_tokens)
        if in_text or in_path:
            matched += weight
        if term.identifier:
            identifiers_found = identifiers_found and (in_text or in_path)
        else:
            words += weight
            words_matched += weight if in_text else 0.0
    score = matched / total
    if query.has_identifier and identifiers_found:
        score = d.IDENTIFIER_FLOOR + (1.0 - d.IDENTIFIER_FLOOR) * (words_matched / words if words else 1.0)
    return TextEvidence(rank, bm25, min(score, 1.0))


@functools.lru_cache(maxsize=4096)
def _path_tokens(path: str) -> str:
    return token_string(path)


def squash_bm25(bm25: float | None) -> float:
    """The seed's text score with its sign bug fixed: |bm25| / (1 + |bm25|), in 0..1."""
    if bm25 is None:
        return 0.0
    magnitude = abs(bm25)
    return magnitude / (1.0 + magnitude)
