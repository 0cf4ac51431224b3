"""A new agent workspace: the standard files of SPEC §3, ``memory/``, and ``git init``.

Only a workspace that does not exist yet, or is an empty folder (a container's bind mount
that Docker made), is filled; one with anything in it is never touched.
Its ``.gitignore`` keeps ``sessions/`` out of git: session transcripts keep what was said
verbatim, secrets included (``memoryd doctor`` flags a workspace whose git does not).
"""

from __future__ import annotations

import logging
import shutil
import subprocess

from memoryd.shared.config.settings import AgentConfig
from memoryd.shared.exceptions import MemorydError

log = logging.getLogger("memoryd.bootstrap")

AGENTS_MD = """# AGENTS.md — how this agent works

## Every session, before anything else
1. Read SOUL.md (who you are) and USER.md (who you help).
2. Read today's and yesterday's `memory/YYYY-MM-DD.md`.
3. In the main (direct) session only, also read MEMORY.md.

## Memory
- Memory is these Markdown files. If it is not written down, you will not remember it.
- Daily log: append what happened, decisions and open threads to `memory/YYYY-MM-DD.md`.
  Append; never rewrite earlier lines.
- Long-term: curated facts, preferences, decisions and contacts go to MEMORY.md.
- Before answering about prior work, decisions, dates, people, preferences or todos,
  call `memory_search`, then `memory_get` for the exact lines.
- When someone says "remember this", write it to a file now.
- Durable rules ("always confirm before deleting") belong in a file, not only in chat:
  chat is compacted away.
- Never store secrets (tokens, passwords, keys) in memory.
- SOUL.md, AGENTS.md and TOOLS.md are configuration: change them only when the user
  asks, and say so.
"""

STANDARD_FILES = {
    "AGENTS.md": AGENTS_MD,
    "SOUL.md": "# SOUL.md — who you are\n\nBe helpful, precise and honest.\n",
    "USER.md": "# USER.md — who you help\n\n",
    "TOOLS.md": "# TOOLS.md — notes about your tools\n\n",
    "MEMORY.md": "# MEMORY.md — long-term memory\n\n",
    ".gitignore": "# session transcripts keep what was said verbatim, secrets included\nsessions/\n",
}


def ensure_workspace(agent: AgentConfig) -> bool:
    """Create the agent's workspace if it is missing or an empty folder; → whether it was created."""
    ws = agent.workspace
    if ws.exists() and (not ws.is_dir() or any(ws.iterdir())):
        return False
    try:
        (ws / "memory").mkdir(parents=True)
    except OSError as exc:
        raise MemorydError(f"cannot create the workspace {ws} of agent {agent.id}: {exc.strerror}; fix the agent's "
                           "workspace in the config (or --workspace), or create the folder yourself") from None
    for name, text in STANDARD_FILES.items():
        (ws / name).write_text(text, encoding="utf-8")
    git = shutil.which("git")
    if git:  # versioned from the start, so every later change shows in `git diff`
        for argv in (["init", "-q"], ["add", "-A"],
                     ["-c", "user.name=memoryd", "-c", "user.email=memoryd@localhost", "commit", "-q", "-m",
                      "memoryd: new workspace"]):
            subprocess.run([git, "-C", str(ws), *argv], check=False, capture_output=True)
    log.info("agent %s: created workspace %s", agent.id, ws)
    return True
