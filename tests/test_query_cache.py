"""Nothing grows with the number of agents: the query service keeps at most
``maxOpenIndexes`` agent indexes open within ``cacheMegabytes``, and a worker (its memo, its
event log's files) at most WORKER_MEMO_ENTRIES per-agent objects; what falls out is closed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import psutil
from inline_index import index_now

from memoryd.services.query.agentindex import AgentIndex
from memoryd.services.query.cache import footprint
from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared import defaults as d
from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings
from memoryd.shared.events import FileDeleted
from memoryd.shared.log.eventlog import EventLog
from memoryd.shared.runtime.worker import WorkerContext

AGENTS = [f"agent{i}" for i in range(8)]


def _many_agents(tmp_path: Path, **query: int) -> Settings:
    entries = []
    for agent in AGENTS:
        ws = tmp_path / agent
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text(f"{agent} keeps notes about the lighthouse {agent}\n" * 40)
        entries.append({"id": agent, "workspace": str(ws)})
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "hash"}}, "list": entries},
                                  "memoryd": {"stateDir": str(tmp_path / "state"), "query": query}}))
    settings = load_settings(config, state_dir=tmp_path / "state")
    for agent in AGENTS:
        index_now(settings, agent)
    return settings


def _search_each(service: QueryService) -> dict[str, AgentIndex]:
    """Search every agent in turn; → the index each search used."""
    used = {}
    for agent in AGENTS:
        assert service.search(agent, SearchRequest(query="lighthouse")).results
        used[agent] = service.index(agent)  # the one that served it, still the most recent
    return used


def test_at_most_max_open_indexes_stay_open(tmp_path: Path) -> None:
    service = QueryService(_many_agents(tmp_path, maxOpenIndexes=3))
    held = _search_each(service)
    assert sorted(a for a, index in held.items() if index.is_open) == AGENTS[-3:]
    fds = psutil.Process().num_fds()
    for _ in range(3):
        _search_each(service)  # every agent again, reopened in turn
    assert psutil.Process().num_fds() <= fds
    service.close()
    assert all(not index.is_open for index in held.values())


def test_the_memory_budget_closes_the_least_recently_used(tmp_path: Path) -> None:
    settings = _many_agents(tmp_path)
    one = QueryService(settings)
    assert one.search(AGENTS[0], SearchRequest(query="lighthouse")).results
    size = footprint(one.index(AGENTS[0]))
    assert size > d.QUERY_CONNECTION_BYTES  # the page cache and the vectors
    one.close()
    budget = settings.memoryd.query.model_copy(update={"cache_megabytes": math.ceil(2.5 * size / 2**20)})
    service = QueryService(settings.model_copy(update={"memoryd": settings.memoryd.model_copy(
        update={"query": budget})}))  # room for two of these indexes, not three
    held = _search_each(service)
    assert [a for a, index in held.items() if index.is_open] == AGENTS[-2:]
    assert service.search(AGENTS[0], SearchRequest(query="lighthouse")).results  # reopened on demand


def test_a_worker_keeps_a_bounded_number_of_per_agent_objects(tmp_path: Path) -> None:
    closed: list[str] = []

    class Writer:
        def __init__(self, agent: str) -> None:
            self.agent = agent

        def close(self) -> None:
            closed.append(self.agent)

    ctx = WorkerContext(settings=load_settings(state_dir=tmp_path))
    agents = [f"agent{i}" for i in range(d.WORKER_MEMO_ENTRIES + 10)]
    for agent in agents:
        ctx.memo(f"writer:{agent}", lambda agent=agent: Writer(agent))
        ctx.memo("writer:agent0", lambda: Writer("never made again"))  # a busy agent stays
    assert len(ctx.cache) == d.WORKER_MEMO_ENTRIES
    assert closed == agents[1:11] and "writer:agent0" in ctx.cache


def test_the_event_log_keeps_a_bounded_number_of_agents_open(tmp_path: Path) -> None:
    """Every process that emits writes agents' logs and content stores: past the bound, the least
    recently written are closed, so the descriptors do not grow with the number of agents."""
    log = EventLog(load_settings(state_dir=tmp_path))

    def write(agents: range) -> int:
        for n in agents:
            log.append([FileDeleted(agent=f"agent{n}", path="memory/x.md", seq=n + 1)])
        return psutil.Process().num_fds()

    at_bound = write(range(d.WORKER_MEMO_ENTRIES))
    assert write(range(d.WORKER_MEMO_ENTRIES, 3 * d.WORKER_MEMO_ENTRIES)) <= at_bound
    log.close()
