"""Credentials never leave in what memoryd prints: ``redis://:secret@host`` → ``redis://:***@host``.

:func:`redact` masks the password (or a lone token) of every URL in a text; the CLI, the
HTTP error handlers and every log record (``services/cli/redactlog.py``'s filter, installed on the
root handlers by the CLI) pass what they show through it. User names stay visible: they
say which account is meant and are not secret.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://[user][:password]@host — the userinfo part ends at the last '@' before the host.
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:@/\s]*)(?::(?P<password>[^@/\s]*))?@")


def _mask(match: re.Match[str]) -> str:
    user, password = match["user"], match["password"]
    if password is None:  # redis://token@host: a lone userinfo is a password to Redis and most APIs
        return f"{match['scheme']}{MASK}@" if user else match[0]
    return f"{match['scheme']}{user}:{MASK}@"


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL in it masked."""
    return _USERINFO.sub(_mask, text) if "://" in text else text
