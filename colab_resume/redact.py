"""Keep credentials out of text that leaves the process.

Error text travels far here: into ``heartbeat/<lease>.json`` (read by every
collaborator's ``colab-resume status``), history chunks, events, logs, the
panels and the ``--on-dead`` command's environment. A credential in any of
them is a leak into shared storage. So every such text passes through
:func:`redact` on its way out, which removes

- the exact strings registered with :func:`register_secret` (a raw access
  token passed as ``storage_options={"token": ...}``), and
- anything shaped like a credential: OAuth access tokens (``ya29.``),
  refresh tokens (``1//``), JWTs, ``Bearer`` headers, ``access_token`` /
  ``refresh_token`` / ``private_key`` fields and PEM private-key blocks.
"""

from __future__ import annotations

import re
import threading

REDACTED = "<redacted>"

_SHAPES = re.compile(
    "|".join(
        [
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?"
            r"(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
            r"\bya29\.[0-9A-Za-z_\-.]+",
            r"\b1//[0-9A-Za-z_\-]{16,}",
            r"\beyJ[0-9A-Za-z_\-]{8,}\.[0-9A-Za-z_\-]{8,}\.[0-9A-Za-z_\-]*",
            r"\b(?i:bearer)\s+[0-9A-Za-z_\-.~+/=]+",
        ]
    ),
    re.DOTALL,
)
# "access_token": "...", access_token=..., 'private_key': '...'
_FIELDS = re.compile(
    r"(?i)((?:access|refresh|id)_token|private_key|client_secret)"
    r"(\W{1,4})([^\s\"',}&]+)"
)

_secrets: set[str] = set()
_lock = threading.Lock()

# Shorter strings would redact ordinary words; real tokens are far longer.
_MIN_SECRET_LENGTH = 8


def register_secret(value: str) -> None:
    """Remember ``value`` as a credential: :func:`redact` removes it everywhere."""
    if isinstance(value, str) and len(value) >= _MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """``text`` with every registered secret and credential-shaped string removed."""
    if not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _SHAPES.sub(REDACTED, text)
    return _FIELDS.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
