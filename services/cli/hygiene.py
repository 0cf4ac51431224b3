"""``memoryd doctor``'s hygiene checks of one agent: secrets in its memory files, and its
session transcripts (which keep what was said verbatim, secrets included) kept out of git."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.config.workspace import Workspace
from memoryd.shared.secrets import secret_lines


def secrets_check(settings: Settings, agent_id: str) -> dict[str, Any]:
    """FAIL naming the memory files and lines that look like they hold a secret (never the secret)."""
    agent = settings.agent(agent_id)
    flagged = []
    for found in Workspace(agent).scan() if agent.workspace.exists() else ():
        try:
            text = found.absolute.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue  # vanished or unreadable: the pipeline reports it
        lines = secret_lines(text)
        if lines:
            flagged.append(f"{found.path} (" + ", ".join(f"line {n}: {kind}" for n, kind in lines.items()) + ")")
    if not flagged:
        return {"check": f"secrets {agent_id}", "ok": True, "detail": "no memory file looks like it holds a secret"}
    shown = d.HYGIENE_SHOWN_FILES
    more = f" and {len(flagged) - shown} more" if len(flagged) > shown else ""
    return {"check": f"secrets {agent_id}", "ok": False,
            "detail": f"memory files that look like they hold secrets: {'; '.join(flagged[:shown])}{more}. "
                      "Memory is searched and sent to models: move the secret to a secret store, delete the line, "
                      "and rotate it (the workspace's git history still holds it)"}


def transcripts_check(settings: Settings, agent_id: str) -> dict[str, Any] | None:
    """FAIL when the agent's workspace is a git repository that does not ignore ``sessions/``."""
    workspace = settings.agent(agent_id).workspace
    git = shutil.which("git")
    if git is None or not (workspace / ".git").exists():
        return None
    probe = subprocess.run([git, "-C", str(workspace), "check-ignore", "-q", "sessions/x.jsonl"],
                           capture_output=True, check=False)
    if probe.returncode == 0:
        return {"check": f"transcripts {agent_id}", "ok": True, "detail": "sessions/ is ignored by git"}
    return {"check": f"transcripts {agent_id}", "ok": False,
            "detail": f"{workspace}/sessions/ (session transcripts, secrets verbatim) is not ignored by git: add "
                      "the line 'sessions/' to the workspace's .gitignore"}
