"""A node's leases and takeovers (shared/rebuild/takeover.py) on a real Redis, in one process:
the keeper takes what it can serve and nothing else, a take from another node is re-driven once,
and the queued index jobs of a node with no live process move to the shared lanes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from memoryd.shared.events import FileDeleted
from memoryd.shared.rebuild.takeover import Keeper, drain_dead_nodes
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.liveness import Heartbeat

pytestmark = pytest.mark.integration


def _as_node(settings, node: str):
    return settings.model_copy(update={"memoryd": settings.memoryd.model_copy(update={"node": node})})


def test_a_dead_nodes_index_jobs_move_to_the_shared_lanes(workspace: Path, make_settings, redis_url: str) -> None:
    settings, _ = make_settings(workspace, redis=redis_url)
    conn = redis.Redis.from_url(redis_url)
    while int(conn.info("server")["uptime_in_seconds"]) <= 5:  # liveness gives a young Redis 5 s of grace
        time.sleep(0.5)
    here = Bus(conn, settings)
    event = FileDeleted(agent="main", path="memory/x.md", seq=1).model_dump_json()
    for node in ("ghost", "living"):
        here.enqueue("index", [event], node=node, bulk=False)
        here.enqueue("index", [event], node=node, bulk=True)
    Heartbeat(conn, "living").beat()  # a process of node "living" is alive
    assert drain_dead_nodes(here) == 2
    assert [q.count for q in here.node_lanes("ghost")] == [0, 0]
    assert [q.count for q in here.node_lanes("living")] == [1, 1]
    assert (here.queues["index"].count, here.bulk["index"].count) == (1, 1)


def test_the_keeper_takes_what_it_can_serve_and_re_drives_a_takeover_once(
        workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> None:
    (workspace / "memory" / "a.md").write_text("- a fact\n")
    settings, _ = make_settings(workspace, redis=redis_url)
    conn = redis.Redis.from_url(redis_url)
    first, second = Bus(conn, _as_node(settings, "n1")), Bus(conn, _as_node(settings, "n2"))
    one, two = Keeper(first), Keeper(second)
    assert one.tick(first.settings) == (["main"], [])
    assert two.tick(second.settings) == ([], [])  # n1 holds it
    first.log([FileDeleted(agent="main", path="memory/a.md", seq=5)])  # n1 logged a change, then died
    conn.delete(f"memoryd:{settings.namespace}:owner:main")  # its lease expired
    gained, _ = two.tick(second.settings)
    assert gained == ["main"] and second.leases.owner("main").node == "n2"
    assert sum(q.count for q in second.node_lanes("n2")) == 1  # the change n1 never applied, re-driven here
    two.tick(second.settings)
    assert sum(q.count for q in second.node_lanes("n2")) == 1  # once
    assert one.tick(first.settings) == ([], ["main"])  # n1, back, finds it taken


def test_an_indexed_agent_whose_workspace_is_not_here_is_not_taken(
        workspace: Path, make_settings, redis_url: str, tmp_path: Path) -> None:
    settings, _ = make_settings(tmp_path / "elsewhere", redis=redis_url)  # a folder this node does not see
    settings.index_path("main").parent.mkdir(parents=True)
    settings.index_path("main").write_bytes(b"")  # the agent has an index: its files exist somewhere
    bus = Bus(redis.Redis.from_url(redis_url), settings)
    assert Keeper(bus).tick(settings) == ([], [])
    assert bus.leases.owner("main") is None


def test_a_node_that_cannot_reach_redis_writes_no_log(workspace: Path, make_settings) -> None:
    """No Redis, no token: the log append is never attempted (a partitioned owner stops writing)."""
    from memoryd.shared.log.eventlog import log_dir, segments
    from tests.conftest import CLOSED_REDIS_URL

    settings, _ = make_settings(workspace)
    bus = Bus(redis.Redis.from_url(CLOSED_REDIS_URL, socket_connect_timeout=1), settings)
    with pytest.raises(redis.ConnectionError):
        bus.log([FileDeleted(agent="main", path="memory/x.md", seq=1)])
    assert segments(log_dir(settings, "main")) == []


def test_a_rebuilt_index_keeps_the_newest_token_its_predecessor_saw(workspace: Path, make_settings,
                                                                    tmp_path: Path) -> None:
    """A side-by-side rebuild swaps in a new file: a late write under an older token is refused there too."""
    from memoryd.shared.exceptions import Fenced
    from memoryd.shared.index.store import META_FENCE, IndexWriter
    from memoryd.shared.rebuild.sidebyside import rebuild
    from tests.inline_index import index_now

    (workspace / "memory" / "a.md").write_text("- a fact\n")
    settings, _ = make_settings(workspace)
    index_now(settings, "main")
    writer = IndexWriter(settings.index_path("main"))
    writer.fence = 7
    with writer.transaction():
        pass
    writer.close()
    rebuild(settings, "main", embed=False)
    late = IndexWriter(settings.index_path("main"))
    assert late.meta(META_FENCE) == "7"
    late.fence = 6
    with pytest.raises(Fenced), late.transaction():
        pass
    late.close()
