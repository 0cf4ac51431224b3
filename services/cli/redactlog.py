"""Log records pass through :func:`memoryd.shared.redact.redact` too: a filter on the root handlers.

Apart from ``redact.py`` so that a command answered by a running server (``memoryd search``)
never imports ``logging``.
"""

from __future__ import annotations

import logging

from memoryd.shared.redact import redact


class RedactingFilter(logging.Filter):
    """Masks credentials in a log record's message (after its arguments are filled in)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def redact_logs() -> None:
    """Install :class:`RedactingFilter` on every handler of the root logger (call after logging is set up)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
