"""Proposals to promote a recurring statement, and what a person decides about them.

The heartbeat (services/session/heartbeat.py) proposes; a person accepts or rejects with
``memoryd promote accept|reject`` (or the HTTP routes). Every step is an event —
``promotion.proposed``, ``promotion.accepted``, ``promotion.rejected`` — logged to the agent's
event log and appended to its ledger ``<state>/promotions/<agent>.jsonl``. The ledger is the
fold of those events: when it is missing it is folded again from the event log, so no
decision is lost with it (a rejected statement never comes back).

``PROMOTIONS.md`` at the top of the workspace is the review list a person reads: rewritten
from the ledger after every change (memoryd owns it; edit the target files, not it). It is
not indexed for search.

Accepting appends the statement to its target with ``append_promoted`` (``O_APPEND``: no
line a person wrote is touched) and commits that file in the workspace's git with a message
naming the sources. Nothing else writes MEMORY.md, SOUL.md or TOOLS.md.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from memoryd.services.session.memfiles import append_promoted
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.events import Occurrence, PromotionAccepted, PromotionProposed, PromotionRejected, parse_event
from memoryd.shared.exceptions import MemorydError
from memoryd.shared.log.eventlog import log_dir, read
from memoryd.shared.runtime.bus import Bus

REVIEW_FILE = "PROMOTIONS.md"
Status = Literal["pending", "accepted", "rejected"]
PromotionEvent = PromotionProposed | PromotionAccepted | PromotionRejected


class ProposalNotFound(MemorydError):
    code = "not_found"
    http_status = 404


class ProposalDecided(MemorydError):
    code = "conflict"
    http_status = 409


class Proposal(BaseModel):
    """One proposal as the ledger folds it (the wire shape of ``promote list --json``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    target: Literal["MEMORY.md", "SOUL.md", "TOOLS.md"]
    text: str
    sources: list[Occurrence]
    status: Status = "pending"
    proposed_at: float
    decided_at: float | None = None
    line: int | None = None
    commit: str | None = None
    reason: str | None = None

    def wire(self) -> dict[str, object]:
        return {"id": self.id, "target": self.target, "text": self.text, "status": self.status,
                "sources": [f"{s.path}:{s.line}" for s in self.sources],
                "proposedAt": self.proposed_at, "decidedAt": self.decided_at, "line": self.line,
                "commit": self.commit, "reason": self.reason}


def ledger_path(settings: Settings, agent: str) -> Path:
    return settings.data_dir / "promotions" / f"{agent}.jsonl"


def fold(events: list[PromotionEvent]) -> dict[str, Proposal]:
    """Proposals by id, in the order they were proposed; a repeated event changes nothing."""
    found: dict[str, Proposal] = {}
    for e in events:
        if isinstance(e, PromotionProposed):
            found.setdefault(e.proposal_id, Proposal(id=e.proposal_id, target=e.target, text=e.text,
                                                     sources=e.sources, proposed_at=e.emitted_at))
        elif e.proposal_id in found and found[e.proposal_id].status == "pending":
            p = found[e.proposal_id]
            if isinstance(e, PromotionAccepted):
                found[p.id] = p.model_copy(update={"status": "accepted", "decided_at": e.emitted_at,
                                                   "line": e.line, "commit": e.commit})
            else:
                found[p.id] = p.model_copy(update={"status": "rejected", "decided_at": e.emitted_at,
                                                   "reason": e.reason})
    return found


class Ledger:
    """One agent's proposals: read and changed under one ``flock``, so a heartbeat and an accept
    (or two heartbeats) never decide on what the other is changing."""

    def __init__(self, settings: Settings, bus: Bus, agent: str) -> None:
        self.settings = settings
        self.bus = bus
        self.agent = agent
        self.path = ledger_path(settings, agent)

    @contextmanager
    def locked(self) -> Iterator[dict[str, Proposal]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.proposals()
        finally:
            os.close(fd)

    def proposals(self) -> dict[str, Proposal]:
        if not self.path.exists():
            self._refold()
        events = []
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                event = parse_event(line)
                if not isinstance(event, PromotionProposed | PromotionAccepted | PromotionRejected):
                    raise MemorydError(f"{self.path}:{number} holds a {event.type} event, not a promotion; "
                                       "move the file away and it is folded again from the event log")
                events.append(event)
        return fold(events)

    def _refold(self) -> None:
        """The ledger folded again from the agent's event log (it was deleted, or never written)."""
        kinds = {"promotion.proposed", "promotion.accepted", "promotion.rejected"}
        lines = [json.dumps(r.event, ensure_ascii=False) for r in read(log_dir(self.settings, self.agent))
                 if r.type in kinds]
        temp = self.path.with_suffix(".tmp")
        temp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        os.replace(temp, self.path)

    def record(self, events: list[PromotionEvent]) -> None:
        """Log the events (the record) and append them to the ledger (call inside :meth:`locked`)."""
        self.bus.log(events)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write("".join(e.model_dump_json() + "\n" for e in events))


def _one(proposals: dict[str, Proposal], agent: str, proposal_id: str) -> Proposal:
    found = proposals.get(proposal_id)
    if found is None:
        raise ProposalNotFound(f"agent {agent} has no proposal {proposal_id!r}; `memoryd promote list --agent "
                               f"{agent}` shows them")
    if found.status != "pending":
        raise ProposalDecided(f"proposal {proposal_id} of agent {agent} was {found.status} already")
    return found


def accept(settings: Settings, bus: Bus, agent_id: str, proposal_id: str, *, now: datetime) -> Proposal:
    """Append the proposal to its target, commit that file, record ``promotion.accepted``."""
    workspace = settings.agent(agent_id).workspace
    ledger = Ledger(settings, bus, agent_id)
    with ledger.locked() as proposals:
        p = _one(proposals, agent_id, proposal_id)
        sources = ", ".join(f"{s.path}:{s.line}" for s in p.sources)
        line = append_promoted(workspace, p.target, f"- {p.text} (promoted {now:%Y-%m-%d} from {sources})")
        commit = git_commit(workspace, p.target, f"memoryd: promote {p.id} to {p.target}\n\n{p.text}\n\n"
                                                 f"Seen in: {sources}")
        event = PromotionAccepted(agent=agent_id, proposal_id=p.id, target=p.target, line=line, commit=commit)
        ledger.record([event])
        done = ledger.proposals()
    write_review(settings, agent_id, done)
    return done[p.id]


def reject(settings: Settings, bus: Bus, agent_id: str, proposal_id: str, reason: str | None = None) -> Proposal:
    """Record ``promotion.rejected``: the statement is never proposed again."""
    settings.agent(agent_id)
    ledger = Ledger(settings, bus, agent_id)
    with ledger.locked() as proposals:
        p = _one(proposals, agent_id, proposal_id)
        event = PromotionRejected(agent=agent_id, proposal_id=p.id, reason=reason)
        ledger.record([event])
        done = ledger.proposals()
    write_review(settings, agent_id, done)
    return done[p.id]


def git_commit(workspace: Path, target: str, message: str) -> str | None:
    """Commit ``target`` alone in the workspace's own git repository; → the commit id, or None when
    the workspace is not the top of a git repository (or git is not installed)."""
    git = shutil.which("git")
    if git is None:
        return None

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([git, "-C", str(workspace), *argv], capture_output=True, text=True,
                              timeout=d.GIT_TIMEOUT_SECONDS, check=False)

    top = run("rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != workspace.resolve():
        return None
    for argv in (("add", "--", target),
                 ("-c", "user.name=memoryd", "-c", "user.email=memoryd@localhost", "commit", "-q",
                  "-m", message, "--", target)):
        done = run(*argv)
        if done.returncode != 0:
            raise MemorydError(f"{target} was appended in {workspace}, but `git {argv[0]}` failed: "
                               f"{done.stderr.strip() or done.stdout.strip()}; commit it by hand")
    return run("rev-parse", "HEAD").stdout.strip()


def write_review(settings: Settings, agent_id: str, proposals: dict[str, Proposal]) -> str:
    """Rewrite ``PROMOTIONS.md`` from the ledger; → its workspace-relative path."""
    agent = settings.agent(agent_id)
    marker = agent.heartbeat.marker
    pending = [p for p in proposals.values() if p.status == "pending"]
    decided = sorted((p for p in proposals.values() if p.status != "pending"),
                     key=lambda p: p.decided_at or 0, reverse=True)[:d.REVIEW_DECIDED_SHOWN]
    out = [f"# {REVIEW_FILE} — what the heartbeat proposes to promote",
           "",
           "Written by memoryd from its ledger; changes here are replaced. Decide with",
           f"`memoryd promote accept ID --agent {agent_id}` or `memoryd promote reject ID --agent {agent_id}`.",
           "", "## Pending", ""]
    for p in pending:
        out.append(f"- {marker} `{p.id}` → {p.target}: {p.text}")
        out.append(f"  - seen in {', '.join(f'{s.path}:{s.line}' for s in p.sources)}")
    if not pending:
        out.append("(none)")
    out += ["", "## Decided", ""]
    for p in decided:
        where = f" (line {p.line}{', commit ' + p.commit[:10] if p.commit else ''})" if p.line else ""
        out.append(f"- {p.status} `{p.id}` → {p.target}{where}: {p.text}")
    if not decided:
        out.append("(none)")
    path = agent.workspace / REVIEW_FILE
    temp = agent.workspace / f".{REVIEW_FILE}.tmp"
    temp.write_text("\n".join(out) + "\n", encoding="utf-8")
    os.replace(temp, path)  # replaces a symlink itself, never what it points at
    return REVIEW_FILE
