"""``memoryd session …``: append turns, read the context, compact, reset, show the counters.

The commands work on the files directly (no HTTP server needed) and need Redis only for
the events and the jobs an append may trigger; the session worker (``memoryd worker
session``, started by ``memoryd up``) runs those jobs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import ValidationError

from memoryd.services.cli.output import print_json
from memoryd.services.cli.text import key_lines
from memoryd.services.session.service import NewMessage, Sessions, context_json
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import Settings
from memoryd.shared.exceptions import BadRequest, validation_problems
from memoryd.shared.runtime import bus as busmod
from memoryd.shared.runtime import redis_server


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("session", parents=[common])
    commands = p.add_subparsers(dest="session_command", required=True, metavar="SUBCOMMAND")

    def command(name: str, help_text: str, func: Any, *, json_help: str = "print the result as one JSON object"
                ) -> argparse.ArgumentParser:
        c = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        c.add_argument("--agent", default="main", help="agent id (default main)")
        c.add_argument("--session", required=True, help="session id: the transcript is sessions/<id>.jsonl")
        c.add_argument("--json", action="store_true", help=json_help)
        c.set_defaults(func=func)
        return c

    c = command("append", "append a turn (or JSON lines on stdin) to the session's transcript", cmd_append)
    c.add_argument("--role", choices=("user", "assistant", "tool"), help="who speaks (with --text)")
    c.add_argument("--text", help="the message; without it, read JSON objects (one per line) from stdin")
    c.add_argument("--name", help="tool name, for --role tool")
    c.add_argument("--tool-call-id", help="the tool call this result answers, for --role tool")
    command("context", "what would be sent to the model: bootstrap, summary, pruned turns, tokens", cmd_context)
    c = command("compact", "compact now (/compact): summarise older turns, keep recent ones", cmd_compact)
    c.add_argument("--focus", help="what the summary should focus on, e.g. 'decisions and open questions'")
    command("new", "end the conversation (/new) and save its session-memory note", cmd_new)
    command("reset", "end the conversation (/reset) and save its session-memory note", cmd_reset)
    command("show", "the session's counters: tokens, compactionCount, memoryFlushCompactionCount …", cmd_show)


def _sessions(settings: Settings) -> Sessions:
    conn = redis_server.connect(redis_server.redis_url(settings))
    return Sessions(settings, busmod.Bus(conn, settings))


def _print(args: argparse.Namespace, result: dict[str, Any], text: str) -> int:
    if args.json:
        print_json(result)
    else:
        print(text)
    return 0


def _messages(args: argparse.Namespace) -> list[NewMessage]:
    try:
        if args.text is not None:
            if not args.role:
                raise BadRequest("--text needs --role user|assistant|tool")
            return [NewMessage(role=args.role, content=args.text, name=args.name, tool_call_id=args.tool_call_id)]
        lines = [line for line in sys.stdin.read().splitlines() if line.strip()]
        if not lines:
            raise BadRequest("nothing to append: pass --role and --text, or JSON objects on stdin")
        return [NewMessage.model_validate_json(line) for line in lines]
    except ValidationError as exc:
        raise BadRequest(f"not a message: {validation_problems(exc)}") from None


def cmd_append(args: argparse.Namespace, settings: Settings) -> int:
    sessions = _sessions(settings)
    results = [sessions.append(args.agent, args.session, m) for m in _messages(args)]
    last = results[-1]
    notes = [k for k in ("flushRequested", "compactionRequested") if last[k]]
    text = f"appended {len(results)} message(s); session at {last['tokens']} tokens"
    text += "".join(f"; {n}" for n in notes) + (f"; reset ({last['reset']})" if last["reset"] else "")
    return _print(args, results[0] if len(results) == 1 else {"results": results}, text)


def cmd_context(args: argparse.Namespace, settings: Settings) -> int:
    result = context_json(_sessions(settings).context(args.agent, args.session))
    lines = [f"[{m['role']}] {m['content'][:200]}" for m in result["messages"]]
    lines.append(f"{len(result['messages'])} messages, {result['tokens']} tokens sent "
                 f"({result['sessionTokens']} unpruned)")
    said = (result["catchUp"] or {}).get("message")
    if said:
        print(f"memoryd: {said}", file=sys.stderr)
    return _print(args, result, "\n".join(lines))


def cmd_compact(args: argparse.Namespace, settings: Settings) -> int:
    done = _sessions(settings).compact(args.agent, args.session, manual=True, focus=args.focus)
    result = {"compacted": done is not None, **(done or {})}
    text = (f"compacted: {done['tokensBefore']} → {done['tokensAfter']} tokens "
            f"({done['summarised']} turns summarised, {done['kept']} kept)" if done else
            _why_nothing_to_compact(settings, args))
    return _print(args, result, text)


def _why_nothing_to_compact(settings: Settings, args: argparse.Namespace) -> str:
    """Compaction keeps the most recent turns verbatim: a session that fits in them has nothing older."""
    from memoryd.services.session.policy import Thresholds

    agent = settings.agent(args.agent)
    keep = min(agent.compaction.keep_recent_tokens, int(Thresholds.of(agent).base * d.COMPACT_KEEP_SHARE))
    tokens = context_json(_sessions(settings).context(args.agent, args.session))["sessionTokens"]
    return (f"nothing to compact: the session's {tokens} tokens fit in the recent turns kept verbatim ({keep} "
            f"tokens: compaction.keepRecentTokens = {agent.compaction.keep_recent_tokens}, at most half of the "
            f"{Thresholds.of(agent).base} tokens at which a flush or compaction starts); lower keepRecentTokens "
            "to compact shorter sessions")


def _end(args: argparse.Namespace, settings: Settings, reason: str) -> int:
    result = _sessions(settings).end(args.agent, args.session, reason, hook_inline=True)  # type: ignore[arg-type]
    text = (f"session ended ({reason}); saved {', '.join(result['files']) or 'no note'}" if result["reset"]
            else "the session has no messages; nothing to end")
    return _print(args, result, text)


def cmd_new(args: argparse.Namespace, settings: Settings) -> int:
    return _end(args, settings, "new")


def cmd_reset(args: argparse.Namespace, settings: Settings) -> int:
    return _end(args, settings, "reset")


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    result = _sessions(settings).show(args.agent, args.session)
    return _print(args, result, key_lines(result))
