"""The environment: the one place memoryd reads ``os.environ``.

What each variable overrides is one table, :data:`OVERRIDES`; the settings loader applies it
(``loader.load_settings``) and the CLI's fast path asks :func:`config_file` and
:func:`state_dir` for the same precedence without loading the settings (pydantic alone takes a
few hundred milliseconds; asking a running server takes a few). Plain Python: nothing here
imports pydantic.

Precedence, highest first: the command line (``--config``, ``--state-dir``), the environment,
the config file, the defaults (``memoryd.shared.defaults``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from memoryd.shared import defaults as d

#: Each environment variable memoryd reads → the setting it overrides, in the config file's shape.
OVERRIDES: dict[str, tuple[str, ...]] = {
    "MEMORYD_STATE_DIR": ("memoryd", "stateDir"),
    "MEMORYD_REDIS_URL": ("memoryd", "redisUrl"),
    "MEMORYD_LOCAL_REDIS_URL": ("memoryd", "localRedisUrl"),
    "MEMORYD_NODE": ("memoryd", "node"),
    "MEMORYD_DATA_DIR": ("memoryd", "dataDir"),
    "MEMORYD_NAMESPACE": ("memoryd", "namespace"),
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
    "MEMORYD_ADVERTISE_URL": ("memoryd", "server", "advertiseUrl"),
}
#: The config file's variable (``--config`` wins over it).
CONFIG = "MEMORYD_CONFIG"
#: Every Redis client understands ``REDIS_URL``; ``MEMORYD_REDIS_URL`` wins over it.
REDIS_URL = "REDIS_URL"


def snapshot() -> dict[str, str]:
    """This process's environment, read once by each caller that needs it (a copy: never written back)."""
    return dict(os.environ)


def overrides(environ: Mapping[str, str]) -> list[tuple[tuple[str, ...], str]]:
    """The settings that ``environ`` sets, as (place in the file's shape, value)."""
    found = [(place, environ[name]) for name, place in OVERRIDES.items() if environ.get(name)]
    if environ.get(REDIS_URL) and not environ.get("MEMORYD_REDIS_URL"):
        found.append((OVERRIDES["MEMORYD_REDIS_URL"], environ[REDIS_URL]))
    return found


def config_file(explicit: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The config file a process uses: ``--config``, else ``$MEMORYD_CONFIG``, else none."""
    return explicit or (os.environ if environ is None else environ).get(CONFIG) or None


def state_dir(explicit: str | None, config: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The state dir with the settings' precedence (an unreadable config file: the default)."""
    chosen = explicit or (os.environ if environ is None else environ).get("MEMORYD_STATE_DIR")
    if not chosen and config:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            data = json.loads(Path(config).expanduser().read_text(encoding="utf-8"))
            chosen = data.get("memoryd", {}).get("stateDir")
    return Path(chosen or d.STATE_DIR).expanduser()


def model_cache(environ: Mapping[str, str] | None = None) -> Path:
    """Where the machine's optimised copies of models live (shared/embed/onnxshare.py):
    ``MEMORYD_MODEL_CACHE``, else ``$XDG_CACHE_HOME/memoryd/models``, else ``~/.cache/memoryd/models``."""
    env = os.environ if environ is None else environ
    if explicit := env.get("MEMORYD_MODEL_CACHE"):
        return Path(explicit)
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memoryd" / "models"


#: What the first query process of ``memoryd serve`` tells each helper it starts
#: (services/cli/serveprocs.py): the address to listen on, its own pid, the descriptor of the
#: shared page of connection and request counts, the helper's slot in it and the cores the
#: processes share (services/cli/servecores.py).
SERVE_HELPER = ("MEMORYD_SERVE_ADDRESS", "MEMORYD_SERVE_PARENT", "MEMORYD_SERVE_LOAD", "MEMORYD_SERVE_SLOT",
                "MEMORYD_SERVE_CPUS")


def serve_helper(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """In a helper query process: the :data:`SERVE_HELPER` variables it was started with; else None."""
    env = os.environ if environ is None else environ
    if SERVE_HELPER[0] not in env:
        return None
    return {name: env[name] for name in SERVE_HELPER}


def for_children(**overrides_: str) -> dict[str, str]:
    """The environment for a child process: this one's, with ``overrides_`` set."""
    return {**os.environ, **overrides_}
