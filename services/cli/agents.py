"""Agent commands: ``agents add``, ``agents list``, ``agents remove``, ``agents token``.

Agents added here live in the registry beside the config file (``<stateDir>/agents.json``);
running workers, the watcher and the query service pick the change up without a restart.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memoryd.services.cli.output import print_json
from memoryd.services.cli.status import print_result
from memoryd.shared.config.bootstrap import ensure_workspace
from memoryd.shared.config.settings import ExtraPath, ProviderName, Settings
from memoryd.shared.config.tokens import ADMIN, Tokens, agent_principal
from memoryd.shared.exceptions import BadRequest
from memoryd.shared.redact import redact
from memoryd.shared.runtime import redis_server
from memoryd.shared.runtime import roster as agents
from memoryd.shared.runtime.bus import Bus


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("agents", parents=[common])
    own = p.add_subparsers(dest="agents_command", required=True, metavar="ACTION")

    a = own.add_parser("add", parents=[common], help="add an agent with its workspace (created if missing)")
    a.add_argument("id", help="agent id: letters, digits, '_', '.', '-'")
    a.add_argument("--workspace", required=True, help="the agent's workspace folder")
    a.add_argument("--extra-path", action="append", default=[], metavar="[SOURCE=]PATH",
                   help="a knowledge-base folder indexed with the agent's memory (source name default kb); repeat")
    a.add_argument("--provider", choices=ProviderName.__args__, help="embedding provider (default: the defaults')")
    a.add_argument("--model", help="embedding model (default: the provider's)")
    a.add_argument("--json", action="store_true", help="print the agent as JSON")
    a.set_defaults(func=cmd_add)

    a = own.add_parser("list", parents=[common], help="every agent: workspace, provider, index, token")
    a.add_argument("--json", action="store_true", help="print JSON")
    a.set_defaults(func=cmd_list)

    a = own.add_parser("remove", parents=[common],
                       help="remove an agent: its index, log and token go, its Markdown stays")
    a.add_argument("id", help="agent id")
    a.add_argument("--json", action="store_true", help="print what was removed as JSON")
    a.set_defaults(func=cmd_remove)

    a = own.add_parser("token", parents=[common],
                       help="issue (or rotate) an agent's bearer token, or the admin token; printed last")
    who = a.add_mutually_exclusive_group(required=True)
    who.add_argument("id", nargs="?", help="the agent the token is for")
    who.add_argument("--admin", action="store_true", help="the admin token: every agent and /v1/agents")
    a.set_defaults(func=cmd_token)


def _extra_path(raw: str) -> ExtraPath:
    source, sep, path = raw.partition("=")
    if not sep:
        source, path = "kb", raw
    if not source or not path:
        raise BadRequest(f"--extra-path {raw!r}: give PATH or SOURCE=PATH")
    return ExtraPath(path=str(Path(path).expanduser().resolve()), source=source)


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    settings = agents.add_agent(settings, args.id, Path(args.workspace), [_extra_path(x) for x in args.extra_path],
                                provider=args.provider, model=args.model)
    created = ensure_workspace(settings.agent(args.id))
    [entry] = [a for a in agents.describe(settings) if a["id"] == args.id]
    print_result({**entry, "workspaceCreated": created}, args.json)
    return 0


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    listed = agents.describe(settings)
    if args.json:
        print_json({"agents": listed})
        return 0
    for a in listed:
        extra = ", ".join(f"{e['source']}={e['path']}" for e in a["extraPaths"])
        print(f"{a['id']:<16} {a['workspace']}  [{a['provider']}{' ' + a['model'] if a['model'] else ''}]"
              f"{'  extra: ' + extra if extra else ''}  ({a['definedIn']}"
              f"{', indexed' if a['indexed'] else ''}{', token' if a['token'] else ''})")
    return 0


def cmd_remove(args: argparse.Namespace, settings: Settings) -> int:
    result = agents.remove_agent(settings, args.id)
    url = redis_server.redis_url(settings)
    if redis_server.answers(url):
        Bus(redis_server.connect(url), settings).forget(args.id)
        result["redis"] = "its keys deleted"
    else:
        result["redis"] = f"not reachable at {redact(url)}: nothing to delete there now"
    print_result(result, args.json)
    return 0


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    if args.admin:
        principal, what = ADMIN, "admin token (every agent, /v1/agents)"
    else:
        settings.agent(args.id)  # unknown agent → UnknownAgent
        principal, what = agent_principal(args.id), f"token of agent {args.id!r} (its routes only)"
    token = Tokens(settings.data_dir).issue(principal)
    print(f"memoryd: new {what}; any previous one no longer works. Send it as 'Authorization: Bearer …'.")
    print(token)
    return 0
