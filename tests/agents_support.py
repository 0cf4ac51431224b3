"""Two agents on one installation, ``a`` and ``b``, side by side: ``<tmp>/a`` and ``<tmp>/b``,
so ``../b/MEMORY.md`` seen from a's workspace is b's memory. b's files hold words found
nowhere in a's, so anything of b's that leaks into a's answers is seen."""

from __future__ import annotations

import json
from pathlib import Path

from memoryd.shared.config.loader import load_settings
from memoryd.shared.config.settings import Settings

#: In b's memory only; a search or read on a's behalf must never show them.
B_SECRET = "zanzibar quokka b-only-fact"
B_DAILY = "b's daily log: the quokka migration is planned"


def two_agents(tmp_path: Path, *, redis: str | None = None, **memoryd: object) -> tuple[Settings, Path]:
    """Config file and settings of agents a and b (provider hash), their workspaces filled."""
    a, b = tmp_path / "a", tmp_path / "b"
    for ws in (a, b):
        (ws / "memory").mkdir(parents=True)
    (a / "MEMORY.md").write_text("# a\nDecided: a keeps the release notes in Markdown.\n", encoding="utf-8")
    (a / "memory" / "2026-03-01.md").write_text("a met Ines about the invoice export.\n", encoding="utf-8")
    (b / "MEMORY.md").write_text(f"# b\n{B_SECRET}\n", encoding="utf-8")
    (b / "memory" / "2026-03-01.md").write_text(f"{B_DAILY}\n", encoding="utf-8")
    config = tmp_path / "memoryd.json"
    config.write_text(json.dumps({
        "agents": {"defaults": {"memorySearch": {"provider": "hash", "sync": {"watchDebounceMs": 200}}},
                   "list": [{"id": "a", "workspace": str(a)}, {"id": "b", "workspace": str(b)}]},
        "memoryd": {"stateDir": str(tmp_path / "state"), **({"redisUrl": redis} if redis else {}), **memoryd},
    }), encoding="utf-8")
    return load_settings(config, state_dir=tmp_path / "state"), config
