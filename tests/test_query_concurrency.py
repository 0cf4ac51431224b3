"""Searches of one agent run at once: each in a snapshot of its own (services/query/agentindex.py).

A real index (the retrieval fixture workspace on the ``hash`` provider, indexed by
``index_now``), real threads: one search is held inside its snapshot while the indexer
commits a change and other searches of the same agent run, finish, and see that change.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from inline_index import index_now
from retrieval_set import build
from support import Run

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest, SearchResponse

#: A search on this corpus takes milliseconds: one that has not answered by then waits for another.
DEADLINE_S = 10
#: The held search is let go by then at the latest, after the others' deadlines.
HOLD_S = 3 * DEADLINE_S
DELETED = "memory/2026-01-29.md"  # the note that holds "atlas-docs-eu"


def _paths(answer: SearchResponse) -> set[str]:
    return {r.path for r in answer.results}


def _vector_search(service: QueryService, query: str) -> SearchResponse:
    return service.search("main", SearchRequest(query=query, fusion="vector", min_score=0, max_results=50))


def test_a_search_held_in_its_snapshot_blocks_no_other_and_each_sees_its_own_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = build(tmp_path, provider="hash")
    service = QueryService(settings)
    try:
        assert DELETED in _paths(_vector_search(service, "atlas-docs-eu"))  # the vectors are mapped
        inside, release = threading.Event(), threading.Event()
        in_snapshot = QueryService._in_snapshot

        def held(self: QueryService, *args: Any) -> Any:
            if threading.current_thread().name == "held":
                inside.set()
                assert release.wait(timeout=HOLD_S)
            return in_snapshot(self, *args)

        monkeypatch.setattr(QueryService, "_in_snapshot", held)
        first = Run(lambda: _vector_search(service, "atlas-docs-eu"), name="held", deadline=DEADLINE_S)
        try:
            assert inside.wait(timeout=DEADLINE_S)
            # While it holds its snapshot: the indexer deletes the note and adds another, and commits.
            workspace = settings.agent("main").workspace
            (workspace / DELETED).unlink()
            (workspace / "memory" / "2026-03-02.md").write_text(
                "# 2026-03-02\n- Ticket ZEBRA-7781: the zebra crossing widget is broken.\n", encoding="utf-8")
            index_now(settings, "main")
            # Searches of the same agent, begun after the commit, run to the end and see it.
            after = Run(lambda: _vector_search(service, "atlas-docs-eu"), name="after", deadline=DEADLINE_S).result()
            assert DELETED not in _paths(after)
            new = Run(lambda: service.search("main", SearchRequest(query="ZEBRA-7781", explain=True)),
                      name="new", deadline=DEADLINE_S).result()
            assert new.results[0].path == "memory/2026-03-02.md"
            assert new.results[0].explain.vector_rank is not None  # the vectors followed the commit too
            assert first.is_alive()  # all the while, the first search was still inside its snapshot
        finally:
            release.set()
        # The held search answers from the state its snapshot began in, vectors included: the
        # note deleted since is still there for it (a later generation's refresh left its view alone).
        assert DELETED in _paths(first.result())
    finally:
        service.close()


def test_what_the_first_search_loaded_is_frozen_out_of_the_collectors_walks(tmp_path: Path) -> None:
    """A full garbage collection walks every tracked object, holding the GIL: with the model loaded
    it stopped every search of the process for ~50 ms. After its first search the service freezes
    what is loaded (``gc.freeze``), once; a full collection then walks only what came after."""
    import gc

    settings = build(tmp_path, provider="hash")
    gc.unfreeze()  # what earlier tests of this process froze
    service = QueryService(settings)
    try:
        assert gc.get_freeze_count() == 0
        service.search("main", SearchRequest(query="atlas-docs-eu"))
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the libraries, the settings, the index's caches
        service.search("main", SearchRequest(query="quarterly budget review"))
        assert gc.get_freeze_count() <= frozen  # once: not again (a frozen object freed leaves the count)
        assert len(gc.get_objects(2)) < frozen / 10
    finally:
        service.close()
        gc.unfreeze()
