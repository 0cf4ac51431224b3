"""The session service: transcripts in, flush / compaction / reset / session notes out.

Appends (HTTP API, client, CLI) go through :class:`Sessions`. Crossing a threshold on
append is what starts the automatic work, as jobs on the ``session`` queue:

- tokens ≥ contextWindow − reserveTokensFloor − softThresholdTokens → a ``flush_requested``
  entry in the JSONL (at most one per compaction cycle, decided under the file's lock),
  the ``session.flush_requested`` event, and :func:`flush_job`;
- tokens ≥ contextWindow − reserveTokensFloor → :func:`compact_job` (one per cycle,
  claimed in Redis; the job itself re-checks, so a duplicate does nothing). It runs the
  cycle's flush first when that has not happened yet;
- a message to a session that is due a daily or idle reset ends the old conversation
  first. The lifecycle scheduler in :func:`run` ends due sessions without waiting for one.

Manual commands (``/compact``, ``/new``, ``/reset``) run in the caller and return their
result; automatic work runs in the session worker. Every action is logged as an event.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

import redis
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from memoryd.services.session.context import (
    Context,
    assemble,
    catch_up_compaction,
    read_bootstrap,
    session_tokens,
)
from memoryd.services.session.heartbeat import Heartbeat
from memoryd.services.session.llm import NO_REPLY, Extractive, Llm, make_llm
from memoryd.services.session.memfiles import DailyWrite, daily_path, save_note, slugify, write_daily
from memoryd.services.session.policy import (
    Thresholds,
    cap_tokens,
    due_reset,
    split_recent,
)
from memoryd.services.session.transcript import (
    Compaction,
    Flushed,
    MemorySavedEntry,
    Message,
    Reset,
    Role,
    ToolCall,
    Transcript,
    as_json,
    ended_segment,
    segment,
)
from memoryd.services.session.transcript import FlushRequested as FlushRequestedEntry
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import AgentConfig, Settings
from memoryd.shared.events import (
    Compacted,
    FlushFailed,
    FlushRequested,
    MemoryFlushed,
    MemorySaved,
    Pruned,
    SessionReset,
)
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.index.chunking import count_tokens
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.roster import LiveSettings
from memoryd.shared.runtime.worker import Periodic, run_worker
from memoryd.shared.runtime.worker import context as worker_context

log = logging.getLogger("memoryd.session")
Clock = Callable[[], datetime]
ResetReason = Literal["daily", "idle", "new", "reset"]

#: How often the lifecycle scheduler looks for sessions due a daily or idle reset.
SCHEDULER_SECONDS = 30.0
#: Messages the session-memory hook hands to the LLM (OpenClaw: the last 15).
NOTE_MESSAGES = 15
_NO_REPLY = re.compile(rf"\W*{NO_REPLY}\W*")


def local_now() -> datetime:
    return datetime.now().astimezone()


class NewMessage(BaseModel):
    """One turn a host appends: ``{"role": "user", "text": "…"}`` (``content`` works too)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    role: Role
    content: str = Field(validation_alias=AliasChoices("content", "text"))
    name: str | None = None
    tool_call_id: str | None = Field(None, validation_alias=AliasChoices("tool_call_id", "toolCallId"))
    tool_calls: list[ToolCall] | None = Field(None, validation_alias=AliasChoices("tool_calls", "toolCalls"))
    #: When it was said (ISO 8601); default now. A time without offset is taken in local time.
    ts: datetime | None = None

    @field_validator("ts")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return value.astimezone() if value is not None and value.tzinfo is None else value


class Sessions:
    """Every session operation; built per process with the settings, the bus and a clock."""

    def __init__(self, settings: Settings, bus: Bus, *, clock: Clock = local_now, llm: Llm | None = None) -> None:
        self._agents = LiveSettings(settings)
        self.bus = bus
        self.clock = clock
        self.llm = llm or make_llm(settings.memoryd.llm)

    @property
    def settings(self) -> Settings:
        """The settings with the agent registry as it is now: agents added or removed while running."""
        return self._agents.current()

    def _open(self, agent_id: str, session: str) -> tuple[AgentConfig, Transcript]:
        agent = self.settings.agent(agent_id)
        return agent, Transcript.of(agent.workspace, session)

    def _claim(self, key: str) -> bool:
        """True once per ``key`` while a job for it can still be pending or retrying."""
        m = self.settings.memoryd
        ttl = m.job_timeout_seconds * (m.job_retries + 2)
        return bool(self.bus.conn.set(self.bus.key("session-claim", key), 1, nx=True, ex=ttl))

    # --- appending ------------------------------------------------------------------------
    def append(self, agent_id: str, session: str, new: NewMessage) -> dict[str, Any]:
        agent, transcript = self._open(agent_id, session)
        now = self.clock()
        thresholds = Thresholds.of(agent)
        bootstrap = read_bootstrap(agent.workspace, session)
        reset: Reset | None = None
        ended_tokens = 0
        flush: FlushRequestedEntry | None = None
        calls = "".join(c.model_dump_json() for c in new.tool_calls or [])
        message = Message(ts=(new.ts or now).isoformat(), role=new.role, content=new.content,
                          tokens=count_tokens(new.content + calls), name=new.name,
                          tool_call_id=new.tool_call_id, tool_calls=new.tool_calls)
        with transcript.locked() as locked:
            old = segment(locked.entries)
            reason = due_reset(old, agent.session, now)
            if reason:
                reset = Reset(ts=now.isoformat(), reason=reason)
                ended_tokens = session_tokens(old, bootstrap)
                locked.append(reset)
            locked.append(message)
            seg = segment(locked.entries)
            tokens = session_tokens(seg, bootstrap)
            cycle = seg.compaction_count
            if thresholds.flush is not None and tokens >= thresholds.flush and not seg.flush_requested(cycle):
                flush = FlushRequestedEntry(ts=now.isoformat(), compaction_count=cycle, tokens=tokens)
                locked.append(flush)
        if reset is not None:
            self._ended(agent_id, session, reset, ended_tokens)
        if flush is not None:
            self.bus.log([FlushRequested(agent=agent_id, session=session, tokens=tokens, compaction_count=cycle)])
            self.bus.enqueue("flush", agent_id, session, cycle,
                             job_id=self.bus.job_id(f"flush-{agent_id}-{session}-{seg.resets}-{cycle}"))
        compact = tokens >= thresholds.compact and self._claim(f"{agent_id}:{session}:{seg.resets}:{cycle}")
        if compact:
            self.bus.enqueue("compact", agent_id, session, cycle,
                             job_id=self.bus.job_id(f"compact-{agent_id}-{session}-{seg.resets}-{cycle}"))
        return {"entry": as_json(message), "tokens": tokens, "compactionCount": cycle,
                "flushRequested": flush is not None, "compactionRequested": compact,
                "reset": reset.reason if reset else None}

    # --- reading ----------------------------------------------------------------------------
    def context(self, agent_id: str, session: str) -> Context:
        """What is sent to the model. Past the compaction threshold (the worker's flush and compaction
        lag behind the appends) it does them first, waiting compaction.catchUpSeconds at most: the
        context never exceeds the window for want of a compaction, or says why it does."""
        agent, transcript = self._open(agent_id, session)
        bootstrap = read_bootstrap(agent.workspace, session)
        seg = segment(transcript.read())
        catch_up = None
        if session_tokens(seg, bootstrap) >= Thresholds.of(agent).compact:
            catch_up = catch_up_compaction(lambda: self.compact(agent_id, session, manual=False),
                                           agent.compaction.catch_up_seconds, f"{agent_id}/{session}")
            seg = segment(transcript.read())
        ctx = assemble(seg, bootstrap, agent, self.clock())
        ctx.catch_up = catch_up
        if ctx.pruning.changed:
            self.bus.log([Pruned(agent=agent_id, session=session, tokens=ctx.tokens,
                                 soft_trimmed=ctx.pruning.soft_trimmed, hard_cleared=ctx.pruning.hard_cleared)])
        return ctx

    def show(self, agent_id: str, session: str) -> dict[str, Any]:
        agent, transcript = self._open(agent_id, session)
        seg = segment(transcript.read())
        thresholds = Thresholds.of(agent)
        last = seg.last_activity
        return {
            "agent": agent_id, "session": session, "path": str(transcript.path), "exists": transcript.exists(),
            "messages": len(seg.messages), "liveMessages": len(seg.live_messages()),
            "tokens": session_tokens(seg, read_bootstrap(agent.workspace, session)),
            "compactionCount": seg.compaction_count,
            "memoryFlushCompactionCount": seg.memory_flush_compaction_count,
            "flushError": seg.last_flush.error if seg.last_flush else None,
            "flushRequested": seg.flush_requested(seg.compaction_count),
            "flushThreshold": thresholds.flush, "compactionThreshold": thresholds.compact,
            "contextWindow": agent.context_window, "resets": seg.resets, "startedAt": seg.started_at,
            "lastActivity": last.isoformat() if last else None,
        }

    # --- the pre-compaction flush -------------------------------------------------------------
    def flush(self, agent_id: str, session: str, cycle: int) -> dict[str, Any] | None:
        """The flush of compaction cycle ``cycle``; None when it is done already or out of date."""
        agent, transcript = self._open(agent_id, session)
        settings = agent.compaction.memory_flush
        seg = segment(transcript.read())
        if not settings.enabled or seg.compaction_count != cycle or seg.flushed(cycle):
            return None
        now = self.clock()
        ctx = assemble(seg, read_bootstrap(agent.workspace, session), agent, now)
        system = "\n\n".join([m["content"] for m in ctx.messages if m["role"] == "system"] + [settings.system_prompt])
        day = now.date()
        prompt = settings.prompt.replace("YYYY-MM-DD", day.isoformat())
        reply = self.llm.flush(system, ctx.pruning.messages, prompt).strip()
        no_reply = not reply or bool(_NO_REPLY.fullmatch(reply))
        with transcript.locked() as locked:
            current = segment(locked.entries)
            if current.compaction_count != cycle or current.flushed(cycle):
                return None
            done = DailyWrite([]) if no_reply else write_daily(
                agent.workspace, day, f"## Memory flush {now:%H:%M} (session {session})\n\n{reply}")
            files = done.files
            # Written or not, the cycle's flush is over: compaction goes on and nothing loops.
            locked.append(Flushed(ts=now.isoformat(), compaction_count=cycle, tokens=ctx.session_tokens,
                                  files=files, no_reply=no_reply, error=done.error, unwritten=done.unwritten))
        if done.error:
            self.bus.log([FlushFailed(agent=agent_id, session=session, tokens=ctx.session_tokens,
                                      compaction_count=cycle, path=daily_path(day), reason=done.error)])
            log.warning("memory flush of %s/%s (cycle %d) not written: %s; its notes are kept in the transcript",
                        agent_id, session, cycle, done.error)
            return {"files": [], "noReply": False, "error": done.error, "tokens": ctx.session_tokens,
                    "compactionCount": cycle}
        self.bus.log([MemoryFlushed(agent=agent_id, session=session, tokens=ctx.session_tokens, files=files,
                                    no_reply=no_reply)])
        log.info("memory flush of %s/%s (cycle %d): %s", agent_id, session, cycle,
                 ", ".join(files) or "NO_REPLY")
        return {"files": files, "noReply": no_reply, "tokens": ctx.session_tokens, "compactionCount": cycle}

    # --- compaction ---------------------------------------------------------------------------
    def compact(self, agent_id: str, session: str, *, manual: bool, focus: str | None = None,
                cycle: int | None = None) -> dict[str, Any] | None:
        """Summarise the older turns; None when there is nothing (more) to compact."""
        agent, transcript = self._open(agent_id, session)
        thresholds = Thresholds.of(agent)
        bootstrap = read_bootstrap(agent.workspace, session)
        seg = segment(transcript.read())
        before = session_tokens(seg, bootstrap)
        if not manual:
            if (cycle is not None and seg.compaction_count != cycle) or before < thresholds.compact:
                return None
            if thresholds.flush is not None and not seg.flushed(seg.compaction_count):
                self.flush(agent_id, session, seg.compaction_count)  # the flush gets its chance first
                seg = segment(transcript.read())
        older, _ = split_recent(seg.live_messages(),
                                min(agent.compaction.keep_recent_tokens, int(thresholds.base * d.COMPACT_KEEP_SHARE)))
        if not older:
            return None
        previous = seg.last_compaction.summary if seg.last_compaction else None
        summary = self.llm.summarise(older, previous, focus).strip() or Extractive().summarise(older, previous, focus)
        summary = cap_tokens(summary, max(d.COMPACT_MIN_SUMMARY_TOKENS, int(thresholds.base * d.COMPACT_SUMMARY_SHARE)))
        now = self.clock()
        with transcript.locked() as locked:
            current = segment(locked.entries)
            if current.compaction_count != seg.compaction_count:
                return None  # compacted meanwhile by someone else
            summarised = {m.id for m in older}
            kept = [m for m in current.live_messages() if m.id not in summarised]
            entry = Compaction(ts=now.isoformat(), summary=summary, first_kept_id=kept[0].id if kept else None,
                               tokens=count_tokens(summary), tokens_before=before, tokens_after=0,
                               compaction_count=current.compaction_count + 1, manual=manual, focus=focus)
            after = session_tokens(segment([*locked.entries, entry]), bootstrap)
            entry = entry.model_copy(update={"tokens_after": after})
            locked.append(entry)
        self.bus.log([Compacted(agent=agent_id, session=session, tokens=after, tokens_before=before,
                                tokens_after=after, compaction_count=entry.compaction_count, manual=manual)])
        log.info("%s complete: %s/%s %d → %d tokens (%d turns summarised, %d kept)",
                 "Manual compaction" if manual else "Auto-compaction", agent_id, session, before, after,
                 len(older), len(kept))
        if after >= thresholds.compact:
            log.warning("session %s/%s is still at %d tokens after compaction: the bootstrap files alone are "
                        "too big for contextWindow %d; shorten them", agent_id, session, after, agent.context_window)
        return {"compactionCount": entry.compaction_count, "tokensBefore": before, "tokensAfter": after,
                "summarised": len(older), "kept": len(kept), "summary": summary, "manual": manual}

    # --- the lifecycle ------------------------------------------------------------------------
    def end(self, agent_id: str, session: str, reason: ResetReason, *, hook_inline: bool) -> dict[str, Any]:
        """End the session's conversation (``/new``, ``/reset``, daily, idle) and save its note."""
        agent, transcript = self._open(agent_id, session)
        if not transcript.exists():
            return {"reset": False, "reason": reason, "files": []}
        now = self.clock()
        bootstrap = read_bootstrap(agent.workspace, session)
        with transcript.locked() as locked:
            seg = segment(locked.entries)
            scheduled = reason in ("daily", "idle")
            if not seg.messages or (scheduled and due_reset(seg, agent.session, now) != reason):
                return {"reset": False, "reason": reason, "files": []}
            tokens = session_tokens(seg, bootstrap)
            reset = Reset(ts=now.isoformat(), reason=reason)
            locked.append(reset)
        files = self._ended(agent_id, session, reset, tokens, inline=hook_inline)
        return {"reset": True, "reason": reason, "resetId": reset.id, "tokens": tokens, "files": files}

    def _ended(self, agent_id: str, session: str, reset: Reset, tokens: int, *, inline: bool = False) -> list[str]:
        self.bus.log([SessionReset(agent=agent_id, session=session, tokens=tokens, reason=reset.reason)])
        log.info("session %s/%s reset (%s)", agent_id, session, reset.reason)
        if inline:
            return self.save_session_memory(agent_id, session, reset.id)
        self.bus.enqueue("session_memory", agent_id, session, reset.id,
                         job_id=self.bus.job_id(f"note-{agent_id}-{session}-{reset.id}"))
        return []

    def save_session_memory(self, agent_id: str, session: str, reset_id: str) -> list[str]:
        """The session-memory hook: a note on the ended conversation, ``memory/<date>-<slug>.md``."""
        agent, transcript = self._open(agent_id, session)
        entries = transcript.read()
        done = [e for e in entries if isinstance(e, MemorySavedEntry) and e.reset_id == reset_id]
        reset = next((e for e in entries if isinstance(e, Reset) and e.id == reset_id), None)
        if done or reset is None:
            return done[0].files if done else []
        turns = [m for m in ended_segment(entries, reset_id) if m.role != "tool"][-NOTE_MESSAGES:]
        if not turns:
            return []
        slug, note = self.llm.note(turns)
        if not note.strip() or _NO_REPLY.fullmatch(note.strip()):
            slug, note = Extractive().note(turns)
        ended = reset.at
        text = (f"# Session {session}: {ended:%Y-%m-%d %H:%M}\n\n"
                f"- Agent: {agent_id}; session ended by {reset.reason}; last {len(turns)} messages\n\n{note.strip()}")
        with transcript.locked() as locked:
            done = [e for e in locked.entries if isinstance(e, MemorySavedEntry) and e.reset_id == reset_id]
            if done:
                return done[0].files
            path = save_note(agent.workspace, ended.date(), slugify(slug) or f"{ended:%H%M}", text)
            locked.append(MemorySavedEntry(ts=self.clock().isoformat(), reset_id=reset_id, files=[path]))
        self.bus.log([MemorySaved(agent=agent_id, session=session, files=[path])])
        log.info("session memory of %s/%s saved to %s", agent_id, session, path)
        return [path]

    def tick(self) -> list[dict[str, Any]]:
        """End every session that is due a daily or idle reset now; → what was reset."""
        now = self.clock()
        done = []
        for agent_id in self.settings.agent_ids():
            agent = self.settings.agent(agent_id)
            for path in sorted((agent.workspace / "sessions").glob("*.jsonl")):
                reason = due_reset(segment(Transcript(path).read()), agent.session, now)
                if reason:
                    result = self.end(agent_id, path.stem, reason, hook_inline=False)
                    if result["reset"]:
                        done.append({"agent": agent_id, "session": path.stem, **result})
        return done


# --- jobs (run by the session worker) -----------------------------------------------------------
def _sessions() -> Sessions:
    ctx = worker_context()
    return ctx.memo("sessions", lambda: Sessions(ctx.settings, ctx.bus))


def flush_job(agent_id: str, session: str, cycle: int) -> dict[str, Any] | None:
    return _sessions().flush(agent_id, session, cycle)


def compact_job(agent_id: str, session: str, cycle: int) -> dict[str, Any] | None:
    return _sessions().compact(agent_id, session, manual=False, cycle=cycle)


def session_memory_job(agent_id: str, session: str, reset_id: str) -> list[str]:
    return _sessions().save_session_memory(agent_id, session, reset_id)


def run(settings: Settings, conn: redis.Redis) -> None:
    """The session service process: the lifecycle and heartbeat schedulers plus the ``session`` queue's worker."""
    bus = Bus(conn, settings)
    sessions = Sessions(settings, bus)
    heartbeats = Heartbeat(settings, bus)
    errors = (MemorydError, redis.RedisError, OSError)
    schedulers = [Periodic("session-lifecycle", SCHEDULER_SECONDS, sessions.tick, immediately=True, errors=errors),
                  Periodic("heartbeat-scheduler", d.HEARTBEAT_TICK_SECONDS, heartbeats.tick, immediately=True,
                           errors=errors)]
    for scheduler in schedulers:
        scheduler.start()
    try:
        run_worker("session", settings, conn)
    finally:
        for scheduler in schedulers:
            scheduler.stop.set()


def context_json(ctx: Context) -> dict[str, Any]:
    """The ``session context --json`` / ``GET …/context`` shape."""
    return {
        "messages": ctx.messages, "tokens": ctx.tokens, "sessionTokens": ctx.session_tokens,
        "summary": ctx.summary,
        "bootstrap": [{"name": f.name, "chars": f.chars, "truncated": f.truncated} for f in ctx.bootstrap],
        "pruning": {"softTrimmed": ctx.pruning.soft_trimmed, "hardCleared": ctx.pruning.hard_cleared,
                    "reason": ctx.pruning.reason},
        "catchUp": ctx.catch_up,
    }
