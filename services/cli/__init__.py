"""The one console script, ``memoryd``: one module per command group, errors → exit codes here."""

from memoryd.services.cli.app import main

__all__ = ["main"]
