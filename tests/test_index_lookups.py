"""What a search reads instead of scanning the index (store migration 4): the chunk count kept
in ``meta`` by triggers, file paths found through a trigram index, and the best BM25 rows
ordered by place without joining every match — each the same answer as the full scan."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.services.query import keyword
from memoryd.shared.events import ChunkData
from memoryd.shared.index import sqlitedb
from memoryd.shared.index.store import META_CHUNKS, IndexWriter


def _write(writer: IndexWriter, path: str, texts: list[str]) -> None:
    chunks = [ChunkData(hash=f"{path}:{i}:{t}", start_line=i + 1, end_line=i + 1, tokens=2, text=t)
              for i, t in enumerate(texts)]
    with writer.transaction():
        writer.upsert_file(path=path, source="memory", sha256=path, size=1, mtime=0, seq=1, status="indexed")
        writer.replace_chunks(path, "memory", chunks, {})


def _count(writer: IndexWriter) -> tuple[int, int]:
    (kept,) = writer.conn.execute("SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?", (META_CHUNKS,)).fetchone()
    (counted,) = writer.conn.execute("SELECT count(*) FROM chunks").fetchone()
    return kept, counted


def test_the_kept_chunk_count_follows_inserts_edits_and_deletes(tmp_path: Path) -> None:
    writer = IndexWriter(tmp_path / "main.sqlite")
    _write(writer, "memory/2026-01-01.md", ["one", "two", "three"])
    _write(writer, "memory/2026-01-02.md", ["four"])
    assert _count(writer) == (4, 4)
    _write(writer, "memory/2026-01-01.md", ["one", "three and a half"])  # one kept, one new, two gone
    assert _count(writer) == (3, 3)
    with writer.transaction():
        writer.delete_file_chunks("memory/2026-01-02.md")
    assert _count(writer) == (2, 2)
    writer.close()


def test_an_index_made_before_migration_4_gets_its_count_and_path_index(tmp_path: Path) -> None:
    path = tmp_path / "main.sqlite"
    writer = IndexWriter(path)
    _write(writer, "memory/2026-01-01.md", ["one", "two"])
    writer.close()
    _downgrade(path)
    writer = IndexWriter(path)  # migrates again
    assert _count(writer) == (2, 2)
    assert writer.conn.execute("SELECT path FROM file_paths WHERE file_paths MATCH '\"01-01\"'").fetchall() == \
        [("memory/2026-01-01.md",)]
    writer.close()


def _downgrade(path: Path) -> None:
    """The index as migration 3 left it."""
    conn = sqlitedb.connect(path)
    for trigger in ("chunks_counted_in", "chunks_counted_out", "file_paths_in", "file_paths_out"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE file_paths")
    conn.execute("DELETE FROM meta WHERE key = ?", (META_CHUNKS,))
    for column in ("last_line", "first_line"):  # migration 5
        conn.execute(f"ALTER TABLE chunk_vectors DROP COLUMN {column}")
    conn.execute("PRAGMA user_version = 3")
    conn.close()


@pytest.mark.parametrize("migrated", [True, False], ids=["trigram", "before-migration-4"])
def test_path_fragments_find_the_same_files_with_or_without_the_trigram_index(tmp_path: Path,
                                                                             migrated: bool) -> None:
    path = tmp_path / "main.sqlite"
    writer = IndexWriter(path)
    for name in ("memory/2026-01-20.md", "memory/2026-01-21.md", "kb/Release-v2.3.0.md", "memory/notes_2026.md"):
        _write(writer, name, ["a line", "another line"])
    writer.close()
    if not migrated:
        _downgrade(path)
    conn = sqlitedb.connect(path, readonly=True)
    keyword.prepare(conn)
    searcher = keyword.KeywordSearcher(conn, keyword.Stats(conn))
    rows = dict(conn.execute("SELECT id, path FROM chunks"))

    def files(query: str) -> set[str]:
        return {rows[c] for c in searcher.path_candidates(keyword.parse(query), 20, None)}

    assert files("what happened on 2026-01-20") == {"memory/2026-01-20.md"}
    assert files("release v2.3.0") == {"kb/Release-v2.3.0.md"}  # any case, anywhere in the path
    assert files("2026-01") == {"memory/2026-01-20.md", "memory/2026-01-21.md"}
    assert files("notes_2026") == {"memory/notes_2026.md"}  # '_' is a character, not a wildcard
    conn.close()


def test_equal_bm25_scores_are_ordered_by_place_past_the_rows_read(tmp_path: Path) -> None:
    """60 chunks of one text score the same: the 24 returned are the first by place, as the full
    join orders them, although only 24 + KEYWORD_TIE_MARGIN rows are read at first."""
    path = tmp_path / "main.sqlite"
    writer = IndexWriter(path)
    for n in reversed(range(30)):  # written in reverse: row ids run against place order
        _write(writer, f"memory/2026-02-{n + 1:02d}.md", ["the ferry timetable changed", "the ferry timetable changed"])
    _write(writer, "memory/2026-03-01.md", ["ferry ferry timetable"])  # better than the tie
    writer.close()
    conn = sqlitedb.connect(path, readonly=True)
    keyword.prepare(conn)
    searcher = keyword.KeywordSearcher(conn, keyword.Stats(conn))
    query = keyword.parse("ferry")
    found = searcher.candidates(query, 24, None)
    full = conn.execute("SELECT chunks_fts.rowid, bm25(chunks_fts) AS b FROM chunks_fts JOIN chunks c ON "
                        "c.id = chunks_fts.rowid WHERE chunks_fts MATCH ? ORDER BY b, c.path, c.start_line, "
                        "c.end_line LIMIT 24", ('"ferry"*',)).fetchall()
    assert found == [(int(r), float(b)) for r, b in full]
    assert len({b for _, b in found}) == 2  # the one better chunk, then the tie
    conn.close()
