"""What looks like a secret in memory text (SPEC §8: secrets stay out of memory).

Private keys, well-known API-token shapes (OpenAI ``sk-…``, GitHub ``ghp_…``, Slack
``xox…-``, AWS ``AKIA…``, Google ``AIza…``) and the value after ``password:`` /
``token =`` / ``api key is`` …. The session service replaces them with ``[redacted]``
before it writes a note (:func:`redact`); ``memoryd doctor`` names the memory files and
lines that hold one (:func:`secret_lines`) without showing it. A pattern list, not a
guarantee.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL)
_TOKENS = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}"
                     r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35})")
_LABELLED = re.compile(r"(?i)\b(password|passwd|passphrase|secret|token|api[ _-]?key|access[ _-]?key)"
                       r"(\s*(?:is\s+|[:=]\s*))([^\s,;]+)")


def redact(text: str) -> str:
    """``text`` with every secret it seems to hold replaced by ``[redacted]``."""
    for pattern in (_PRIVATE_KEY, _TOKENS):
        text = pattern.sub(REDACTED, text)
    return _LABELLED.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def secret_lines(text: str) -> dict[int, str]:
    """Line number (1-based) → what seems to be there (``private key``, ``API token``,
    ``password`` …) for every line of ``text`` holding a secret; the secret is not returned."""
    found: dict[int, str] = {}

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    for m in _PRIVATE_KEY.finditer(text):
        found.setdefault(line_of(m.start()), "private key")
    for m in _TOKENS.finditer(text):
        found.setdefault(line_of(m.start()), "API token")
    for m in _LABELLED.finditer(text):
        if m.group(3) != REDACTED:
            found.setdefault(line_of(m.start()), m.group(1).lower())
    return dict(sorted(found.items()))
