"""The heartbeat: what recurs in an agent's daily logs becomes a proposal to promote it.

On its interval (``heartbeat.everyMinutes``, default 30) the session service's scheduler
enqueues one :func:`heartbeat_job` per agent (a deterministic job id per interval, claimed in
Redis: never two for one slot) — unless the agent's ``HEARTBEAT.md`` is empty or missing,
which turns the heartbeat off. ``memoryd heartbeat --agent A`` runs one now.

A heartbeat reads the last ``heartbeat.days`` daily logs (``memory/YYYY-MM-DD.md``), keeps the
lines that may be promoted and groups those that say the same thing on different days
(services/session/recurring.py; embeddings by the local MiniLM model). A group seen on
``memoryDays`` days is proposed for MEMORY.md; on ``identityDays`` days for TOOLS.md (a line
about tools, commands, paths) or SOUL.md. The note is phrased by the LLM when one is
configured, else it is the newest occurrence verbatim. A statement that was proposed for that
layer before — pending, accepted or rejected — or that the target file already holds is not
proposed again; a rejected one never for any layer. Nothing is written to MEMORY.md, SOUL.md
or TOOLS.md here: only the ledger, ``PROMOTIONS.md`` and the events
(``promotion.proposed``, ``heartbeat.ran``).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np

from memoryd.services.session import recurring
from memoryd.services.session.llm import Extractive, Llm, make_llm
from memoryd.services.session.promotion import Ledger, Proposal, write_review
from memoryd.shared.config.settings import AgentConfig, HeartbeatSettings, MemorySearchSettings, Settings
from memoryd.shared.embed import providers
from memoryd.shared.events import HeartbeatRan, Occurrence, PromotionProposed
from memoryd.shared.runtime.bus import Bus
from memoryd.shared.runtime.roster import LiveSettings
from memoryd.shared.runtime.worker import context as worker_context
from memoryd.shared.secrets import redact

log = logging.getLogger("memoryd.heartbeat")
Embed = Callable[[Sequence[str]], np.ndarray]
HEARTBEAT_FILE = "HEARTBEAT.md"
_DAILY = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
#: The provenance an accept appends after the statement (services/session/promotion.py).
_PROMOTED = re.compile(r"\s*\(promoted \d{4}-\d{2}-\d{2} from [^)]*\)\s*$")
#: A statement about tools goes to TOOLS.md, any other durable one to SOUL.md.
_TOOLISH = re.compile(r"`|\b(?:tools?|commands?|cli|scripts?|api|endpoints?|ssh|git|docker|kubectl|npm|pip|"
                      r"shell|terminal|browser|curl|exec|flags?|options?|binary|installed)\b|[\w.-]+/[\w.-]+",
                      re.IGNORECASE)


def heartbeat_on(agent: AgentConfig) -> bool:
    """HEARTBEAT.md holds something besides headings and comments (seed 003: empty = skipped)."""
    try:
        text = (agent.workspace / HEARTBEAT_FILE).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
        return False
    return any(line.strip() and not line.lstrip().startswith("#") for line in _COMMENT.sub("", text).splitlines())


def local_embed(texts: Sequence[str]) -> np.ndarray:
    """One L2-normalised MiniLM vector per text (the offline model, whatever the agent searches with)."""
    [model] = providers.resolve(MemorySearchSettings(provider="local"))
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    rows = np.stack([windows.mean(axis=0) for windows in model.embed_chunks(list(texts))])
    return (rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def read_statements(agent: AgentConfig, others: list[str], today: date) -> tuple[list[str], list[recurring.Statement]]:
    """The daily logs of the last ``heartbeat.days`` days (oldest first) and their promotable lines."""
    files, found = [], []
    memory = agent.workspace / "memory"
    for back in range(agent.heartbeat.days - 1, -1, -1):
        day = (today - timedelta(days=back)).isoformat()
        path = memory / f"{day}.md"
        if memory.is_symlink() or path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            log.warning("agent %s: %s is not UTF-8; the heartbeat skips it", agent.id, path)
            continue
        rel = f"memory/{day}.md"
        files.append(rel)
        found += recurring.statements(rel, day, text, others=others, min_chars=agent.heartbeat.min_chars)
    return files, found


def target_of(group: recurring.Group, hb: HeartbeatSettings) -> str:
    if len(group.days) < hb.identity_days:
        return "MEMORY.md"
    return "TOOLS.md" if any(_TOOLISH.search(m.text) for m in group.members) else "SOUL.md"


def proposal_id(target: str, first: recurring.Statement) -> str:
    return hashlib.sha256(f"{target}\n{first.path}:{first.line}\n{first.text}".encode()).hexdigest()[:10]


class Heartbeat:
    """Heartbeats of every agent; built per process with the settings, the bus and an embedder."""

    def __init__(self, settings: Settings, bus: Bus, *, llm: Llm | None = None, embed: Embed = local_embed,
                 clock: Callable[[], datetime] = lambda: datetime.now().astimezone()) -> None:
        self._agents = LiveSettings(settings)
        self.bus = bus
        self.llm = llm or make_llm(settings.memoryd.llm)
        self.embed = embed
        self.clock = clock
        self._cache: dict[str, np.ndarray] = {}

    @property
    def settings(self) -> Settings:
        return self._agents.current()

    def run(self, agent_id: str, today: date | None = None) -> dict[str, Any]:
        """One heartbeat of the agent, over the days up to ``today`` (default: the clock's);
        ``ran: false`` (and nothing done) when HEARTBEAT.md is empty."""
        settings = self.settings
        agent = settings.agent(agent_id)
        if not heartbeat_on(agent):
            return {"agent": agent_id, "ran": False, "reason": f"{HEARTBEAT_FILE} is empty or missing",
                    "proposed": []}
        hb = agent.heartbeat
        others = [a for a in settings.agent_ids() if a != agent_id]
        files, found = read_statements(agent, others, today or self.clock().date())
        self._cache.clear()
        vectors = self._vectors([s.text for s in found]) if found else np.zeros((0, 1), dtype=np.float32)
        groups = recurring.recurring(found, vectors, similarity=hb.similarity,
                                     overlap=hb.overlap, min_days=hb.memory_days)
        ledger = Ledger(settings, self.bus, agent_id)
        with ledger.locked() as proposals:
            new = [e for g in groups if (e := self._propose(agent, g, proposals)) is not None]
            if new:
                ledger.record(new)
                proposals = ledger.proposals()
        if new:
            write_review(settings, agent_id, proposals)
        ids = [e.proposal_id for e in new]
        self.bus.log([HeartbeatRan(agent=agent_id, files=files, lines=len(found), recurring=len(groups),
                                   proposed=ids, phrased_by=self.llm.name)])
        log.info("heartbeat of %s: %d lines of %d files, %d recurring, %d proposed", agent_id, len(found),
                 len(files), len(groups), len(ids))
        return {"agent": agent_id, "ran": True, "files": files, "lines": len(found), "recurring": len(groups),
                "proposed": [{"id": e.proposal_id, "target": e.target, "text": e.text,
                              "sources": [f"{s.path}:{s.line}" for s in e.sources]} for e in new]}

    def _propose(self, agent: AgentConfig, group: recurring.Group,
                 proposals: dict[str, Proposal]) -> PromotionProposed | None:
        hb = agent.heartbeat
        target = target_of(group, hb)
        identity = target != "MEMORY.md"
        seen = [p for p in proposals.values() if self._says(group, [p.text, *(s.text for s in p.sources)], hb)]
        if any(p.status == "rejected" for p in seen) or any((p.target != "MEMORY.md") == identity for p in seen):
            return None
        if self._says(group, _file_lines(agent, target), hb):
            return None  # the target holds it already (a person wrote it, or an earlier accept)
        occurrences = group.per_day()
        text = self._phrase([m.text for m in occurrences])
        return PromotionProposed(agent=agent.id, proposal_id=proposal_id(target, occurrences[0]), target=target,
                                 text=text, sources=[Occurrence(path=m.path, line=m.line, text=m.text)
                                                     for m in occurrences])

    def _says(self, group: recurring.Group, texts: list[str], hb: HeartbeatSettings) -> bool:
        """Whether any of ``texts`` says what a member of ``group`` says."""
        if not texts:
            return False
        members = [m.text for m in group.members]
        vectors = self._vectors(members + texts)
        cosines = vectors[:len(members)] @ vectors[len(members):].T
        return any(recurring.same_statement(m, t, float(cosines[i, j]), similarity=hb.similarity, overlap=hb.overlap)
                   for i, m in enumerate(group.members) for j, t in enumerate(texts))

    def _vectors(self, texts: list[str]) -> np.ndarray:
        """Embeddings of ``texts``, each text embedded once per heartbeat."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            self._cache.update(zip(missing, self.embed(missing), strict=True))
        return np.stack([self._cache[t] for t in texts])

    def _phrase(self, lines: list[str]) -> str:
        merged = redact(" ".join(self.llm.merge(lines).split()))
        return merged if merged and merged != "NO_REPLY" else Extractive().merge(lines)

    def tick(self) -> list[str]:
        """Enqueue the heartbeat of every agent that is due one in this interval; → those agents."""
        clock = self.clock()
        now = clock.timestamp()
        due = []
        for agent_id in self.settings.agent_ids():
            agent = self.settings.agent(agent_id)
            every = agent.heartbeat.every_minutes * 60
            slot = int(now // every)
            if not heartbeat_on(agent):
                continue
            if self.bus.conn.set(self.bus.key("heartbeat", agent_id, str(slot)), 1, nx=True, ex=int(every) + 60):
                self.bus.enqueue("heartbeat", agent_id, clock.date().isoformat(),
                                 job_id=self.bus.job_id(f"heartbeat-{agent_id}-{slot}"))
                due.append(agent_id)
        return due


def _file_lines(agent: AgentConfig, name: str) -> list[str]:
    path = agent.workspace / name
    if path.is_symlink() or not path.is_file():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = [_PROMOTED.sub("", recurring.strip_line(line)) for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def heartbeat_job(agent_id: str, day: str) -> dict[str, Any]:
    """The scheduled heartbeat of ``agent_id`` over the days up to ``day`` (when it was due)."""
    ctx = worker_context()
    return ctx.memo("heartbeat", lambda: Heartbeat(ctx.settings, ctx.bus)).run(agent_id, date.fromisoformat(day))
