"""The gcsfs filesystem as the run directory uses it: one try per request.

gcsfs retries inside each request (up to 6 tries, sleeping 1, 2, 4... up
to 32 s between them), invisible to the caller. Under our
:class:`~colab_resume.storage.retry.RetryPolicy` that nested loop would
multiply attempts, hide every fault from the ``on_retry`` hook (so the
panel and the events never say that storage is struggling), and impose
backoffs far longer than a 10 s heartbeat can afford. This subclass runs
gcsfs's request methods without their retry wrapper, so the policy is the
one retry loop, with its own budget and backoff.

It also uses the plain gcsfs class rather than the one ``gcsfs.GCSFileSystem``
may alias: with ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` on (the default) that
one probes each bucket's type over gRPC, which costs a 60 s timeout per
bucket against an emulator. Our protocol needs no HNS features.
"""

from __future__ import annotations

import logging
from typing import Any

import fsspec.asyn
from gcsfs.core import GCSFileSystem

from colab_resume.storage import auth
from colab_resume.storage.checksum import StreamingCrc32c

log = logging.getLogger(__name__)

# gcsfs methods decorated with its retry loop (gcsfs/retry.py: retry_request).
_RETRYING_METHODS = ("_request", "_get_file_request", "_get_file_concurrent")
# Bytes read from a download response at a time.
_CHUNK = 1 << 20


def _single_try(name: str) -> Any:
    method = getattr(GCSFileSystem, name, None)
    inner = getattr(method, "__wrapped__", None)
    if inner is None:  # another gcsfs version: keep its retries, still correct
        log.debug("gcsfs %s has no retry wrapper to remove", name)
        return method
    return inner


class SingleTryGCSFileSystem(GCSFileSystem):  # type: ignore[misc]  # gcsfs: untyped
    """gcsfs with its inner retry loop removed; see the module docstring."""

    # Keep fsspec's instance cache apart from plain gcsfs instances.
    protocol = ("gs", "gcs")


for _name in _RETRYING_METHODS:
    if hasattr(GCSFileSystem, _name):
        setattr(SingleTryGCSFileSystem, _name, _single_try(_name))


def open_filesystem(options: dict[str, Any]) -> SingleTryGCSFileSystem:
    """The gcsfs filesystem for ``options``, failing without showing a raw token.

    Args:
        options: gcsfs keyword arguments, credentials filled in
            (:func:`~colab_resume.storage.auth.gcs_options`).

    Returns:
        The filesystem.

    Raises:
        TokenCheckFailedError: ``token=`` is a raw access token that gcsfs
            could not check or would not accept.
    """
    token = options.get("token")
    if not auth.is_raw_token(token):
        return SingleTryGCSFileSystem(**options)
    try:
        return SingleTryGCSFileSystem(**options)
    except Exception as exc:  # gcsfs raises ValueError, requests' errors...
        failure = auth.token_check_failed(token, exc)
    # Raised here, not in the except block, so that no __context__ holds
    # gcsfs's error, whose text has the token in it.
    raise failure


async def _get_checked(fs: GCSFileSystem, rpath: str, lpath: str) -> tuple[int, str]:
    """One media GET of ``rpath`` streamed into ``lpath``: (bytes, CRC32C).

    gcsfs's own ``get_file`` first asks for the object's metadata (to choose
    between a plain and a ranged download): one extra round trip per file,
    which a restore that already holds the sizes and checksums from its
    listing and manifest does not need. The CRC32C is computed as the bytes
    arrive (in C, without the GIL), so verifying costs no second read.
    """
    from gcsfs.retry import validate_response

    await fs._set_session()
    checksum = StreamingCrc32c()
    async with fs.session.get(
        url=fs.url(rpath),
        params=fs._get_params({}),
        headers=fs._get_headers(None),
        timeout=fs.requests_timeout,
    ) as response:
        if response.status >= 400:
            validate_response(response.status, await response.read(), rpath)
        with open(lpath, "wb") as handle:
            while data := await response.content.read(_CHUNK):
                handle.write(data)
                checksum.update(data)
    return checksum.size, checksum.value


def get_file_checked(
    fs: GCSFileSystem, rpath: str, lpath: str, *, timeout: float | None = None
) -> tuple[int, str]:
    """Blocking :func:`_get_checked` on gcsfs's event loop."""
    result: tuple[int, str] = fsspec.asyn.sync(
        fs.loop, _get_checked, fs, rpath, lpath, timeout=timeout
    )
    return result
