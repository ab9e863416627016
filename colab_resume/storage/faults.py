"""Sort storage exceptions into transient (retry) and permanent (fail fast).

gcsfs raises a zoo of exception types depending on where a request broke
(HTTP status, aiohttp, requests, google-auth, plain OSError). This module is
the one place that knows them, so the retry policy and the error messages
can both stay simple.
"""

from __future__ import annotations

import asyncio
import errno
import re

from colab_resume.redact import redact

# HTTP statuses GCS documents as worth retrying.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


# The cause a transport error buries in its text ("... Max retries exceeded
# with url: ... (Caused by NewConnectionError(... [Errno 111] Connection
# refused'))"): the part a person needs.
_OS_CAUSE = re.compile(r"\[Errno -?\d+\] [^'\")\]]+")
_BRIEF_CHARS = 160


def brief(exc: BaseException) -> str:
    """``exc`` in one short line, credentials removed: for a retry's log line."""
    text = redact(str(exc))
    cause = _OS_CAUSE.search(text)
    if cause is not None:
        text = cause.group(0).strip()
    elif len(text) > _BRIEF_CHARS:
        text = text[: _BRIEF_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def http_status(exc: BaseException) -> int | None:
    """The HTTP status carried by ``exc``, if any (gcsfs HttpError, aiohttp)."""
    for attr in ("code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def is_forbidden(exc: BaseException) -> bool:
    """gcsfs turns a 403 into a bare OSError whose text starts 'Forbidden'."""
    if isinstance(exc, PermissionError):
        return True
    return http_status(exc) == 403 or str(exc).startswith("Forbidden")


def is_unauthenticated(exc: BaseException) -> bool:
    """A 401: the access token expired or was revoked."""
    return http_status(exc) == 401


def is_transient(exc: BaseException) -> bool:
    """True when repeating the same request may succeed.

    Transient: 5xx, 408, 429, 401 (the token is refreshed before the retry),
    connection resets, timeouts, truncated bodies. Permanent: everything
    that says the request itself is wrong (404, 403, 412, bad arguments).
    """
    if isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError)):
        return False
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        return False
    # A store that knows better says so (Drive's 403 "rate limit exceeded").
    verdict = getattr(exc, "transient", None)
    if isinstance(verdict, bool):
        return verdict
    status = http_status(exc)
    if status is not None:
        return status in TRANSIENT_STATUSES or status == 401
    if is_forbidden(exc):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
        return True
    if isinstance(exc, OSError) and exc.errno in (
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ETIMEDOUT,
        errno.EPIPE,
    ):
        return True
    return _is_transport_error(exc)


def _is_transport_error(exc: BaseException) -> bool:
    # Imported lazily: these libraries come with gcsfs, which local and
    # memory:// run directories never need.
    transport: list[type[BaseException]] = []
    try:
        import aiohttp

        transport.append(aiohttp.ClientError)
    except ImportError:  # pragma: no cover - gcsfs always brings aiohttp
        pass
    try:
        import requests

        transport.append(requests.exceptions.ConnectionError)
        transport.append(requests.exceptions.Timeout)
        transport.append(requests.exceptions.ChunkedEncodingError)
    except ImportError:  # pragma: no cover
        pass
    try:
        import google.auth.exceptions

        transport.append(google.auth.exceptions.TransportError)
    except ImportError:  # pragma: no cover
        pass
    try:
        from fsspec.exceptions import FSTimeoutError

        transport.append(FSTimeoutError)
    except ImportError:  # pragma: no cover
        pass
    try:
        from gcsfs.retry import ChecksumError

        transport.append(ChecksumError)
    except ImportError:
        pass
    return isinstance(exc, tuple(transport))
