"""The one console script, ``memoryd``. Global options ``--config`` and ``--state-dir`` work
before or after every command; errors become exit codes here and nowhere else."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from memoryd.shared.exceptions import ConfigError, MemorydError
from memoryd.shared.redact import redact

EXIT_ERROR = 1
EXIT_CONFIG = 2

#: Every command: the module (services/cli/<module>.py) that registers it, and its help line.
#: ``memoryd --help`` lists them without importing any module, and ``memoryd CMD …`` imports
#: CMD's module only, so nothing heavy (pydantic, rq, redis, numpy, the model) loads for a
#: command that does not use it. tests/test_cli_transport.py keeps this table equal to what
#: the modules register: a new command is added here too.
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("pipeline", "run every service in the foreground (Ctrl-C stops all)"),
    "redis": ("pipeline", "run a private Redis for this state dir in the foreground (the Procfile's redis line)"),
    "watcher": ("pipeline", "run the watcher service (file changes → events)"),
    "worker": ("pipeline", "run one stage's worker: chunk, embed, index or session"),
    "index": ("pipeline", "push every memory file of a workspace through the pipeline and wait"),
    "status": ("status", "files, chunks, missing vectors, queues and failing jobs per agent"),
    "doctor": ("status", "check Redis, sqlite-vec, tokenizer, provider, and each agent's memory hygiene"),
    "health": ("health", "exit 0 when Redis answers and (--stage) this machine's worker of a stage is alive"),
    "retry": ("jobs", "requeue failed jobs (all, or those of --agent / --stage, or the JOB_IDs given)"),
    "search": ("query", "memory_search: find snippets in an agent's memory"),
    "get": ("query", "memory_get: print exact lines of a memory file"),
    "serve": ("query", "run the HTTP query API (memory_search, memory_get)"),
    "mcp": ("query", "run the MCP server for one agent (stdio, or --http)"),
    "session": ("session", "session transcripts: append, context, compact, new, show"),
    "heartbeat": ("promote", "run one heartbeat of an agent now: propose what recurs"),
    "promote": ("promote", "the heartbeat's proposals: list, accept, reject"),
    "replay": ("log", "fold an agent's event log into an index: the live one, or --into PATH"),
    "log": ("log", "the durable event log: stats, diff"),
    "agents": ("agents", "add, list and remove agents; issue their tokens"),
}
#: Global options that take a value (skipped when looking for the command in the arguments).
_VALUED = ("--config", "--state-dir")


class _Parser(argparse.ArgumentParser):
    """argparse makes a help formatter for every ``add_argument`` (to check its metavar) and
    ``add_subparsers`` (to spell the commands' ``prog``), and a formatter imports ``shutil`` for
    the terminal's width: 5 ms of a `memoryd search` answered by a server. While the parser is
    built it gets formatters of a fixed width; help and errors get the terminal's."""

    _building = False

    def add_argument(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - argparse's own signature
        return self._built(super().add_argument, *args, **kwargs)

    def add_subparsers(self, **kwargs):  # noqa: ANN003, ANN201 - argparse's own signature
        return self._built(super().add_subparsers, **kwargs)

    def _built(self, method, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        self._building = True
        try:
            return method(*args, **kwargs)
        finally:
            self._building = False

    def _get_formatter(self) -> argparse.HelpFormatter:
        if self._building:
            return self.formatter_class(prog=self.prog, width=80)  # type: ignore[call-arg]
        return super()._get_formatter()


class _Version(argparse.Action):
    """``memoryd --version``: the installed package's version, looked up only when asked for
    (``importlib.metadata`` costs more to import than a `memoryd search` answered by a server)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print memoryd's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import version

        print(f"memoryd {version('memoryd')}")
        parser.exit()


class _Commands(argparse._SubParsersAction):
    """The top-level commands take their help line from COMMANDS, the one place it is written."""

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser:
        kwargs.setdefault("help", COMMANDS[name][1])
        return super().add_parser(name, **kwargs)


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The parser of ``command`` (its module's commands only); ``"*"``: every command (tests,
    docs); None: every command listed for ``--help``, none of their modules imported."""
    common = _Parser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="config file (JSON, the shape of openclaw.json); default $MEMORYD_CONFIG")
    common.add_argument("--state-dir", default=argparse.SUPPRESS,
                        help="where indexes, logs and caches live; default $MEMORYD_STATE_DIR or ~/.memoryd")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log more")
    parser = _Parser(
        prog="memoryd", parents=[common],
        description="Agent memory in Markdown, indexed by a pipeline of workers, searched by agents.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", action=_Commands)
    if command is None:
        for name in COMMANDS:
            sub.add_parser(name)
        return parser
    modules = dict.fromkeys(m for m, _ in COMMANDS.values())
    for module in modules if command not in COMMANDS else [COMMANDS[command][0]]:
        importlib.import_module(f"memoryd.services.cli.{module}").register(sub, common)
    _describe(parser)
    return parser


def _describe(parser: argparse.ArgumentParser) -> None:
    """Every (sub)command's ``--help`` opens with its help line unless it has a longer description."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                sub = action.choices[choice.dest]
                sub.description = sub.description or choice.help
                _describe(sub)


def _command(argv: list[str]) -> str | None:
    """The command named in ``argv`` (``"*"``: an unknown one, so argparse lists them all)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUED:
            skip = True
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else "*"
    return None


def _config_of_running_up(args: argparse.Namespace) -> None:
    """Given no --config and no $MEMORYD_CONFIG, use the config file of the `memoryd up` running on
    this state dir (services/cli/running.py), so every command sees the settings the services run with."""
    from memoryd.services.cli import running
    from memoryd.shared.config import environment

    if args.command == "up" or environment.config_file(getattr(args, "config", None)):
        return

    _, config = running.running_up(environment.state_dir(getattr(args, "state_dir", None), None))
    if config:
        args.config = config


def _log_setup(verbose: bool) -> None:
    import logging

    from memoryd.services.cli.redactlog import redact_logs

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    redact_logs()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command(argv))
    args = parser.parse_args(argv)
    _config_of_running_up(args)
    try:
        # search/get: a running server of this installation answers first (services/cli/remote.py),
        # before this process sets up logging or loads its settings, numpy or the model.
        answered = args.remote(args) if getattr(args, "remote", None) else None
        if answered is not None:
            return answered
        _log_setup(getattr(args, "verbose", False))
        from memoryd.shared.config.loader import load_settings

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
