"""What a session would send to the model: bootstrap files, the latest summary, the live
turns with pruning applied, and the token count. Pure functions; the clock is an argument.

Token counts are tiktoken ``cl100k`` counts of the message texts (no per-message overhead).
Two totals matter: ``session_tokens`` — everything unpruned, which the flush and
compaction thresholds are measured against (it does not flap with the cache TTL) — and
``tokens`` — what is actually sent, after pruning.

Pruning only changes the copy that is sent; the JSONL on disk is never touched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd.services.session.transcript import Message, Segment
from memoryd.shared.config.settings import AgentConfig, ContextPruningSettings
from memoryd.shared.config.workspace import ROOT_FILES
from memoryd.shared.index.chunking import count_tokens

log = logging.getLogger("memoryd.session")

#: Injected in this order (OpenClaw's bootstrap set); MEMORY.md only in the main session.
BOOTSTRAP_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "IDENTITY.md")
#: The session that is the agent's direct chat with its owner: the only one that sees MEMORY.md
#: (it holds private context that must not leak into group or shared sessions).
MAIN_SESSION = "main"
#: Per-file cap (SPEC §3: MEMORY.md is injected "with a cap of about 20,000 characters").
BOOTSTRAP_MAX_CHARS = 20_000
#: Of a capped file, keep this share from the head and this from the tail (OpenClaw's 70/20).
HEAD_SHARE = 0.7
TAIL_SHARE = 0.2
SUMMARY_HEADER = "Summary of the earlier conversation (compacted):\n"


@dataclass(frozen=True)
class BootstrapFile:
    name: str
    text: str
    chars: int
    truncated: bool


def cap_text(name: str, text: str, limit: int = BOOTSTRAP_MAX_CHARS) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters: head and tail kept, the cut marked in between."""
    if len(text) <= limit:
        return text, False
    head = int(limit * HEAD_SHARE)
    tail = int(limit * TAIL_SHARE)
    cut = len(text) - head - tail
    marker = f"\n\n[... {cut} characters of {name} cut here; read the file for the full text ...]\n\n"
    return text[:head] + marker + text[len(text) - tail:], True


def read_bootstrap(workspace: Path, session: str) -> list[BootstrapFile]:
    names = list(BOOTSTRAP_FILES)
    if session == MAIN_SESSION:
        names += [next((n for n in ROOT_FILES if (workspace / n).is_file()), ROOT_FILES[0])]
    files = []
    for name in names:
        path = workspace / name
        if not path.is_file() or path.is_symlink():
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        text, truncated = cap_text(name, raw)
        files.append(BootstrapFile(name=name, text=text, chars=len(raw), truncated=truncated))
    return files


def render_bootstrap(files: list[BootstrapFile]) -> str:
    return "\n\n".join(f"## {f.name}\n\n{f.text}" for f in files)


# --- pruning ---------------------------------------------------------------------------------
@dataclass
class PruneResult:
    messages: list[Message]
    soft_trimmed: int = 0
    hard_cleared: int = 0
    #: Why nothing or something was pruned, for ``session context --json``.
    reason: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.soft_trimmed or self.hard_cleared)


def soft_trim(text: str, head: int, tail: int) -> str:
    return text[:head] + "..." + text[len(text) - tail:]


def protected_from(messages: list[Message], keep_last_assistants: int) -> int:
    """Index from which tool results are kept whole: the last N assistant turns' results."""
    if keep_last_assistants <= 0:
        return len(messages)
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            seen += 1
            if seen == keep_last_assistants:
                return i
    return 0


def prune(messages: list[Message], *, session_tokens: int, window: int, settings: ContextPruningSettings,
          now: datetime, last_request_at: datetime | None) -> PruneResult:
    """Soft-trim or hard-clear old, large tool results in the copy sent to the model."""
    if settings.mode == "off":
        return PruneResult(messages, reason="pruning is off")
    if settings.mode == "cache-ttl" and last_request_at is not None:
        idle = (now - last_request_at).total_seconds()
        if idle < settings.ttl:
            return PruneResult(messages, reason=f"prompt cache still warm ({idle:.0f}s < ttl {settings.ttl:g}s)")
    ratio = session_tokens / window
    if ratio < settings.soft_trim_ratio:
        return PruneResult(messages, reason=f"context at {ratio:.2f} of the window < softTrimRatio")
    hard = ratio >= settings.hard_clear_ratio and settings.hard_clear.enabled
    trim = settings.soft_trim
    keep_from = protected_from(messages, settings.keep_last_assistants)
    out: list[Message] = []
    result = PruneResult(out, reason=f"context at {ratio:.2f} of the window")
    for i, message in enumerate(messages):
        if message.role != "tool" or i >= keep_from or len(message.content) <= trim.max_chars:
            out.append(message)
            continue
        if hard:
            content = settings.hard_clear.placeholder
            result.hard_cleared += 1
        else:
            content = soft_trim(message.content, trim.head_chars, trim.tail_chars)
            result.soft_trimmed += 1
        out.append(message.model_copy(update={"content": content, "tokens": count_tokens(content)}))
    return result


# --- assembly ---------------------------------------------------------------------------------
@dataclass
class Context:
    messages: list[dict[str, Any]]
    #: What is sent, after pruning.
    tokens: int
    #: Everything unpruned: what the flush and compaction thresholds compare with.
    session_tokens: int
    pruning: PruneResult
    bootstrap: list[BootstrapFile] = field(default_factory=list)
    summary: str | None = None
    #: Set when the session was past the compaction threshold as it was asked for: what catching up did.
    catch_up: dict[str, Any] | None = None


def wire(message: Message) -> dict[str, Any]:
    """A transcript message in the chat-completions shape."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id or message.id
        if message.name:
            out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}} for c in message.tool_calls]
    return out


def _fixed(seg: Segment, bootstrap: list[BootstrapFile]) -> tuple[list[str], int]:
    """The system messages before the turns (bootstrap files, latest summary) and their tokens."""
    texts = [render_bootstrap(bootstrap)] if bootstrap else []
    last = seg.last_compaction
    if last is not None:
        texts.append(SUMMARY_HEADER + last.summary)
    return texts, sum(count_tokens(t) for t in texts)


def session_tokens(seg: Segment, bootstrap: list[BootstrapFile]) -> int:
    return _fixed(seg, bootstrap)[1] + sum(m.tokens for m in seg.live_messages())


def assemble(seg: Segment, bootstrap: list[BootstrapFile], agent: AgentConfig, now: datetime) -> Context:
    texts, fixed = _fixed(seg, bootstrap)
    live = seg.live_messages()
    unpruned = fixed + sum(m.tokens for m in live)
    pruned = prune(live, session_tokens=unpruned, window=agent.context_window, settings=agent.context_pruning,
                   now=now, last_request_at=seg.last_request_at)
    messages: list[dict[str, Any]] = [{"role": "system", "content": t} for t in texts]
    messages += [wire(m) for m in pruned.messages]
    last = seg.last_compaction
    return Context(messages=messages, tokens=fixed + sum(m.tokens for m in pruned.messages),
                   session_tokens=unpruned, bootstrap=bootstrap,
                   summary=last.summary if last else None, pruning=pruned)


def catch_up_compaction(compact: Callable[[], object], deadline: float, who: str) -> dict[str, Any]:
    """Run ``compact`` (the pending flush and compaction of session ``who``) on a thread and wait
    ``deadline`` seconds at most; → what it did, with a message when the context stays too big.
    The session worker's job, if it runs too, finds the work done: both re-check under the
    transcript's lock. Past the deadline the thread goes on and finishes the work."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            compact()
        except Exception as exc:  # reported to the caller below, and logged
            log.exception("catching up the compaction of %s failed", who)
            outcome["error"] = f"{exc.__class__.__name__}: {exc}"

    started = time.monotonic()
    thread = threading.Thread(target=work, daemon=True, name=f"catch-up {who}")
    thread.start()
    thread.join(deadline)
    waited = round(time.monotonic() - started, 3)
    if thread.is_alive():
        return {"compacted": False, "waitedSeconds": waited, "deadlinePassed": True,
                "message": f"session {who} is past its compaction threshold and the flush and compaction did not "
                           f"finish within compaction.catchUpSeconds ({deadline:g}s): this context exceeds the "
                           "threshold; they go on, ask again shortly"}
    if "error" in outcome:
        return {"compacted": False, "waitedSeconds": waited, "deadlinePassed": False,
                "message": f"the lagging compaction of session {who} failed ({outcome['error']}): this context "
                           "exceeds the compaction threshold"}
    return {"compacted": True, "waitedSeconds": waited, "deadlinePassed": False, "message": None}
