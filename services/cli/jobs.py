"""Dead letters: ``memoryd status --failed`` lists the jobs whose retries are spent, and
``memoryd retry`` puts them back on their queue once the cause is fixed."""

from __future__ import annotations

import argparse
import time

import memoryd.services.pipeline  # noqa: F401  (the stages register their jobs with the bus)
import memoryd.services.session  # noqa: F401  (so do the session jobs)
from memoryd.services.cli.output import print_json
from memoryd.shared.config.settings import Settings
from memoryd.shared.runtime import bus as busmod
from memoryd.shared.runtime import redis_server
from memoryd.shared.runtime import retries as jobs


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("retry", parents=[common])
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID", help="only these failed jobs")
    p.add_argument("--agent", help="only the failed jobs of this agent")
    p.add_argument("--stage", choices=busmod.STAGES, help="only the failed jobs of this stage")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_retry)


def _bus(settings: Settings) -> busmod.Bus:
    return busmod.Bus(redis_server.connect(redis_server.redis_url(settings)), settings)


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


def failed_listing(settings: Settings, *, as_json: bool) -> int:
    """``memoryd status --failed``: one line (or JSON object) per failed job."""
    failed = jobs.failed_jobs(_bus(settings))
    if as_json:
        print_json({"failed": [j.as_dict() for j in failed]})
        return 0
    if not failed:
        print("no failed jobs")
    for j in failed:
        print(f"{j.id}  agent={j.agent or '-'}  stage={j.stage}  failed={_when(j.failed_at)}  {j.error or ''}")
    return 0


def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    requeued = jobs.retry_failed(_bus(settings), job_ids=args.job_ids, agent=args.agent, stage=args.stage)
    missing = sorted(set(args.job_ids) - set(requeued))
    if args.json:
        print_json({"requeued": requeued, "notFailed": missing})
    else:
        print(f"requeued {len(requeued)} failed job(s)" + (f": {' '.join(requeued)}" if requeued else ""))
        if missing:
            print(f"not failed (or gone): {' '.join(missing)}")
    return 1 if missing else 0
