"""The Cloud Storage store, and the gcsfs filesystem it uses: one try per request.

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

import contextlib
import email.utils
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import fsspec.asyn
from gcsfs.core import GCSFileSystem

from colab_resume.errors import (
    BucketNotFoundError,
    PermissionDeniedError,
    UnsupportedURLError,
)
from colab_resume.redact import redact
from colab_resume.storage import auth
from colab_resume.storage.checksum import StreamingCrc32c
from colab_resume.storage.faults import http_status
from colab_resume.storage.fsspec_store import FsspecStore

log = logging.getLogger(__name__)

# gcsfs methods decorated with its retry loop (gcsfs/retry.py: retry_request).
_RETRYING_METHODS = ("_request", "_get_file_request", "_get_file_concurrent")
# Bytes read from a download response at a time.
_CHUNK = 1 << 20
# Object metadata key naming the write call that created a create-only object.
WRITE_ID_KEY = "colab-resume-write-id"
# An upload streams its file in reads of this size (or of ``chunk_bytes``
# where smaller): what one upload holds of its file at a time.
UPLOAD_READ = 1 << 20
# Below this size gcsfs sends a file in one multipart request, read whole:
# one round trip where the streamed upload takes two.
ONE_REQUEST_BELOW = 5 << 20


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


async def _put_streamed(
    fs: GCSFileSystem, lpath: str, rpath: str, read_bytes: int
) -> None:
    """One resumable session and one request whose body streams ``lpath``.

    gcsfs's own put reads a file of up to its ``chunksize`` whole into one
    request, or sends it in pieces of ``chunksize``, a request each, each
    piece held in memory. Streaming the body gives one request (one round
    trip on GCS; on the emulator, half the server CPU of 4 MiB pieces) with
    ``read_bytes`` held at a time, whatever the file's size. The CRC32C of
    what was read is checked against the object the server made; a
    mismatch is gcsfs's ``ChecksumError``, which the retry policy retries.
    """
    from gcsfs.core import initiate_upload
    from gcsfs.retry import ChecksumError

    bucket, key, _ = fs.split_path(rpath)
    size = os.path.getsize(lpath)
    content_type = "application/octet-stream"
    location = await initiate_upload(fs, bucket, key, content_type)
    checksum = StreamingCrc32c()

    async def body() -> AsyncIterator[bytes]:
        # Local reads of a staging file are fast and short; doing them on
        # the loop spares a thread hop per read.
        with open(lpath, "rb") as handle:
            while data := handle.read(read_bytes):
                checksum.update(data)
                yield data

    headers = {
        "Content-Type": content_type,
        "Content-Length": str(size),
        "Content-Range": f"bytes 0-{size - 1}/{size}",
    }
    _, text = await fs._call("PUT", location, headers=headers, data=body())
    made = json.loads(text) if text else {}
    if checksum.size != size:
        raise ChecksumError(f"{lpath} changed while it was uploaded to {rpath}")
    if made.get("crc32c") not in (None, checksum.value):
        raise ChecksumError(
            f"{rpath}: the server stored CRC32C {made['crc32c']}, the file "
            f"read {checksum.value}"
        )


class GcsStore(FsspecStore):
    """A run directory in a Cloud Storage bucket; see :class:`Store`.

    Create-only is ``ifGenerationMatch=0`` with a write id kept as object
    metadata (:meth:`written_by`); ``updated`` and :meth:`server_time` are
    the server's clock; the bucket's existence and our access to it are
    checked by :meth:`check`.
    """

    # Cloud Storage serves each object from many frontends and sets no
    # per-user request limit a checkpoint's files approach: one stream
    # (tens of MB/s) is the ceiling, so more streams move more.
    transfer_streams = 16

    def __init__(
        self, url: str, protocol: str, root: str, storage_options: dict[str, Any]
    ) -> None:
        options = auth.gcs_options(dict(storage_options))
        options.setdefault("requests_timeout", 60.0)
        options.setdefault("use_listings_cache", False)
        self.principal = auth.describe_principal(options.get("token"))
        super().__init__(url, protocol, root, options)

    @classmethod
    def validate_url(cls, url: str, root: str) -> None:
        if not root:
            raise UnsupportedURLError(
                f"run_dir {url!r} names no bucket. Use 'gs://BUCKET/runs/NAME'."
            )

    def _open(self, options: dict[str, Any]) -> Any:
        return open_filesystem(options)

    @property
    def bucket(self) -> str:
        return self.root.split("/", 1)[0]

    # --- the primitives ----------------------------------------------------

    def check(self, *, timeout: float | None = None) -> None:
        self._bucket_headers(timeout)

    def _bucket_headers(self, timeout: float | None) -> dict[str, str]:
        try:
            headers, _ = self.fs.call(
                "GET", "b/{}", self.bucket, **self._limit(timeout)
            )
        except FileNotFoundError:
            raise BucketNotFoundError(
                f"The bucket 'gs://{self.bucket}' of run_dir {self.url!r} does "
                f"not exist (or is in another project). Create it with "
                f"`gcloud storage buckets create gs://{self.bucket} "
                f"--location=<region near your runtime>` or fix the name."
            ) from None
        return dict(headers)

    def server_time(self, *, timeout: float | None = None) -> float:
        """The ``Date`` header of a bucket request (1 s resolution)."""
        date = self._bucket_headers(timeout).get("Date")
        if not date:
            log.warning("storage: no Date header from the server; using local clock")
            return time.time()
        # Date is truncated to whole seconds: the midpoint is the unbiased guess.
        return email.utils.parsedate_to_datetime(date).timestamp() + 0.5

    def exists(self, rel: str, *, timeout: float | None = None) -> bool:
        # One metadata GET. gcsfs's exists() also probes for a "directory" of
        # that name, tripling the cost of the fence check made every beat.
        key = self.path(rel).split("/", 1)[1]
        try:
            self.fs.call("GET", "b/{}/o/{}", self.bucket, key, **self._limit(timeout))
        except FileNotFoundError:
            return False
        return True

    def read(
        self, rel: str, *, max_bytes: int | None = None, timeout: float | None = None
    ) -> bytes:
        try:
            return super().read(rel, max_bytes=max_bytes, timeout=timeout)
        except Exception as exc:
            if max_bytes is not None and http_status(exc) == 416:
                return b""  # no range of an empty object
            raise

    def write(
        self,
        rel: str,
        data: bytes,
        *,
        create_only: bool,
        write_id: str,
        timeout: float | None = None,
    ) -> None:
        # A create whose response is lost (connection reset, truncated body)
        # gets retried, and then meets the object it made itself: 412,
        # FileExistsError, although this write won. The tag tells the two
        # apart (written_by).
        tag = {"metadata": {WRITE_ID_KEY: write_id}} if create_only else {}
        mode = "create" if create_only else "overwrite"
        self.fs.pipe_file(
            self.path(rel), data, mode=mode, **tag, **self._limit(timeout)
        )

    def written_by(
        self, rel: str, write_id: str, *, timeout: float | None = None
    ) -> bool:
        raw = self.fs.info(self.path(rel), **self._limit(timeout))
        return bool((raw.get("metadata") or {}).get(WRITE_ID_KEY) == write_id)

    def put_file(
        self,
        local_path: str,
        rel: str,
        *,
        timeout: float | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        """A small file in one request; a larger one streamed (:func:`_put_streamed`).

        gcsfs reads a file of up to 50 MiB whole, and asyncio buffers the
        part of a request the socket has not taken yet: a 32 MiB shard held
        twice per upload in flight. Streamed, an upload holds at most
        ``chunk_bytes`` (1 MiB by default) of its file at a time.
        """
        if os.path.getsize(local_path) < ONE_REQUEST_BELOW:
            self.fs.put_file(local_path, self.path(rel), **self._limit(timeout))
            return
        read_bytes = min(UPLOAD_READ, chunk_bytes or UPLOAD_READ)
        fsspec.asyn.sync(
            self.fs.loop,
            _put_streamed,
            self.fs,
            local_path,
            self.path(rel),
            max(1, read_bytes),
            timeout=timeout,
        )

    def get_file_checked(
        self, rel: str, local_path: str, *, timeout: float | None = None
    ) -> tuple[int, str]:
        """One media GET, no metadata request before it, CRC32C as it streams."""
        return get_file_checked(self.fs, self.path(rel), local_path, timeout=timeout)

    # --- faults ------------------------------------------------------------

    def refresh_credentials(self) -> None:
        """Refresh the google-auth credentials unconditionally.

        gcsfs's ``maybe_refresh`` refreshes only tokens the client itself
        believes expired; a token the server rejects early (revoked, or a
        clock that disagrees) would be sent again and again.
        """
        holder = getattr(self.fs, "credentials", None)  # gcsfs GoogleCredentials
        credentials = getattr(holder, "credentials", None)
        if credentials is None or not hasattr(credentials, "refresh"):
            return  # anonymous: nothing to refresh
        try:
            import google.auth.transport.requests
            import requests

            lock = getattr(holder, "lock", None) or contextlib.nullcontext()
            with requests.Session() as session, lock:
                credentials.refresh(google.auth.transport.requests.Request(session))
                heads = getattr(holder, "heads", None)
                if isinstance(heads, dict):
                    credentials.apply(heads)
        except Exception as exc:  # the retry will report the real fault
            # Type only: a refresh error's text may quote token material.
            log.warning(
                "storage: refreshing credentials failed: %s", type(exc).__name__
            )

    def permission_denied(
        self, operation: str, exc: BaseException
    ) -> PermissionDeniedError:
        return PermissionDeniedError(
            f"Permission denied to {operation} in bucket 'gs://{self.bucket}' for "
            f"{self.principal} ({redact(str(exc))}). Grant that principal "
            f"read/write access (`gcloud storage buckets add-iam-policy-binding "
            f"gs://{self.bucket} --member=<principal> "
            f"--role=roles/storage.objectAdmin`) or authenticate as an account "
            f"that has it."
        )
