"""Hygiene: ``memoryd doctor --agent A`` flags memory files that look like they hold secrets
(naming file and line, never the secret) and a workspace whose git would take the session
transcripts; a new workspace's ``.gitignore`` keeps ``sessions/`` out of git."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from memoryd.shared.config.bootstrap import ensure_workspace
from memoryd.shared.secrets import redact, secret_lines
from tests.agents_support import two_agents

REPO = Path(__file__).resolve().parent.parent
OPENAI_KEY = "sk-proj-" + "Ab3xYz9Qw" * 4
PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\n-----END RSA PRIVATE KEY-----"


def _doctor(config: Path, agent: str) -> tuple[dict[str, dict], str]:
    done = subprocess.run([sys.executable, "-m", "memoryd.services.cli", "--config", str(config), "doctor",
                           "--agent", agent, "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    return {c["check"]: c for c in json.loads(done.stdout)["checks"]}, done.stdout


def test_doctor_flags_memory_files_holding_secrets(tmp_path: Path) -> None:
    _, config = two_agents(tmp_path)
    memory = tmp_path / "a" / "memory"
    (memory / "2026-03-02.md").write_text(f"# setup\nthe deploy key for staging:\n{PRIVATE_KEY}\n"
                                          f"openai: {OPENAI_KEY}\n")
    (memory / "2026-03-03.md").write_text("the wifi password: hunter2-garden\nmet Ines\n")
    checks, out = _doctor(config, "a")
    flagged = checks["secrets a"]
    assert not flagged["ok"]
    assert "memory/2026-03-02.md (line 3: private key, line 6: API token)" in flagged["detail"]
    assert "memory/2026-03-03.md (line 1: password)" in flagged["detail"]
    assert "rotate" in flagged["detail"]
    assert OPENAI_KEY not in out and "hunter2" not in out and "MIIEow" not in out
    assert "secrets b" not in checks  # --agent a checks a only
    clean, _ = _doctor(config, "b")
    assert clean["secrets b"]["ok"]


def test_a_new_workspace_keeps_transcripts_out_of_git(tmp_path: Path) -> None:
    settings, config = two_agents(tmp_path)
    fresh = settings.agent("a").model_copy(update={"workspace": tmp_path / "fresh"})
    assert ensure_workspace(fresh)
    sessions = tmp_path / "fresh" / "sessions"
    sessions.mkdir()
    (sessions / "s1.jsonl").write_text('{"role": "user", "content": "my password is hunter2"}\n')
    git = shutil.which("git")
    status = subprocess.run([git, "-C", str(tmp_path / "fresh"), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True).stdout
    assert "sessions" not in status
    # an existing workspace under git without that line is flagged
    subprocess.run([git, "-C", str(tmp_path / "a"), "init", "-q"], check=True)
    checks, _ = _doctor(config, "a")
    assert not checks["transcripts a"]["ok"] and "sessions/" in checks["transcripts a"]["detail"]
    (tmp_path / "a" / ".gitignore").write_text("sessions/\n")
    checks, _ = _doctor(config, "a")
    assert checks["transcripts a"]["ok"]


def test_session_notes_are_redacted_with_the_same_patterns() -> None:
    text = f"key {OPENAI_KEY} and token = abc123 and {PRIVATE_KEY}"
    assert redact(text) == "key [redacted] and token = [redacted] and [redacted]"
    assert secret_lines(redact(text)) == {}
