"""The query service's engine: ``memory_search`` and ``memory_get`` for every configured agent.

One :class:`QueryService` per process (HTTP server, MCP server, CLI). It opens each agent's
index read-only and lazily (services/query/agentindex.py: one read transaction per search,
refreshed per committed generation, so it never blocks the indexer).

Search: the vector side (services/query/vectors.py) and the keyword side
(services/query/keyword.py) each return ``maxResults × candidateMultiplier`` candidates;
services/query/fusion.py scores their union. A search is one thread's work, in its turn
(services/query/turns.py): its question's embedding when an in-process model makes it, then in
its snapshot its keyword side, scan, fusion and snippets (services/query/question_embedding.py).
Reads: ``memory_get`` goes through ``Workspace.resolve`` (the path refusals) and reads the file
itself, never the index.
"""

from __future__ import annotations

import datetime as dt
import gc
import os
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memoryd.services.query import fusion, linescores, ranking, snippets, supersede
from memoryd.services.query import keyword as query_keyword
from memoryd.services.query.agentindex import AgentIndex, Snapshot, missing_index
from memoryd.services.query.cache import IndexCache
from memoryd.services.query.models import (
    AgentInfo,
    AgentsResponse,
    Explain,
    GetRequest,
    GetResponse,
    SearchRequest,
    SearchResponse,
    SearchResult,
)
from memoryd.services.query.question_embedding import Embedded, InTurn, QueryEmbedder, Vectors, VectorSide, settle
from memoryd.services.query.turns import Turns
from memoryd.services.query.vectors import VectorHit, single_blas_thread
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import AgentConfig, Settings
from memoryd.shared.config.workspace import NotRegularFile, Workspace, open_regular
from memoryd.shared.embed import providers
from memoryd.shared.exceptions import ConfigError, MemoryFileMissing, PathRefused
from memoryd.shared.runtime.roster import LiveSettings


@dataclass(frozen=True)
class _Search:
    """One memory_search request, resolved against the agent's settings."""

    agent: AgentConfig
    keyword: query_keyword.KeywordQuery
    mode: str
    limit: int
    source: str | None
    min_score: float
    max_results: int
    explain: bool
    anchors: fusion.Span  # the cosines that mean no and full vector evidence (fusion.anchors)


@dataclass
class _Late:
    """A search whose query embedding was not there when its keyword side was done."""

    side: _TextSide | None
    state: tuple[tuple[int, int] | None, str | None]  # the snapshot's (inode, generation)


def searches_at_once(processes: int) -> int:
    """Searches one of ``processes`` query processes runs at once: its share of the cores, at least one."""
    return max(1, d.SEARCHES_AT_ONCE // max(1, processes))


class QueryService:
    def __init__(self, settings: Settings, processes: int = 1) -> None:
        """``processes``: the query processes serving on this machine (``memoryd serve``), this one among them."""
        #: The agents follow the registry (``memoryd agents add/remove``) without a restart.
        self._live = LiveSettings(settings)
        self._seen = settings
        budget = settings.memoryd.query
        self._indexes = IndexCache(lambda agent_id: AgentIndex(self.settings.index_path(agent_id),
                                                                lambda: missing_index(self.settings, agent_id)),
                                   budget.cache_megabytes * 1024 * 1024, budget.max_open_indexes)
        #: Provider chains by memorySearch configuration: as many as there are configurations, not agents.
        self._providers: dict[str, list[providers.Provider]] = {}
        self._lock = threading.Lock()
        #: Query embeddings: cached; a remote endpoint's on threads of its own (services/query/question_embedding.py).
        self._embeddings = QueryEmbedder()
        #: Searches take turns on the index, one per core, first come first served (services/query/turns.py).
        self._turns = Turns(searches_at_once(processes), d.SEARCH_TURN_TIMEOUT_S)
        #: A big index's vector side runs on one of these while its search reads the keyword side.
        self._beside = ThreadPoolExecutor(max_workers=self._turns.slots, thread_name_prefix="memoryd-scan")
        #: Indexes of past moments (``asOf``) replayed from the log, most recently used last.
        self._past: dict[Path, AgentIndex] = {}
        #: Whether what the first search loaded is frozen out of the garbage collector's sight yet.
        self._frozen = False
        single_blas_thread()
        sys.setswitchinterval(d.QUERY_SWITCH_INTERVAL_S)

    # --- agents ------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        """The settings with the registry as it is now; a removed agent's index is closed."""
        current = self._live.current()
        if current is not self._seen:
            self._seen = current
            self._indexes.retain(set(current.agent_ids()))
        return current

    def agent(self, agent_id: str) -> AgentConfig:
        return self.settings.agent(agent_id)

    def index(self, agent_id: str) -> AgentIndex:
        self.agent(agent_id)  # unknown agent → UnknownAgent
        return self._indexes.get(agent_id)

    def _index_at(self, agent_id: str, as_of: str | None) -> AgentIndex:
        """The live index, or the index as it was at ``as_of``, replayed from the agent's log once
        per distinct state (``memoryd.shared.rebuild.replay.as_of_index``) and kept open while recent."""
        if as_of is None:
            return self.index(agent_id)
        self.agent(agent_id)
        from memoryd.shared.rebuild.replay import as_of_index  # only an asOf search needs the rebuild machinery

        path = as_of_index(self.settings, agent_id, as_of)
        with self._lock:
            index = self._past.pop(path, None) or AgentIndex(path)
            self._past[path] = index
            while len(self._past) > self.settings.memoryd.log.as_of_snapshots:
                self._past.pop(next(iter(self._past))).close()
        return index

    def agents(self) -> AgentsResponse:
        infos = []
        for agent_id in self.settings.agent_ids():
            path = self.settings.index_path(agent_id)
            chunks = self.index(agent_id).chunk_count() if path.exists() else None
            infos.append(AgentInfo(id=agent_id, workspace=str(self.agent(agent_id).workspace),
                                   indexed=path.exists(), chunks=chunks))
        return AgentsResponse(agents=infos)

    def close(self) -> None:
        self._embeddings.close()
        self._beside.shutdown(wait=True)
        self._indexes.close()
        for index in self._past.values():
            index.close()

    # --- memory_search -----------------------------------------------------------------
    def search(self, agent_id: str, request: SearchRequest) -> SearchResponse:
        agent = self.agent(agent_id)
        agent_index = self._index_at(agent_id, request.as_of)
        # While the index is rebuilt for the other local model (shared/index/languages.py), its own
        # model answers: the search keeps its vectors.
        served = providers.serving(agent.memory_search, agent_index.embedder())
        if served is not agent.memory_search:
            agent = agent.model_copy(update={"memory_search": served})
        search = agent.memory_search
        q = search.query
        max_results = request.max_results or q.max_results
        min_score = q.min_score if request.min_score is None else request.min_score
        mode = request.fusion or q.fusion
        source = None if request.source in (None, "all") else request.source
        limit = max_results * q.hybrid.candidate_multiplier
        provider_name, model, _ = providers.describe(search)
        window = ranking.DateWindow(request.after, request.before)
        keyword = query_keyword.parse(request.query, window)
        # fusion "vector" asks for the vector side's own scores: codes or not, they are shown
        span = fusion.anchors(provider_name, request.query, codes_only=keyword.codes_only and mode != "vector")
        plan = _Search(agent, keyword, mode, limit, source, min_score, max_results, request.explain, span)
        # A remote provider's embedding starts now, before the turn, on its endpoint's own thread;
        # an in-process model's is made in the turn, on this thread.
        asked = self._embedding(agent, request.query) if mode != "keyword" else Vectors(None, None)
        started = time.monotonic()
        with self._turns.turn() as ticket:
            embedding = self._embeddings.now(asked) if isinstance(asked, InTurn) else asked
            with agent_index.snapshot() as index:
                found = self._in_snapshot(index, plan, embedding, None)
        if isinstance(found, _Late):
            # Not embedded yet: wait (up to embedTimeoutMs from the start) outside the snapshot, then
            # answer in a new snapshot — with vectors, or from keywords and the reason.
            assert isinstance(embedding, Future)
            embedding = settle(embedding, started + q.embed_timeout_ms / 1000 - time.monotonic(), q.embed_timeout_ms)
            with self._turns.turn(back=ticket), agent_index.snapshot() as index:
                found = self._in_snapshot(index, plan, embedding, found)
        assert not isinstance(found, _Late)  # a settled embedding is never late
        results, vectors, text_side = found
        vector_side = vectors.query is not None
        answered = "hybrid" if vector_side and text_side else ("vector-only" if vector_side else "keyword-only")
        gone = None if agent.workspace.is_dir() else (
            f"agent {agent_id}'s workspace {agent.workspace} does not exist: these results come from its index, "
            "and their files may be gone; fix the agent's workspace or restore the folder")
        if not self._frozen:
            self._freeze()
        return SearchResponse(results=results, provider=provider_name, model=model, mode=answered,
                              fusion=mode, reason=vectors.reason, warning=gone)

    def _freeze(self) -> None:
        """Once, after the first search: what it loaded for good (the model's tokenizer and
        vocabulary, the libraries, the index's caches) moves out of the garbage collector's
        generations (``gc.freeze``). A full collection walked all of it, holding the GIL: 45–56 ms
        here with the model loaded, every search of the process stopped meanwhile; 0.4–0.6 ms after."""
        self._frozen = True
        gc.collect()
        gc.freeze()

    def _in_snapshot(self, index: Snapshot, s: _Search, embedding: Future[Embedded] | Vectors,
                     late: _Late | None) -> tuple[list[SearchResult], Vectors, bool] | _Late:
        """Both sides and their fusion in one snapshot; ``_Late`` when the embedding is not there yet
        (``late``: what the first snapshot found, reused if the index did not change since)."""
        pending = self._vector_side(s.agent, index, embedding, ranking.depth(s.limit, s.keyword.window), s.source)
        state = (index.identity, index.generation)
        side = _TextSide(cands={}, rows={}, weights=[])
        if late is not None and late.side is not None and late.state == state:
            side = late.side
        elif s.mode != "vector":
            side = self._text_side(index, s.keyword, s.limit, s.source, alone=not isinstance(pending, VectorSide))
        vectors = pending.scanned() if isinstance(pending, VectorSide) else pending
        if vectors is None:
            return _Late(side if s.mode != "vector" else None, state)
        text_side = s.mode != "vector"
        if vectors.query is None and (not text_side or isinstance(pending, VectorSide)):
            # No vectors after all (vector mode without them, or the provider failed): keyword alone.
            side = self._text_side(index, s.keyword, s.limit, s.source, alone=True)
            text_side = True
        cands = side.cands
        for hit in vectors.hits:
            c = cands.setdefault(hit.chunk_id, fusion.Candidate(hit.chunk_id))
            c.vector, c.vector_rank = hit.score, hit.rank
        newcomers = [cid for cid in cands if cid not in side.rows]
        side.rows.update(index.chunks(newcomers))
        _rank_ties_by_place(vectors.hits, cands, side.rows)
        if text_side:
            _evidence(side, s.keyword, newcomers)
        decays = s.agent.memory_search.query.temporal_decay.enabled
        newest = index.keyword.newest_date() if index.keyword and decays else None  # read per write: only when used
        results = self._score(index, cands, side.rows, side.weights, s, text_side, vectors.query, newest)
        return results, vectors, text_side

    def _score(self, index: Snapshot, cands: dict[int, fusion.Candidate], rows: dict[int, ranking.ChunkRow],
               weights: list[float], s: _Search, text_side: bool,
               question: np.ndarray | None, newest: dt.date | None) -> list[SearchResult]:
        """Fuse every candidate's scores, rank and widen (services/query/ranking.py); build results
        (snippets, from the lines' nearness to the ``question``'s vector where known) only for the
        ones returned."""
        query = s.agent.memory_search.query
        vector_side = question is not None
        sides = int(text_side) + int(vector_side)
        for c in cands.values():
            if s.mode == "weighted":
                c.fused = fusion.weighted(c, query.hybrid.vector_weight if vector_side else 0.0,
                                          query.hybrid.text_weight if text_side else 0.0,
                                          query_keyword.squash_bm25(c.bm25))
            else:
                c.fused = fusion.calibrated_rrf(c, sides, s.anchors)
        chosen = ranking.select(cands, rows, query, s.keyword.window, newest, s.min_score, s.max_results)
        if query.passages.enabled and query.passages.widen:
            ranking.widen(chosen, index.around, query.passages.max_tokens)
        near = linescores.nearness(index, index.vector_index(), question, chosen, s.anchors) if vector_side \
            else [None] * len(chosen)
        results = []
        for passage, lines_near in zip(chosen, near, strict=True):
            c, text = cands[passage.best], passage.text
            results.append(SearchResult(
                path=passage.path, start_line=passage.start_line, end_line=passage.end_line,
                score=round(c.fused, 4), source=rows[passage.best].source,
                snippet=snippets.snippet(text, s.keyword.terms, weights,
                                         rows[passage.best].start_line - passage.start_line, lines_near),
                explain=_explain(c) if s.explain else None,
            ))
        if not query.supersede:
            return results
        return supersede.order(results, [p.text for p in chosen], [t.phrase for t in s.keyword.terms])

    def _text_side(self, index: Snapshot, query: query_keyword.KeywordQuery, limit: int, source: str | None,
                   alone: bool) -> _TextSide:
        """The keyword side's candidates, their rows and their text scores."""
        hits, by_path = self._keyword(index, query, limit, source, alone)
        cands: dict[int, fusion.Candidate] = {}
        for rank, (cid, bm25) in enumerate(hits, start=1):
            c = cands.setdefault(cid, fusion.Candidate(cid))
            c.text_rank, c.bm25 = rank, bm25
        for cid in by_path:
            cands.setdefault(cid, fusion.Candidate(cid))
        weights = index.keyword.weights(query) if index.keyword else []
        side = _TextSide(cands=cands, rows=index.chunks(list(cands)), weights=weights)
        _evidence(side, query, list(cands))
        return side

    @staticmethod
    def _keyword(index: Snapshot, query: query_keyword.KeywordQuery, limit: int, source: str | None,
                 alone: bool) -> tuple[list[tuple[int, float]], list[int]]:
        assert index.keyword is not None
        return (index.keyword.candidates(query, limit, source, alone=alone),
                index.keyword.path_candidates(query, limit, source))

    def _embedding(self, agent: AgentConfig, text: str) -> Future[Embedded] | InTurn | Vectors:
        """The query's embedding: started (a remote provider), found in the cache, or to make in the
        search's turn (an in-process model); or why there can be none."""
        try:
            chain = self._chain(agent)
        except ConfigError as exc:
            return Vectors(None, f"no embedding provider: {exc}")
        if not chain:
            return Vectors(None, "embedding provider is 'none': answered by keyword")
        return self._embeddings.start(chain, text)

    def _vector_side(self, agent: AgentConfig, index: Snapshot, embedding: Future[Embedded] | Vectors,
                     limit: int, source: str | None) -> VectorSide | Vectors:
        """The scan of the index's vectors once the query is embedded (on this thread); or why there is none."""
        if isinstance(embedding, Vectors):
            return embedding
        matrix = index.vector_index()
        if matrix is not None and matrix.reason:
            return Vectors(None, f"{matrix.reason}: answered by keyword")
        if matrix is None or not len(matrix):
            return Vectors(None, f"index of agent {agent.id!r} has no vectors yet: answered by keyword")
        made_by = self._chain(agent)[0].embedder
        if providers.vector_space(made_by) != providers.vector_space(index.embedder or ""):
            return Vectors(None, f"index holds vectors of {index.embedder!r}, the configured provider makes "
                                 f"{made_by!r}; they are not mixed. Rebuild with `memoryd index "
                                 f"--agent {agent.id}` (keyword-only until then)")
        beside = self._beside if len(matrix) >= d.VECTORS_BESIDE_ROWS else None
        return VectorSide(embedding, lambda query: matrix.search(query, limit, source), beside)

    def _chain(self, agent: AgentConfig) -> list[providers.Provider]:
        key = agent.memory_search.model_dump_json()
        with self._lock:
            if key not in self._providers:
                self._providers[key] = providers.resolve(agent.memory_search, for_queries=True)
            return self._providers[key]

    # --- memory_get --------------------------------------------------------------------
    def get(self, agent_id: str, request: GetRequest) -> GetResponse:
        agent = self.agent(agent_id)
        found = Workspace(agent).resolve(request.path)
        lines = _read_lines(found.absolute, request.path)
        cap = agent.memory_search.query.max_read_lines
        start = request.from_ - 1
        if start >= len(lines) and lines:
            return GetResponse(path=found.path, text="",
                               note=f"{found.path} has {len(lines)} lines; from={request.from_} is past its end")
        wanted = len(lines) - start if request.lines is None else request.lines
        count = min(wanted, cap)
        text = "\n".join(lines[start:start + count])
        if count < wanted and start + count < len(lines):
            return GetResponse(path=found.path, text=text, truncated=True, next_from=request.from_ + count,
                               note=f"read capped at {cap} lines (memorySearch.query.maxReadLines); continue "
                                    f"with from={request.from_ + count}")
        return GetResponse(path=found.path, text=text)


@dataclass
class _TextSide:
    cands: dict[int, fusion.Candidate]
    rows: dict[int, ranking.ChunkRow]
    weights: list[float]


def _evidence(side: _TextSide, query: query_keyword.KeywordQuery, ids: list[int]) -> None:
    """Text scores of the candidates ``ids`` (calibrated share of the query's terms they hold)."""
    for cid in ids:
        row = side.rows.get(cid)
        if row is None:
            continue
        c = side.cands[cid]
        ev = query_keyword.evidence(query, side.weights, row.text, row.path, c.text_rank, c.bm25)
        c.text = ev.score


def _rank_ties_by_place(hits: list[VectorHit], cands: dict[int, fusion.Candidate],
                        rows: dict[int, ranking.ChunkRow]) -> None:
    """Vector ranks with equal scores ordered by place (path, lines), not by row id, so an index
    rebuilt or replayed from the log ranks exactly as the live one."""
    def place(hit: VectorHit) -> tuple[float, str, int, int]:
        row = rows.get(hit.chunk_id)
        return (-hit.score, row.path, row.start_line, row.end_line) if row else (-hit.score, "", 0, 0)

    for rank, hit in enumerate(sorted(hits, key=place), start=1):
        cands[hit.chunk_id].vector_rank = rank


def _read_lines(absolute: Path, path: str) -> list[str]:
    """The file's lines. Opened without following a symlink swapped in after the checks and
    without blocking on a FIFO, and checked to be a regular file before a byte is read."""
    try:
        fd = open_regular(absolute)
    except FileNotFoundError:
        raise MemoryFileMissing(f"memory file {path!r} does not exist; memory_search lists the files that do") \
            from None
    except NotRegularFile as exc:
        raise PathRefused(f"path {path!r} is {exc}") from None
    except OSError as exc:
        raise PathRefused(f"path {path!r} cannot be opened as a regular file ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PathRefused(f"path {path!r} is not UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it does not start another
    return lines


def _explain(c: fusion.Candidate) -> Explain:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 4)

    return Explain(vector=r(c.vector), vector_rank=c.vector_rank, text=r(c.text), text_rank=c.text_rank,
                   bm25=r(c.bm25), fused=round(c.fused, 4), weight=None if c.weight == 1.0 else r(c.weight))
