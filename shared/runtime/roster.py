"""Agents as data: add, list and remove agents of an installation while it runs.

``memoryd agents add|list|remove|token`` (services/cli/agents.py) and ``memoryd index
--workspace`` change the registry (shared/config/registry.py); running processes follow it
without a restart: workers in ``WorkerContext.ensure_agent``, the query service and the
session routes through :class:`LiveSettings`, the watcher on its tick. What makes an
agent is its registry entry; removing one deletes what memoryd derived for it (its index,
its event log, its content store, its Redis keys, its token) and never its Markdown.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memoryd.shared.config import registry
from memoryd.shared.config.loader import check_isolation, reload_agents, with_agent, with_registry
from memoryd.shared.config.settings import AgentEntry, ExtraPath, Settings
from memoryd.shared.config.tokens import Tokens, agent_principal
from memoryd.shared.exceptions import ConfigError, UnknownAgent, validation_problems
from memoryd.shared.log.eventlog import content_path, log_dir

log = logging.getLogger("memoryd.agents")


def _validated_id(agent_id: str) -> str:
    try:
        return AgentEntry(id=agent_id).id
    except ValidationError as exc:
        raise ConfigError(f"agent id {agent_id!r} is not valid ({validation_problems(exc)}): use letters, digits, "
                          "'_', '.' and '-', starting with a letter or digit") from None


def _config_ids(settings: Settings) -> set[str]:
    return {e.id for e in (settings.config_entries or [])}


def add_agent(settings: Settings, agent_id: str, workspace: Path, extra_paths: list[ExtraPath],
              provider: str | None = None, model: str | None = None) -> Settings:
    """Register a new agent; → the settings with it. Refused (ConfigError) when the id is taken
    or invalid, or when its folders overlap another agent's (see registry.overlap)."""
    _validated_id(agent_id)
    entry: dict[str, Any] = {"workspace": str(workspace.expanduser().resolve())}
    if extra_paths:
        entry["extraPaths"] = [e.model_dump(by_alias=True) for e in extra_paths]
    if provider or model:
        search = settings.agents.defaults.memory_search.model_copy(
            update={k: v for k, v in (("provider", provider), ("model", model)) if v})
        entry["memorySearch"] = search.model_dump(by_alias=True, exclude_defaults=True, mode="json")
    added: list[Settings] = []

    def change(entries: registry.Entries) -> None:
        if agent_id in entries or agent_id in _config_ids(settings):
            raise ConfigError(f"agent {agent_id!r} exists already; pick another id, or `memoryd agents remove "
                              f"{agent_id}` first")
        entries[agent_id] = entry
        added.append(with_registry(settings, entries))  # validates the entry and refuses overlaps

    registry.update(settings.data_dir, change)
    return added[0]


def register_agent(settings: Settings, agent_id: str, workspace: Path) -> Settings:
    """Remember agent ``agent_id`` at ``workspace`` (``memoryd index --workspace``); its other
    registered fields are kept; → the updated settings."""
    _validated_id(agent_id)
    updated = with_agent(settings, agent_id, workspace.resolve())
    check_isolation(updated)

    def change(entries: registry.Entries) -> None:
        entries[agent_id] = {**entries.get(agent_id, {}), "workspace": str(workspace.resolve())}

    registry.update(settings.data_dir, change)
    return updated


def remove_agent(settings: Settings, agent_id: str) -> dict[str, Any]:
    """Unregister ``agent_id`` and delete its index, event log, content store and token; its
    workspace is left as it is. → what was removed. Redis keys: :meth:`Bus.forget`."""
    _validated_id(agent_id)
    if agent_id in _config_ids(settings):
        where = f"the config file {settings.source_file}" if settings.source_file else "the default configuration"
        raise ConfigError(f"agent {agent_id!r} comes from {where}, not the registry; remove it from agents.list "
                          "in a config file")

    def change(entries: registry.Entries) -> None:
        if agent_id not in entries:
            raise UnknownAgent(agent_id, settings.agent_ids())
        del entries[agent_id]

    workspace = settings.agent(agent_id).workspace if agent_id in settings.agent_ids() else None
    registry.update(settings.data_dir, change)
    index = settings.index_path(agent_id)
    content = content_path(settings, agent_id)
    removed = []
    for path in (index, Path(f"{index}-wal"), Path(f"{index}-shm"), index.with_name(f"{index.name}.rebuild"),
                 index.with_suffix(".vec"),  # the vector file beside the index, where there is one
                 index.with_name(f"{index.name}.swap.lock"),  # shared/rebuild/sidebyside.py's swap_lock
                 content, Path(f"{content}-wal"), Path(f"{content}-shm")):
        if path.exists():
            path.unlink()
            removed.append(str(path))
    # its event log, and the as-of snapshots built from it (shared/rebuild/replay.py's SNAPSHOTS)
    for folder in (log_dir(settings, agent_id), settings.data_dir / "snapshots" / agent_id):
        if folder.is_dir():
            shutil.rmtree(folder)
            removed.append(str(folder))
    Tokens(settings.data_dir).revoke(agent_principal(agent_id))
    return {"agent": agent_id, "removed": removed, "kept": str(workspace) if workspace else None}


def describe(settings: Settings) -> list[dict[str, Any]]:
    """Every agent: id, workspace, extraPaths, provider, where it is defined, index and token."""
    from memoryd.shared.embed import providers

    tokens = Tokens(settings.data_dir).issued()
    config_ids = _config_ids(settings)
    registered = registry.read(settings.data_dir)
    out = []
    for agent_id in settings.agent_ids():
        agent = settings.agent(agent_id)
        provider, model, _ = providers.describe(agent.memory_search)
        out.append({
            "id": agent_id,
            "workspace": str(agent.workspace),
            "extraPaths": [e.model_dump(by_alias=True) for e in agent.extra_paths],
            "provider": provider,
            "model": model,
            "definedIn": "registry" if agent_id in registered and agent_id not in config_ids else "config",
            "indexed": settings.index_path(agent_id).exists(),
            "token": agent_principal(agent_id) in tokens,
        })
    return out


class LiveSettings:
    """Settings whose agents follow the registry without a restart: :meth:`current` costs one
    ``stat`` and re-reads the registry only when it was written since."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._stamp = registry.UNREAD
        self._lock = threading.Lock()

    def current(self) -> Settings:
        """The settings, re-read if the registry changed; a registry that does not load (a hand
        edit gone wrong) is logged and the agents as they were go on serving."""
        stamp = registry.stamp(self._settings.data_dir)
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    self._stamp = stamp
                    try:
                        self._settings = reload_agents(self._settings)
                    except ConfigError as exc:
                        log.warning("agent registry not reloaded (the agents as they were go on): %s", exc)
        return self._settings
