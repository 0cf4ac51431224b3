"""``memoryd health``: a container's healthcheck. Exit 0 when Redis answers ``PING`` and, with
``--stage``, a worker of that stage on this machine (in a container: the container's own) has a
live heartbeat in Redis; exit 1 otherwise, saying what is missing."""

from __future__ import annotations

import argparse

import redis

from memoryd.services.cli.output import print_json
from memoryd.shared.config.settings import Settings
from memoryd.shared.redact import redact
from memoryd.shared.runtime import bus as busmod
from memoryd.shared.runtime import redis_server
from memoryd.shared.runtime.liveness import local_alive


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("health", parents=[common])
    p.add_argument("--stage", choices=busmod.STAGES,
                   help="also require a live worker of this stage on this machine (its heartbeat key in Redis)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_health)


def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    url = redis_server.redis_url(settings)
    workers: list[str] = []
    try:
        conn = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        conn.ping()
        problem = None
        if args.stage:
            workers = local_alive(conn, args.stage)
            problem = None if workers else f"no live {args.stage} worker on this machine"
    except redis.RedisError as exc:
        problem = f"Redis at {redact(url)} does not answer: {redact(str(exc))}"
    if args.json:
        print_json({"healthy": problem is None, "problem": problem, "workers": workers})
    else:
        print(problem or ("ok" + (f": {', '.join(workers)}" if workers else "")))
    return 0 if problem is None else 1
