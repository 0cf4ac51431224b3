"""The one console script, ``memoryd``. Global options ``--config`` and ``--state-dir`` work
before or after every command; errors become exit codes here and nowhere else."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from memoryd.services.cli import agents, jobs, log, pipeline, query, session, status
from memoryd.shared.config import load_settings
from memoryd.shared.exceptions import ConfigError, MemorydError
from memoryd.shared.redact import redact, redact_logs

EXIT_ERROR = 1
EXIT_CONFIG = 2


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="config file (JSON, the shape of openclaw.json); default $MEMORYD_CONFIG")
    common.add_argument("--state-dir", default=argparse.SUPPRESS,
                        help="where indexes, logs and caches live; default $MEMORYD_STATE_DIR or ~/.memoryd")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log more")
    parser = argparse.ArgumentParser(
        prog="memoryd", parents=[common],
        description="Agent memory in Markdown, indexed by a pipeline of workers, searched by agents.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pipeline.register(sub, common)
    status.register(sub, common)
    jobs.register(sub, common)
    query.register(sub, common)
    session.register(sub, common)
    log.register(sub, common)
    agents.register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    redact_logs()
    try:
        settings = load_settings(getattr(args, "config", None), getattr(args, "state_dir", None))
        return int(args.func(args, settings) or 0)
    except ConfigError as exc:
        print(f"memoryd: {redact(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    except MemorydError as exc:
        print(f"memoryd: {redact(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `memoryd status --json | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
