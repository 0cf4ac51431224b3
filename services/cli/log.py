"""Event log commands: ``replay`` (an index folded from the log), ``log stats``, ``log diff``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from memoryd.services.cli.output import print_json
from memoryd.services.cli.status import print_result
from memoryd.shared.config.settings import Settings
from memoryd.shared.log.fold import Until


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("replay", parents=[common])
    p.add_argument("--agent", default="main", help="agent id (default main)")
    p.add_argument("--until", help="the index as it was then: an ISO date or time, or a sequence number "
                                   "(needs --into)")
    p.add_argument("--into", type=Path, help="write the index here and leave the live one alone")
    p.add_argument("--reembed", action="store_true",
                   help="embed chunks without a stored vector (after a model or chunking change)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("log", parents=[common])
    log_sub = p.add_subparsers(dest="log_command", required=True, metavar="LOG_COMMAND")
    s = log_sub.add_parser("stats", parents=[common], help="size, events and the oldest replayable moment")
    s.add_argument("--agent", default="main", help="agent id (default main)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_stats)
    s = log_sub.add_parser("diff", parents=[common],
                           help="memory lines added, changed or removed between two moments, and by whom")
    s.add_argument("--agent", default="main", help="agent id (default main)")
    s.add_argument("--since", required=True, help="from this moment: ISO date or time, or a sequence number")
    s.add_argument("--until", help="to this moment (default: now)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_diff)


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.shared.rebuild.replay import replay

    result = replay(settings, args.agent, until=Until.parse(args.until) if args.until else None,
                    into=args.into, reembed=args.reembed)
    print_result(result, args.json)
    return 0


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.shared.log.checkpoints import stats

    settings.agent(args.agent)
    print_result(stats(settings, args.agent), args.json)
    return 0


def cmd_diff(args: argparse.Namespace, settings: Settings) -> int:
    from memoryd.services.cli.history import diff

    settings.agent(args.agent)
    result = diff(settings, args.agent, Until.parse(args.since), Until.parse(args.until) if args.until else None)
    if args.json:
        print_json(result)
    else:
        print(format_diff(result))
    return 0


def format_diff(result: dict[str, Any]) -> str:
    """One block per change: when, which file, which event and who wrote it; then its lines."""
    total = result["summary"]
    lines = [f"{total['changes']} changes to {total['files']} files: +{total['lines_added']} "
             f"-{total['lines_removed']} ~{total['lines_changed']} lines"]
    for c in result["changes"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["at"]))
        lines.append(f"{when}  {c['path']}  {c['event']} seq {c['seq']} ({c['status']})  by {c['writer']}")
        lines += [f"  + {a['line']}: {a['text']}" for a in c["added"]]
        lines += [f"  - {r['line']}: {r['text']}" for r in c["removed"]]
        lines += [f"  ~ {x['line']}: {x['old']}  →  {x['new']}" for x in c["changed"]]
    return "\n".join(lines)
