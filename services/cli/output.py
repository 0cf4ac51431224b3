"""What commands print for programs (``--json``): one JSON object on stdout whose field names are
camelCase, as the HTTP API's and MCP's are (``filesSkipped``, ``chunksEmbedded``, ``stateDir``).

The dicts that shared/ and the commands build keep Python's snake_case, and config keys and
files on disk are unchanged: the names are converted here, at the edge. A map keyed by data
(agent ids, event types) keeps its keys; only the field names inside its values change.
"""

from __future__ import annotations

import json
import re

#: Fields whose value is a map keyed by data, not by field names: its keys are printed as they are.
KEYED_BY_DATA = frozenset({"agents", "watcher_last_reconcile", "provider_errors", "events_by_type", "workers"})
_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def camel(name: str) -> str:
    """``files_skipped`` → ``filesSkipped``; a name that is not snake_case is left as it is."""
    if not _SNAKE.fullmatch(name):
        return name
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(value: object) -> object:
    """``value`` with every field name camelCase, recursively (KEYED_BY_DATA maps keep their keys)."""
    if isinstance(value, list | tuple):
        return [camel_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key in KEYED_BY_DATA and isinstance(item, dict):
            out[camel(key)] = {k: camel_keys(v) for k, v in item.items()}
        else:
            out[camel(str(key))] = camel_keys(item)
    return out


def print_json(data: dict) -> None:
    """``data`` as the one JSON object of a command's ``--json`` output, field names camelCase.
    ASCII with escapes: a file name that is not UTF-8 (kept as surrogates) prints on any stdout."""
    print(json.dumps(camel_keys(data), indent=2, default=str))
