"""One typed settings object, read from one JSON file and overridden by the environment.

The file's shape follows OpenClaw's ``openclaw.json``: ``agents.defaults.…`` and
``agents.list[]``. memoryd's own knobs (state dir, Redis, queues, server, LLM) live under
``memoryd``. Every setting, its default and the reason for it is in docs/configuration.md.

Build it once in each process's ``main()`` with :func:`load_settings` and pass it down.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from shared.exceptions import ConfigError

#: Chunk size in tiktoken tokens: OpenClaw's default, big enough for a paragraph of context.
DEFAULT_CHUNK_TOKENS = 400
#: Overlap between chunks, so a fact split across a boundary is whole in one of them.
DEFAULT_CHUNK_OVERLAP = 80
#: Debounce per file: an editor's burst of writes becomes one event once it has settled.
DEFAULT_DEBOUNCE_MS = 1500
#: Full reconcile period: catches anything inotify missed (OpenClaw #5827, #41606).
DEFAULT_RECONCILE_SECONDS = 300
#: Files bigger than this are not memory but an accident (a log dump); reported and skipped.
DEFAULT_MAX_FILE_BYTES = 8 * 1024 * 1024
#: OpenClaw's defaults for memory_search.
DEFAULT_MAX_RESULTS = 6
DEFAULT_MIN_SCORE = 0.35
#: memory_get returns at most this many lines per call: a whole big file would flood the context.
DEFAULT_MAX_READ_LINES = 2000
#: The seed's weighted fusion: meaning counts more than wording.
DEFAULT_VECTOR_WEIGHT = 0.7
DEFAULT_TEXT_WEIGHT = 0.3
#: Candidates taken from each side = maxResults × this.
DEFAULT_CANDIDATE_MULTIPLIER = 4
#: MiniLM reads at most 256 word pieces; longer chunks are embedded window by window.
DEFAULT_WINDOW_PIECES = 256
#: Session defaults from the seeds (SPEC §6).
DEFAULT_CONTEXT_WINDOW = 200_000
DEFAULT_RESERVE_TOKENS_FLOOR = 20_000
DEFAULT_SOFT_THRESHOLD_TOKENS = 4_000
DEFAULT_FLUSH_SYSTEM_PROMPT = "Session nearing compaction. Store durable memories now."
DEFAULT_FLUSH_PROMPT = "Write lasting notes to memory/YYYY-MM-DD.md; reply NO_REPLY if nothing to store."

#: "hash" is a deterministic non-semantic embedder for tests and for measuring pipeline overhead.
ProviderName = Literal["auto", "local", "openai", "openai-compatible", "hash", "none"]
FusionMode = Literal["rrf", "weighted"]


class _Model(BaseModel):
    """camelCase in the file (as OpenClaw writes it), snake_case in code; unknown keys are errors."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ChunkingSettings(_Model):
    tokens: int = Field(DEFAULT_CHUNK_TOKENS, ge=16, le=8000)
    overlap: int = Field(DEFAULT_CHUNK_OVERLAP, ge=0)

    @field_validator("overlap")
    @classmethod
    def _overlap_below_tokens(cls, value: int, info: Any) -> int:
        tokens = info.data.get("tokens", DEFAULT_CHUNK_TOKENS)
        if value >= tokens:
            raise ValueError(f"overlap ({value}) must be smaller than tokens ({tokens})")
        return value


class RemoteSettings(_Model):
    """An OpenAI(-compatible) embedding endpoint. The key is read from ``api_key_env``."""

    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = Field(64, ge=1, le=2048)
    timeout_seconds: float = Field(30.0, gt=0)
    max_retries: int = Field(4, ge=0, le=20)


class LocalSettings(_Model):
    window_pieces: int = Field(DEFAULT_WINDOW_PIECES, ge=32, le=512)
    window_overlap: int = Field(32, ge=0, le=128)
    batch_size: int = Field(32, ge=1, le=512)
    #: ONNX threads of the query service's model (workers always use one): a short query
    #: embeds in 4.8 ms on two threads against 6.5 ms on one, and without spin-waiting the
    #: second thread costs nothing when the workers need the core.
    query_threads: int = Field(2, ge=1, le=16)


class HybridSettings(_Model):
    vector_weight: float = Field(DEFAULT_VECTOR_WEIGHT, ge=0, le=1)
    text_weight: float = Field(DEFAULT_TEXT_WEIGHT, ge=0, le=1)
    candidate_multiplier: int = Field(DEFAULT_CANDIDATE_MULTIPLIER, ge=1, le=50)


class QuerySettings(_Model):
    max_results: int = Field(DEFAULT_MAX_RESULTS, ge=1, le=100)
    min_score: float = Field(DEFAULT_MIN_SCORE, ge=0, le=1)
    fusion: FusionMode = "rrf"
    hybrid: HybridSettings = HybridSettings()
    max_read_lines: int = Field(DEFAULT_MAX_READ_LINES, ge=1, le=1_000_000)


class SyncSettings(_Model):
    watch: bool = True
    watch_debounce_ms: int = Field(DEFAULT_DEBOUNCE_MS, ge=0, le=600_000)
    reconcile_seconds: float = Field(DEFAULT_RECONCILE_SECONDS, gt=0)
    max_file_bytes: int = Field(DEFAULT_MAX_FILE_BYTES, ge=1024)
    #: How often the embedder retries chunks whose vectors are missing (provider was down).
    vector_retry_seconds: float = Field(30.0, gt=0)


class ExtraPath(_Model):
    path: str
    source: str = "kb"


class MemorySearchSettings(_Model):
    provider: ProviderName = "auto"
    #: Tried in order after ``provider`` fails; e.g. ["openai", "local"].
    fallback: list[ProviderName] = []
    model: str | None = None
    remote: RemoteSettings = RemoteSettings()
    local: LocalSettings = LocalSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    query: QuerySettings = QuerySettings()
    sync: SyncSettings = SyncSettings()
    extra_paths: list[ExtraPath | str] = []


class MemoryFlushSettings(_Model):
    enabled: bool = True
    soft_threshold_tokens: int = Field(DEFAULT_SOFT_THRESHOLD_TOKENS, ge=0)
    system_prompt: str = DEFAULT_FLUSH_SYSTEM_PROMPT
    prompt: str = DEFAULT_FLUSH_PROMPT


class CompactionSettings(_Model):
    reserve_tokens_floor: int = Field(DEFAULT_RESERVE_TOKENS_FLOOR, ge=0)
    #: Recent turns kept verbatim after compaction, counted in tokens.
    keep_recent_tokens: int = Field(20_000, ge=0)
    memory_flush: MemoryFlushSettings = MemoryFlushSettings()


class SoftTrimSettings(_Model):
    max_chars: int = 4000
    head_chars: int = 1500
    tail_chars: int = 1500


class HardClearSettings(_Model):
    enabled: bool = True
    placeholder: str = "[Old tool result content cleared]"


class ContextPruningSettings(_Model):
    mode: Literal["off", "always", "cache-ttl"] = "always"
    #: Seconds the provider keeps its prompt cache (the seed writes it as a string).
    ttl: float = 600
    keep_last_assistants: int = 3
    soft_trim_ratio: float = 0.3
    hard_clear_ratio: float = 0.5
    soft_trim: SoftTrimSettings = SoftTrimSettings()
    hard_clear: HardClearSettings = HardClearSettings()


class SessionResetSettings(_Model):
    mode: Literal["daily", "idle", "both", "off"] = "daily"
    at_hour: int = Field(4, ge=0, le=23)
    idle_minutes: int = Field(120, ge=1)


class AgentDefaults(_Model):
    workspace: str = "~/clawd"
    context_window: int = Field(DEFAULT_CONTEXT_WINDOW, ge=1000)
    compaction: CompactionSettings = CompactionSettings()
    context_pruning: ContextPruningSettings = ContextPruningSettings()
    session: SessionResetSettings = SessionResetSettings()
    memory_search: MemorySearchSettings = MemorySearchSettings()


class AgentEntry(_Model):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    workspace: str | None = None
    extra_paths: list[ExtraPath | str] | None = None
    context_window: int | None = None
    compaction: CompactionSettings | None = None
    memory_search: MemorySearchSettings | None = None


class AgentsConfig(_Model):
    defaults: AgentDefaults = AgentDefaults()
    entries: list[AgentEntry] = Field(default_factory=lambda: [AgentEntry(id="main")], alias="list")


class LlmSettings(_Model):
    """Chat completions for flush, compaction and session notes; unset = extractive fallback."""

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = 60.0


class ServerSettings(_Model):
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=1, le=65535)


class MemorydSettings(_Model):
    state_dir: str = "~/.memoryd"
    redis_url: str | None = None
    #: Seconds a job may run before RQ kills it, and how long failed jobs are kept.
    job_timeout_seconds: int = 600
    failure_ttl_seconds: int = 7 * 24 * 3600
    job_retries: int = Field(3, ge=0, le=20)
    llm: LlmSettings = LlmSettings()
    server: ServerSettings = ServerSettings()


class Settings(_Model):
    agents: AgentsConfig = AgentsConfig()
    memoryd: MemorydSettings = MemorydSettings()
    #: Where the file came from, for messages. Not part of the file.
    source_file: str | None = Field(None, exclude=True)

    @property
    def state_dir(self) -> Path:
        return Path(self.memoryd.state_dir).expanduser()

    def index_path(self, agent_id: str) -> Path:
        return self.state_dir / "memory" / f"{agent_id}.sqlite"

    def agent_ids(self) -> list[str]:
        return [a.id for a in self.agents.entries]

    def agent(self, agent_id: str) -> AgentConfig:
        for entry in self.agents.entries:
            if entry.id == agent_id:
                return AgentConfig.merge(self.agents.defaults, entry)
        from shared.exceptions import UnknownAgent

        raise UnknownAgent(agent_id, self.agent_ids())


class AgentConfig(BaseModel):
    """One agent with the defaults applied: what every stage actually uses."""

    id: str
    workspace: Path
    extra_paths: list[ExtraPath]
    context_window: int
    compaction: CompactionSettings
    context_pruning: ContextPruningSettings
    session: SessionResetSettings
    memory_search: MemorySearchSettings

    @classmethod
    def merge(cls, defaults: AgentDefaults, entry: AgentEntry) -> AgentConfig:
        search = entry.memory_search or defaults.memory_search
        extra = entry.extra_paths if entry.extra_paths is not None else search.extra_paths
        workspace = entry.workspace or (defaults.workspace if entry.id == "main" else f"~/clawd-{entry.id}")
        return cls(
            id=entry.id,
            workspace=Path(workspace).expanduser(),
            extra_paths=[ExtraPath(path=p) if isinstance(p, str) else p for p in extra],
            context_window=entry.context_window or defaults.context_window,
            compaction=entry.compaction or defaults.compaction,
            context_pruning=defaults.context_pruning,
            session=defaults.session,
            memory_search=search,
        )


#: Environment variables that override the file, each mapped to its place in it.
ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "MEMORYD_STATE_DIR": ("memoryd", "stateDir"),
    "REDIS_URL": ("memoryd", "redisUrl"),
    "MEMORYD_REDIS_URL": ("memoryd", "redisUrl"),
    "MEMORYD_PROVIDER": ("agents", "defaults", "memorySearch", "provider"),
    "MEMORYD_MODEL": ("agents", "defaults", "memorySearch", "model"),
    "MEMORYD_EMBED_BASE_URL": ("agents", "defaults", "memorySearch", "remote", "baseUrl"),
    "MEMORYD_DEBOUNCE_MS": ("agents", "defaults", "memorySearch", "sync", "watchDebounceMs"),
    "MEMORYD_RECONCILE_SECONDS": ("agents", "defaults", "memorySearch", "sync", "reconcileSeconds"),
    "MEMORYD_VECTOR_RETRY_SECONDS": ("agents", "defaults", "memorySearch", "sync", "vectorRetrySeconds"),
    "MEMORYD_FUSION": ("agents", "defaults", "memorySearch", "query", "fusion"),
    "MEMORYD_LLM_BASE_URL": ("memoryd", "llm", "baseUrl"),
    "MEMORYD_LLM_MODEL": ("memoryd", "llm", "model"),
    "MEMORYD_HOST": ("memoryd", "server", "host"),
    "MEMORYD_PORT": ("memoryd", "server", "port"),
}


def _set_path(data: dict[str, Any], path: tuple[str, ...], value: str) -> None:
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Read the config file (``--config`` or ``MEMORYD_CONFIG``), apply the environment, validate."""
    env = os.environ if environ is None else environ
    path = config_file or env.get("MEMORYD_CONFIG")
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
    for name, where in ENV_OVERRIDES.items():
        if env.get(name):
            _set_path(data, where, env[name])
    if state_dir:
        _set_path(data, ("memoryd", "stateDir"), str(state_dir))
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid configuration in {path or 'environment'}: {problems}") from None
    ids = settings.agent_ids()
    if len(set(ids)) != len(ids):
        raise ConfigError(f"agents.list has duplicate ids: {ids}; give every agent its own id")
    settings.source_file = str(path) if path else None
    return _with_registered(settings)


#: Agents registered by `memoryd index --agent A --workspace W`, under the state dir.
REGISTRY_FILE = "agents.json"


def _with_registered(settings: Settings) -> Settings:
    registry = settings.state_dir / REGISTRY_FILE
    if not registry.exists():
        return settings
    try:
        entries = json.loads(registry.read_text(encoding="utf-8"))
        for agent_id, workspace in entries.items():
            settings = with_agent(settings, agent_id, Path(workspace))
    except (json.JSONDecodeError, AttributeError, ValidationError) as exc:
        raise ConfigError(f"agent registry {registry} is malformed ({exc}); fix or delete that file") from None
    return settings


def register_agent(settings: Settings, agent_id: str, workspace: Path) -> Settings:
    """Remember agent ``agent_id`` at ``workspace`` for every later process; → updated settings."""
    AgentEntry(id=agent_id)  # validates the id
    registry = settings.state_dir / REGISTRY_FILE
    entries = json.loads(registry.read_text(encoding="utf-8")) if registry.exists() else {}
    entries[agent_id] = str(workspace.resolve())
    registry.parent.mkdir(parents=True, exist_ok=True)
    tmp = registry.with_name(f".{registry.name}.{os.getpid()}")
    tmp.write_text(json.dumps(entries, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, registry)
    return with_agent(settings, agent_id, workspace.resolve())


def with_agent(settings: Settings, agent_id: str, workspace: Path) -> Settings:
    """Settings with agent ``agent_id`` registered at ``workspace`` (for ``memoryd index``)."""
    entries = [e for e in settings.agents.entries if e.id != agent_id]
    old = next((e for e in settings.agents.entries if e.id == agent_id), None)
    entry = (old or AgentEntry(id=agent_id)).model_copy(update={"workspace": str(workspace)})
    agents = settings.agents.model_copy(update={"entries": [*entries, entry]})
    return settings.model_copy(update={"agents": agents})
