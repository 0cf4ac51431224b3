"""``memoryd heartbeat`` and ``memoryd promote list|accept|reject``: memory that curates itself.

``heartbeat --agent A`` runs one heartbeat now (the session service runs them on their
interval); ``promote`` lists its proposals and lets a person decide. Accepting appends the
statement to MEMORY.md, SOUL.md or TOOLS.md and commits it in the workspace's git; this is
the only way those files are written by memoryd (see docs/sessions.md, "Promotion").
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from memoryd.shared.config.settings import Settings


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    h = sub.add_parser("heartbeat", parents=[common], help="run one heartbeat of an agent now: propose what recurs")
    h.add_argument("--agent", default="main", help="agent id (default main)")
    h.add_argument("--json", action="store_true", help="print the result as one JSON object")
    h.set_defaults(func=cmd_heartbeat)

    p = sub.add_parser("promote", parents=[common], help="the heartbeat's proposals: list, accept, reject")
    commands = p.add_subparsers(dest="promote_command", required=True, metavar="SUBCOMMAND")
    c = commands.add_parser("list", parents=[common], help="list proposals (pending by default)")
    c.add_argument("--agent", default="main", help="agent id (default main)")
    c.add_argument("--status", choices=("pending", "accepted", "rejected", "all"), default="pending",
                   help="which proposals (default pending)")
    c.add_argument("--json", action="store_true", help="print {\"proposals\": [...]} as JSON")
    c.set_defaults(func=cmd_list)
    for name, help_text, func in (
            ("accept", "append a proposal to its target file and commit it in the workspace's git", cmd_accept),
            ("reject", "reject a proposal: it is never proposed again", cmd_reject)):
        c = commands.add_parser(name, parents=[common], help=help_text)
        c.add_argument("id", help="the proposal's id (from `memoryd promote list`)")
        c.add_argument("--agent", default="main", help="agent id (default main)")
        c.add_argument("--json", action="store_true", help="print the proposal as JSON")
        if name == "reject":
            c.add_argument("--reason", help="why (kept in the ledger)")
        c.set_defaults(func=func)


def _bus(settings: Settings) -> Any:
    from memoryd.shared.runtime import redis_server
    from memoryd.shared.runtime.bus import Bus

    return Bus(redis_server.connect(redis_server.redis_url(settings)), settings)


def _print(args: argparse.Namespace, result: dict[str, Any], text: str) -> int:
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.json else text)
    return 0


def _line(p: dict[str, Any]) -> str:
    return f"{p['id']}  {p['status']:<8} → {p['target']}: {p['text']}\n    seen in {', '.join(p['sources'])}"


def cmd_heartbeat(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.session.heartbeat import Heartbeat

    result = Heartbeat(settings, _bus(settings)).run(args.agent)
    if not result["ran"]:
        return _print(args, result, f"heartbeat of {args.agent} not run: {result['reason']}")
    text = (f"heartbeat of {args.agent}: {result['lines']} lines in {len(result['files'])} daily logs, "
            f"{result['recurring']} recurring, {len(result['proposed'])} proposed")
    text += "".join(f"\n  {p['id']} → {p['target']}: {p['text']}" for p in result["proposed"])
    return _print(args, result, text)


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.session.promote_api import listing

    status = None if args.status == "all" else args.status
    proposals = listing(settings, _bus(settings), args.agent, status)
    text = "\n".join(_line(p) for p in proposals) or f"no {args.status} proposals for agent {args.agent}"
    return _print(args, {"proposals": proposals}, text)


def cmd_accept(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.session.promotion import accept

    done = accept(settings, _bus(settings), args.agent, args.id, now=datetime.now().astimezone()).wire()
    commit = f", commit {done['commit'][:10]}" if done["commit"] else " (the workspace is not a git repository)"
    return _print(args, done, f"accepted {done['id']}: appended to {done['target']} line {done['line']}{commit}")


def cmd_reject(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.session.promotion import reject

    done = reject(settings, _bus(settings), args.agent, args.id, args.reason).wire()
    return _print(args, done, f"rejected {done['id']}: it will not be proposed again")
