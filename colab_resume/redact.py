"""Keep credentials out of text that leaves the process.

Error text travels far here: into ``heartbeat/<lease>.json`` (read by every
collaborator's ``colab-resume status``), history chunks, events, logs, the
panels and the ``--on-dead`` command's environment. A credential in any of
them is a leak into shared storage. So every such text passes through
:func:`redact` on its way out, which removes

- the exact strings registered with :func:`register_secret` (a raw access
  token passed as ``storage_options={"token": ...}``), and
- anything shaped like a credential: OAuth access tokens (``ya29.``),
  refresh tokens (``1//``) and JWTs, also glued to the word before them
  (``tokenya29...``); ``Bearer`` and HTTP Basic credentials and whatever
  follows ``Authorization:``; the password of a URL's userinfo
  (``sftp://user:PASSWORD@host``: any fsspec URL can be a run directory);
  ``access_token`` / ``refresh_token`` / ``private_key`` / ``secret``
  fields (also camelCase: ``accessToken`` in STS and IAM answers) however
  they are quoted and spaced; PEM private-key blocks in either case;
  OAuth client secrets (``GOCSPX-``) and AWS access key ids (an fsspec
  options repr holds both key and ``secret``); a resumable upload's
  ``upload_id`` (a bearer capability); GCS HMAC keys: the ``GOOG1...``
  access id (61 characters and more) and the 40-character base64 secret
  beside it (a word of exactly 40 base64 characters with upper and lower
  case and a digit: a hex digest has no upper case, so never matches);
  for error text that quotes a command: the value of an environment
  variable whose upper-case name ends in ``KEY``, ``TOKEN``, ``SECRET`` or
  ``PASSWORD`` (``WANDB_API_KEY=...``), of a command-line option whose name
  ends so (``--hf-token ...``, ``--db-password=...``), API keys and tokens
  of common services by their prefixes (``sk-``, ``hf_``, ``ghp_``...,
  ``xoxb-``...) and a Slack webhook's path.

Records never rely on this: what they keep is chosen field by field
(SECURITY.md). Shapes are the second line, for text that must be shown.

A registered secret is also removed where only its start survives (error
text cut to a length), from its first :data:`_MIN_SECRET_PREFIX`
characters on.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
import urllib.parse

REDACTED = "<redacted>"

# Token shapes are matched anywhere, not only at a word start: text built
# by concatenation ("token" + value) glues a token to the word before it.
_SHAPES = re.compile(
    "|".join(
        [
            r"(?i:-----BEGIN [A-Z ]*PRIVATE KEY-----).*?"
            r"(?:(?i:-----END [A-Z ]*PRIVATE KEY-----)|$)",
            r"(?i:ya29)\.[0-9A-Za-z_\-.]{8,}",
            r"GOCSPX-[0-9A-Za-z_\-]{8,}",
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
            r"\bsk-[0-9A-Za-z_\-]{20,}",
            r"\bhf_[0-9A-Za-z]{20,}",
            r"\bgh[pousr]_[0-9A-Za-z]{20,}",
            r"\bxox[abprs]-[0-9A-Za-z\-]{10,}",
            r"\bGOOG1[0-9A-Z]{56,}\b",
            r"(?<![0-9A-Za-z+/])(?=[0-9A-Za-z+/]{0,39}[A-Z])(?=[0-9A-Za-z+/]{0,39}[a-z])"
            r"(?=[0-9A-Za-z+/]{0,39}[0-9])[0-9A-Za-z+/]{40}(?![0-9A-Za-z+/=])",
            r"1//[0-9A-Za-z_\-]{16,}",
            r"eyJ[0-9A-Za-z_\-]{8,}\.[0-9A-Za-z_\-]{8,}\.[0-9A-Za-z_\-]*",
            r"\b(?i:bearer)\s+[0-9A-Za-z_\-.~+/=]+",
        ]
    ),
    re.DOTALL,
)
# How a name and its value are joined in JSON, a repr, a header, a query or
# an environment: `"k": "v"`, `"k" : "v"`, `'k' = 'v'`, `k=v`, `\"k\": \"v\"`.
_JOIN = r"""[\s"'\\]*[:=][\s"'\\]*"""
_VALUE = r"""[^\s"'\\,;}&]+"""
_FIELDS = re.compile(
    r"(?i)((?:access|refresh|id)_?token|private_?key|client_?secret|upload_?id"
    r"|(?:aws_)?secret(?:_access)?(?:_?key)?|hmac_?secret|session_?token)"
    rf"({_JOIN})({_VALUE})"
)
# The header's scheme ("Basic", "Token", ...) is kept; its credentials go.
_AUTHORIZATION = re.compile(
    rf"(?i)(\bauthorization{_JOIN}(?:[A-Za-z]+[ \t]+)?)({_VALUE})"
)
# scheme://user:PASSWORD@host: the user name and host stay, to be debugged.
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^\s/:@]*:)([^\s/@]+)(?=@)")
# NAME=value in an environment, --name value or --name=value on a command
# line, where the name says it holds a secret.
_SECRET_NAME = r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PWD)"
_ENVIRONMENT = re.compile(rf"(\b[A-Z][A-Z0-9_]*{_SECRET_NAME}=)([^\s\"']+)")
_OPTION = re.compile(
    rf"(?i)(--[a-z0-9][a-z0-9_\-]*{_SECRET_NAME}(?:=|[ \t]+))([^\s\"'-][^\s\"']*)"
)
# A Slack webhook is its own credential: the host stays, the path goes.
_WEBHOOK = re.compile(r"(?i)(https://hooks\.slack\.com/)[^\s\"']+")
# "Basic" is an English word: only base64 of "user:password" after it goes.
_BASIC = re.compile(r"\bBasic\s+([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])")


def _basic_credentials(match: re.Match[str]) -> str:
    try:
        decoded = base64.b64decode(match.group(1), validate=True)
    except (binascii.Error, ValueError):
        return match.group(0)
    if b":" not in decoded:
        return match.group(0)
    return match.group(0).replace(match.group(1), REDACTED)


_secrets: set[str] = set()
_lock = threading.Lock()

# Shorter strings would redact ordinary words; real tokens are far longer.
_MIN_SECRET_LENGTH = 8
# The start of a registered secret that marks the rest as it (cut short).
_MIN_SECRET_PREFIX = 12


def register_secret(value: str) -> None:
    """Remember ``value`` as a credential: :func:`redact` removes it everywhere.

    Its percent-encoded forms are remembered too: an HTTP error names the
    request's URL, whose query string may carry the value.
    """
    if isinstance(value, str) and len(value) >= _MIN_SECRET_LENGTH:
        forms = {
            value,
            urllib.parse.quote(value, safe=""),
            urllib.parse.quote_plus(value),
        }
        with _lock:
            _secrets.update(forms)


def _cut_short(text: str, secret: str) -> str:
    """``text`` without any run of ``secret``'s leading characters in it."""
    head = secret[:_MIN_SECRET_PREFIX]
    start = text.find(head)
    while start != -1:
        end = start + len(head)
        while end < len(text) and end - start < len(secret):
            if text[end] != secret[end - start]:
                break
            end += 1
        text = text[:start] + REDACTED + text[end:]
        start = text.find(head, start + len(REDACTED))
    return text


def redact(text: str) -> str:
    """``text`` with every registered secret and credential-shaped string removed."""
    if not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
        elif len(secret) > _MIN_SECRET_PREFIX and secret[:_MIN_SECRET_PREFIX] in text:
            text = _cut_short(text, secret)
    text = _SHAPES.sub(REDACTED, text)
    text = _BASIC.sub(_basic_credentials, text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    text = _WEBHOOK.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    text = _ENVIRONMENT.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    text = _OPTION.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return _FIELDS.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
