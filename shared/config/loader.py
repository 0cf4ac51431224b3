"""Building the settings: the config file, the environment over it, the agent registry over both.

:func:`load_settings` is called once in each process's ``main()``; the environment is read there
(through :mod:`memoryd.shared.config.environment`) and kept on the settings, so a running process
that re-reads the registry (:func:`reload_agents`) finds the same API keys without reading it again.
:func:`with_registry` merges the registry's agents over the file's and refuses agents whose
folders overlap (:func:`check_isolation`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError

from memoryd.shared.config import environment, registry
from memoryd.shared.config.settings import AgentEntry, MemorySearchSettings, RemoteSettings, Settings
from memoryd.shared.exceptions import ConfigError, validation_problems


def _set_path(data: dict[str, Any], path: tuple[str, ...], value: str) -> None:
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _with_keys(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """Read every configured API key from its ``apiKeyEnv`` variable, once."""

    def keyed(remote: RemoteSettings) -> RemoteSettings:
        value = environ.get(remote.api_key_env)
        return remote.model_copy(update={"api_key": SecretStr(value) if value else None})

    def search_keyed(search: MemorySearchSettings) -> MemorySearchSettings:
        return search.model_copy(update={"remote": keyed(search.remote)})

    agents = settings.agents
    defaults_ = agents.defaults.model_copy(update={"memory_search": search_keyed(agents.defaults.memory_search)})
    entries = [e.model_copy(update={"memory_search": search_keyed(e.memory_search)}) if e.memory_search else e
               for e in agents.entries]
    llm_key = environ.get(settings.memoryd.llm.api_key_env)
    llm = settings.memoryd.llm.model_copy(update={"api_key": SecretStr(llm_key) if llm_key else None})
    return settings.model_copy(update={
        "agents": agents.model_copy(update={"defaults": defaults_, "entries": entries}),
        "memoryd": settings.memoryd.model_copy(update={"llm": llm}),
    })


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Read the config file (``--config`` or ``MEMORYD_CONFIG``), apply the environment, validate.

    Called once in each process's ``main()``; ``environ`` (tests) stands for the environment.
    """
    env = environment.snapshot() if environ is None else environ
    path = environment.config_file(str(config_file) if config_file else None, env)
    data: dict[str, Any] = {}
    if path:
        file = Path(path).expanduser()
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {file} does not exist; create it or drop --config") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config file {file} is not valid JSON: line {exc.lineno}: {exc.msg}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {file} must hold a JSON object at the top")
    for where, value in environment.overrides(env):
        _set_path(data, where, value)
    if state_dir:
        _set_path(data, ("memoryd", "stateDir"), str(state_dir))
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration in {path or 'environment'}: {validation_problems(exc)}") from None
    ids = settings.agent_ids()
    if len(set(ids)) != len(ids):
        raise ConfigError(f"agents.list has duplicate ids: {ids}; give every agent its own id")
    settings.source_file = str(path) if path else None
    settings.config_entries = list(settings.agents.entries)
    settings.environ = dict(env)
    return _with_keys(with_registry(settings), env)


def with_registry(settings: Settings, registered: registry.Entries | None = None) -> Settings:
    """``settings`` with the agents of the registry (shared/config/registry.py; ``registered``: these
    entries instead of the file's) over the config file's ``agents.list``: a registered agent
    is added, or replaces the fields it sets of the file's entry. Refuses agents whose folders
    overlap (registry.overlap)."""
    base = settings.config_entries if settings.config_entries is not None else settings.agents.entries
    entries = {e.id: e for e in base}
    if registered is None:
        registered = registry.read(settings.data_dir)
    for agent_id, fields in registered.items():
        try:
            new = AgentEntry.model_validate({**fields, "id": agent_id})
        except ValidationError as exc:
            raise ConfigError(f"agent registry {registry.path_of(settings.data_dir)}: agent {agent_id!r}: "
                              f"{validation_problems(exc)}; fix or remove that entry") from None
        old = entries.get(agent_id)
        if old is None and new.model_fields_set <= {"id", "cjk_memory"}:
            continue  # what memoryd noted of an agent the config file no longer has: not an agent
        update = {name: getattr(new, name) for name in new.model_fields_set - {"id"}}
        entries[agent_id] = old.model_copy(update=update) if old else new
    agents = settings.agents.model_copy(update={"entries": list(entries.values())})
    merged = settings.model_copy(update={"agents": agents, "config_entries": list(base)})
    check_isolation(merged)
    return merged


def reload_agents(settings: Settings) -> Settings:
    """The registry re-read by a running process (an agent was added, moved or removed), with
    the API keys of its agents' providers taken from the environment the settings were loaded with."""
    return _with_keys(with_registry(settings), settings.environ or {})


def with_published(settings: Settings, entry: AgentEntry) -> Settings:
    """``settings`` with one more agent, as its owner published it (its API key from this process's
    environment, as for every agent: keys are never published)."""
    agents = settings.agents
    added = settings.model_copy(update={"agents": agents.model_copy(update={"entries": [*agents.entries, entry]})})
    return _with_keys(added, settings.environ or {})


def with_cjk_memory(settings: Settings, agent_id: str) -> Settings:
    """``settings`` with the agent's memory noted as holding CJK text (as its owner published it)."""
    entries = [e.model_copy(update={"cjk_memory": True}) if e.id == agent_id else e for e in settings.agents.entries]
    return settings.model_copy(update={"agents": settings.agents.model_copy(update={"entries": entries})})


def check_isolation(settings: Settings) -> None:
    """ConfigError when two agents' folders overlap (see registry.overlap)."""
    places = {}
    for agent_id in settings.agent_ids():
        agent = settings.agent(agent_id)
        workspace = agent.workspace.resolve()
        extras = [Path(e.path).expanduser() for e in agent.extra_paths]
        places[agent_id] = (workspace, [(x if x.is_absolute() else workspace / x).resolve() for x in extras])
    problem = registry.overlap(places)
    if problem:
        raise ConfigError(problem)


def with_agent(settings: Settings, agent_id: str, workspace: Path) -> Settings:
    """Settings with agent ``agent_id`` registered at ``workspace`` (for ``memoryd index``)."""
    entries = [e for e in settings.agents.entries if e.id != agent_id]
    old = next((e for e in settings.agents.entries if e.id == agent_id), None)
    entry = (old or AgentEntry(id=agent_id)).model_copy(update={"workspace": str(workspace)})
    agents = settings.agents.model_copy(update={"entries": [*entries, entry]})
    return settings.model_copy(update={"agents": agents})
