"""One edited line touches only what changed: ≤ 2 chunks embedded, other rows kept with the right lines."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from memoryd.shared.embed.providers import HashProvider
from memoryd.shared.events import ChunkData
from memoryd.shared.index.chunking import Chunker
from memoryd.shared.index.store import IndexWriter

LINES = 2000


def log_lines() -> list[str]:
    return [f"- 0007.{j:04d} decided to move service {j} of team 7 to the new cluster; owner person-{(7 * j) % 97}"
            for j in range(LINES)]


def note_lines() -> list[str]:
    rng = random.Random(5)
    words = ["deploy", "review", "latency", "budget", "rollback", "cluster", "agent", "memory", "decided", "owner"]
    out: list[str] = []
    while len(out) < LINES:
        if rng.random() < 0.15:
            out += [f"## Topic {len(out)}", ""]
        out += [" ".join(rng.choice(words) for _ in range(rng.randint(6, 24))) for _ in range(rng.randint(1, 5))]
        out.append("")
    return out[:LINES]


def write(writer: IndexWriter, chunks: list[ChunkData]) -> None:
    vectors = {c.hash: m for c, m in zip(chunks, HashProvider().embed_chunks([c.text for c in chunks]), strict=True)}
    with writer.transaction():
        writer.replace_chunks("memory/log.md", "memory", chunks, vectors)


def rows(writer: IndexWriter) -> dict[int, tuple[int, int, str]]:
    return {cid: (s, e, t) for cid, s, e, t in writer.conn.execute("SELECT id, start_line, end_line, text FROM chunks")}


@pytest.mark.parametrize("make", [log_lines, note_lines], ids=["log", "notes"])
def test_one_inserted_or_deleted_line_embeds_at_most_two_chunks(make) -> None:  # noqa: ANN001
    chunker = Chunker()
    lines = make()
    before = {c.hash for c in chunker.chunk("\n".join(lines))}
    for i in random.Random(2).sample(range(1, LINES - 1), 25):
        for after in (lines[:i] + ["- a new line about the OPS-1 freeze"] + lines[i:], lines[:i] + lines[i + 1:]):
            new = {c.hash for c in chunker.chunk("\n".join(after))}
            assert len(new - before) <= 2, f"edit at line {i + 1}"


def test_an_insert_keeps_every_other_row_and_moves_its_lines(tmp_path: Path) -> None:
    chunker = Chunker()
    lines = log_lines()
    writer = IndexWriter(tmp_path / "main.sqlite")
    write(writer, chunker.chunk("\n".join(lines)))
    old = rows(writer)
    vectors_before = dict(writer.conn.execute("SELECT rowid, chunk_id FROM chunk_vectors"))
    edited = lines[:3] + ["- inserted at the top: the freeze moves to Thursday"] + lines[3:]
    write(writer, chunker.chunk("\n".join(edited)))
    new = rows(writer)
    assert len(new.keys() - old.keys()) <= 2 and len(old.keys() - new.keys()) <= 2  # rows rewritten
    moved = [cid for cid in old.keys() & new.keys() if old[cid][:2] != new[cid][:2]]
    assert len(moved) > 100  # every chunk below the insert, by line numbers only
    for cid in moved:
        assert new[cid][2] == old[cid][2] and new[cid][:2] == (old[cid][0] + 1, old[cid][1] + 1)
    for start, end, text in new.values():  # every row's lines are the file's lines
        assert "\n".join(edited[start - 1:end]) == text
    kept_vectors = {v for v, c in vectors_before.items() if c in new}
    assert kept_vectors <= set(dict(writer.conn.execute("SELECT rowid, chunk_id FROM chunk_vectors")))
    fts = writer.conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    assert fts == len(new)
    writer.close()


def test_a_repeated_chunk_keeps_the_row_at_its_own_lines(tmp_path: Path) -> None:
    """Two chunks with the same text: each row stays with the lines it had where they still match."""
    writer = IndexWriter(tmp_path / "main.sqlite")
    same = [ChunkData(hash="h", start_line=n, end_line=n, tokens=1, text="same") for n in (1, 5)]
    write(writer, same)
    before = {(s, e): cid for cid, (s, e, _) in rows(writer).items()}
    write(writer, [same[1]])  # the first copy deleted
    assert {(s, e): cid for cid, (s, e, _) in rows(writer).items()} == {(5, 5): before[(5, 5)]}
    assert np.array_equal(sorted(rows(writer)), [before[(5, 5)]])
    writer.close()
