"""The only code that performs I/O on a run directory.

A :class:`Storage` wraps one fsspec filesystem rooted at the run directory
and offers the handful of operations the protocol needs: small JSON records
(optionally create-only), file transfer, listing with server-side
timestamps, deletion, and the server's clock. Every call goes through one
choke point that retries transient faults and turns permanent ones into
errors that say what to do.

Knows nothing of TensorFlow.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import email.utils
import errno
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import fsspec

from colab_resume.errors import (
    BucketNotFoundError,
    CorruptRecordError,
    PermissionDeniedError,
    RunDirNotFoundError,
    TooManyObjectsError,
    UnsafePathError,
    UnsupportedURLError,
)
from colab_resume.redact import redact
from colab_resume.storage import auth, local_faults
from colab_resume.storage.checksum import StreamingCrc32c
from colab_resume.storage.faults import http_status, is_forbidden
from colab_resume.storage.records import MAX_RECORD_BYTES, decode
from colab_resume.storage.retry import RetryHook, RetryPolicy, call_with_retry

log = logging.getLogger(__name__)

T = TypeVar("T")
Limit = dict[str, float]  # keyword arguments that bound one fsspec call

GCS_PROTOCOLS = ("gs", "gcs")
# Object metadata key naming the write call that created a create-only object.
WRITE_ID_KEY = "colab-resume-write-id"
# A run makes a few objects per checkpoint, lease and history chunk; a
# listing far beyond that is not the run's, and would cost minutes and
# gigabytes in every reader.
MAX_LIST_OBJECTS = 100_000


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    """One object of the run directory, as the storage server describes it.

    Attributes:
        path: path relative to the run directory, with ``/`` separators.
        size: size in bytes.
        updated: last modification, seconds since the epoch, by the
            server's clock.
        crc32c: the server's CRC32C (base64, GCS style) when it keeps one.
    """

    path: str
    size: int
    updated: float
    crc32c: str | None = None


def split_url(url: str) -> tuple[str, str]:
    """Split a run directory URL into (protocol, path inside the filesystem).

    Raises:
        UnsupportedURLError: the scheme is unknown, or its fsspec backend is
            not installed.
    """
    if not isinstance(url, (str, os.PathLike)) or not str(url).strip():
        raise UnsupportedURLError(
            f"run_dir must be a non-empty string such as 'gs://bucket/runs/name' "
            f"or a local path, got {url!r}."
        )
    text = os.fspath(url)
    for scheme in ("gs", "gcs"):
        if text.startswith(f"{scheme}:/") and not text.startswith(f"{scheme}://"):
            # fsspec would take it for a local folder named "gs:".
            fixed = f"{scheme}://" + text[len(scheme) + 1 :].lstrip("/")
            raise UnsupportedURLError(
                f"run_dir {text!r} has one slash after '{scheme}:'; did you mean "
                f"{fixed!r}?"
            )
    protocol, _ = fsspec.core.split_protocol(text)
    protocol = protocol or "file"
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise UnsupportedURLError(
            f"Unknown URL scheme {protocol + '://'!r} in run_dir {text!r}. Use "
            f"'gs://bucket/path' for Google Cloud Storage, a local path, or "
            f"'memory://name' for tests."
        ) from None
    except ImportError as exc:
        raise UnsupportedURLError(
            f"run_dir {text!r} needs the fsspec backend for {protocol!r}, which "
            f"is not installed ({exc}). Install it (for example "
            f"`pip install s3fs` for s3://) or use a gs:// or local run_dir."
        ) from None
    path = cls._strip_protocol(text).rstrip("/")
    if protocol in GCS_PROTOCOLS and not path:
        raise UnsupportedURLError(
            f"run_dir {text!r} names no bucket. Use 'gs://BUCKET/runs/NAME'."
        )
    return protocol, path


class Storage:
    """A run directory on any fsspec filesystem (GCS, local, memory).

    Args:
        url: the run directory: ``gs://bucket/path``, a local path, or
            ``memory://path``.
        storage_options: passed to the fsspec filesystem (for GCS:
            ``token=``, ``endpoint_url=``, ``project=``...).
        retry: retry budget for transient faults.
        on_retry: told about each retried fault (for events).
        max_list_objects: most objects one listing may return; more raise
            :class:`~colab_resume.errors.TooManyObjectsError`.

    In a local run directory no path below the run directory may be a
    symlink, and no record path a directory: both raise
    :class:`~colab_resume.errors.UnsafePathError` rather than being followed
    (a symlinked ``history/`` would make every write land outside).
    """

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        max_list_objects: int = MAX_LIST_OBJECTS,
    ) -> None:
        if isinstance(max_list_objects, bool) or not (
            isinstance(max_list_objects, int) and max_list_objects > 0
        ):
            raise ValueError(
                f"max_list_objects must be a positive integer, got "
                f"{max_list_objects!r}; the default is {MAX_LIST_OBJECTS}."
            )
        self.max_list_objects = max_list_objects
        self.url = os.fspath(url)
        self.protocol, self.root = split_url(self.url)
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        options = dict(storage_options or {})
        if self.is_gcs:
            options = auth.gcs_options(options)
            options.setdefault("requests_timeout", 60.0)
            options.setdefault("use_listings_cache", False)
            self.principal = auth.describe_principal(options.get("token"))
        else:
            self.principal = "the local user"
        if self.protocol == "file":
            options.setdefault("auto_mkdir", True)
            self.root = os.path.abspath(self.root)
        options.setdefault("skip_instance_cache", True)
        self.fs = _filesystem(self.protocol, options)

    # --- naming -------------------------------------------------------------

    @property
    def is_gcs(self) -> bool:
        return self.protocol in GCS_PROTOCOLS

    @property
    def bucket(self) -> str | None:
        return self.root.split("/", 1)[0] if self.is_gcs else None

    def full(self, rel: str) -> str:
        """Filesystem path of ``rel`` (relative to the run directory).

        Raises:
            UnsafePathError: locally, a part of ``rel`` is a symlink.
        """
        if not rel:
            return self.root
        if self.protocol == "file":
            self._refuse_links(rel)
        return f"{self.root}/{rel}"

    def _refuse_links(self, rel: str) -> None:
        """Refuse a symlink anywhere below the (local) run directory.

        The run directory itself may be a link; what is inside it is the
        protocol's, and a link there would send writes and deletions (of
        retention) to wherever it points.
        """
        path = self.root
        for part in rel.strip("/").split("/"):
            path = os.path.join(path, part)
            if os.path.islink(path):
                raise UnsafePathError(
                    f"{path} is a symbolic link inside the run directory "
                    f"{self.url}; colab_resume never follows links there, so "
                    f"that nothing is written or deleted outside it. Remove the "
                    f"link (`rm {path}`; move what you need from where it points "
                    f"first), or to keep the run on another disk point run_dir "
                    f"there or link the run directory itself."
                )

    def _record_path(self, rel: str) -> str:
        """Filesystem path of the record ``rel``; refuses a local directory there.

        Sessions create records as files, atomically: a directory in a
        record's place is damage. Read, it would crash the reader
        (IsADirectoryError); created, it would look like a lost race.
        """
        path = self.full(rel)
        if self.protocol == "file" and os.path.isdir(path):
            raise UnsafePathError(
                f"{path} is a directory where colab_resume keeps a record (a "
                f"file); no session makes that, so it is damage. Remove it "
                f"(`rm -r {path}`) to let the run use that name."
            )
        return path

    def __repr__(self) -> str:
        return f"Storage({self.url!r})"

    def with_retry(self, retry: RetryPolicy) -> Storage:
        """The same run directory and connection under another retry budget.

        The heartbeat uses this so one beat's retries never outlast the
        interval between beats.
        """
        clone = copy.copy(self)
        clone.retry = retry
        return clone

    # --- the choke point ----------------------------------------------------

    def _call(self, operation: str, func: Callable[[Limit], T]) -> T:
        """Run ``func(limit)`` under the retry policy.

        ``func`` must pass ``**limit`` to the fsspec call it makes. On gcsfs
        that is ``timeout=<what is left of the retry budget>``: gcsfs retries
        inside each request on its own (6 tries, ~31 s of sleeps), unseen by
        the policy, which would stretch a 3 s budget to ~35 s. The timeout
        cancels that inner loop when the budget is spent, so the budget
        bounds the whole call.
        """
        deadline: list[float] = []  # set when the first attempt starts

        def attempt() -> T:
            if not deadline:
                deadline.append(time.monotonic() + self.retry.total_seconds)
            left = deadline[0] - time.monotonic()
            if left <= 0:
                raise TimeoutError(self._budget_spent())
            if not getattr(self.fs, "async_impl", False):
                return func({})  # local, memory: no inner retries to bound
            try:
                return func({"timeout": left})
            except fsspec.exceptions.FSTimeoutError:
                if time.monotonic() < deadline[0]:
                    raise  # requests_timeout of a single request: retry it
                raise TimeoutError(self._budget_spent()) from None

        try:
            return call_with_retry(
                attempt,
                operation=operation,
                policy=self.retry,
                refresh_credentials=self._refresh_credentials,
                on_retry=self.on_retry,
            )
        except OSError as exc:
            if self.protocol == "file":
                explained = local_faults.explain(exc, operation, self.root)
                if explained is not None:
                    raise explained from None
            if is_forbidden(exc) and not isinstance(exc, PermissionDeniedError):
                raise self._permission_denied(operation, exc) from None
            raise

    def _budget_spent(self) -> str:
        return (
            f"still failing when the {self.retry.total_seconds:g}s retry budget "
            f"ran out (gcsfs was retrying inside the request)"
        )

    def _refresh_credentials(self) -> None:
        """Get a new access token after a 401, before the retry.

        gcsfs's ``maybe_refresh`` refreshes only tokens the client itself
        believes expired; a token the server rejects early (revoked, or a
        clock that disagrees) would be sent again and again. So the
        google-auth credentials are refreshed unconditionally.
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

    def _permission_denied(
        self, operation: str, exc: BaseException
    ) -> PermissionDeniedError:
        if not self.is_gcs:
            return PermissionDeniedError(
                f"Permission denied to {operation} in {self.url} for "
                f"{self.principal} ({redact(str(exc))}). Give this user read/write "
                f"access to that directory (`chown`/`chmod`), or point run_dir "
                f"at one it can write."
            )
        return PermissionDeniedError(
            f"Permission denied to {operation} in bucket 'gs://{self.bucket}' for "
            f"{self.principal} ({redact(str(exc))}). Grant that principal "
            f"read/write access (`gcloud storage buckets add-iam-policy-binding "
            f"gs://{self.bucket} --member=<principal> "
            f"--role=roles/storage.objectAdmin`) or authenticate as an account "
            f"that has it."
        )

    # --- checks -------------------------------------------------------------

    def check(self) -> None:
        """Verify the bucket exists and is ours to use (GCS; a no-op elsewhere).

        Raises:
            BucketNotFoundError, PermissionDeniedError, NoCredentialsError.
        """
        if self.is_gcs:
            self._bucket_headers()

    def require_run_dir(self) -> None:
        """For readers (``cr.inspect``, the CLI): a local run directory must exist.

        A session creates its local run directory on its first write, so a
        reader pointed at a missing one has a typo, not a run nobody started
        yet. (A GCS prefix exists only once written: there, missing is NEW.)

        Raises:
            RunDirNotFoundError: a local run directory that does not exist.
        """
        if self.protocol == "file" and not os.path.isdir(self.root):
            raise RunDirNotFoundError(
                f"no run directory at {self.root} (a local path). Check the "
                f"path; for Cloud Storage write gs://BUCKET/runs/NAME."
            )

    def _bucket_headers(self) -> dict[str, str]:
        try:
            headers, _ = self._call(
                f"read the bucket gs://{self.bucket}",
                lambda limit: self.fs.call("GET", "b/{}", self.bucket, **limit),
            )
        except FileNotFoundError:
            raise BucketNotFoundError(
                f"The bucket 'gs://{self.bucket}' of run_dir {self.url!r} does "
                f"not exist (or is in another project). Create it with "
                f"`gcloud storage buckets create gs://{self.bucket} "
                f"--location=<region near your runtime>` or fix the name."
            ) from None
        return dict(headers)

    def server_time(self) -> float:
        """Now, by the storage server's clock (seconds since the epoch).

        Liveness compares object timestamps with this rather than with the
        reader's clock, so a reader whose clock is off reaches the same
        verdict. GCS: the ``Date`` header of a bucket request (1 s
        resolution). Local and memory: this machine's clock, which is the
        clock that stamped the files.
        """
        if not self.is_gcs:
            return time.time()
        date = self._bucket_headers().get("Date")
        if not date:
            log.warning("storage: no Date header from the server; using local clock")
            return time.time()
        # Date is truncated to whole seconds: the midpoint is the unbiased guess.
        return email.utils.parsedate_to_datetime(date).timestamp() + 0.5

    # --- reading ------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        """Whether the object ``rel`` exists (objects only, not "directories")."""
        if not self.is_gcs:
            # A local directory is not an object, as a GCS "folder" is not.
            path = self.full(rel)
            found: bool = self._call(
                f"check {rel}", lambda limit: self.fs.isfile(path, **limit)
            )
            return found
        # One metadata GET. gcsfs's exists() also probes for a "directory" of
        # that name, tripling the cost of the fence check made every beat.
        key = self.full(rel).split("/", 1)[1]

        def get(limit: Limit) -> bool:
            try:
                self.fs.call("GET", "b/{}/o/{}", self.bucket, key, **limit)
            except FileNotFoundError:
                return False
            return True

        return self._call(f"check {rel}", get)

    def read_bytes(self, rel: str, *, max_bytes: int | None = None) -> bytes:
        """Read an object whole; at most ``max_bytes`` (CorruptRecordError beyond).

        Raises:
            FileNotFoundError: no such object.
        """
        path = self._record_path(rel)
        if max_bytes is None:
            whole: bytes = self._call(
                f"read {rel}", lambda limit: self.fs.cat_file(path, **limit)
            )
            return whole

        def read_head(limit: Limit) -> bytes:
            try:
                head: bytes = self.fs.cat_file(
                    path, start=0, end=max_bytes + 1, **limit
                )
                return head
            except Exception as exc:
                if http_status(exc) == 416:  # GCS: no range of an empty object
                    return b""
                raise

        data = self._call(f"read {rel}", read_head)
        if len(data) > max_bytes:
            raise CorruptRecordError(
                f"{self.url}/{rel} is larger than {max_bytes} bytes; it is not a "
                f"record colab_resume wrote. Delete or move it."
            )
        return data

    def read_json(
        self, rel: str, *, max_bytes: int = MAX_RECORD_BYTES
    ) -> dict[str, Any]:
        """Read a JSON object record. The content is treated as untrusted.

        Raises:
            FileNotFoundError: no such object.
            CorruptRecordError: too big, too deep, a number out of range, not
                JSON, or not a JSON object (see :func:`records.decode`).
        """
        data = self.read_bytes(rel, max_bytes=max_bytes)
        return decode(data, f"{self.url}/{rel}")

    def info(self, rel: str) -> ObjectInfo:
        """Metadata of one object. Raises FileNotFoundError if absent."""
        path = self._record_path(rel)
        raw = self._call(f"stat {rel}", lambda limit: self.fs.info(path, **limit))
        return self._object_info(raw)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """All objects under ``prefix`` (recursively), sorted by path.

        Raises:
            TooManyObjectsError: more than ``max_list_objects`` of them.
        """
        path = self.full(prefix)

        def find(limit: Limit) -> dict[str, dict[str, Any]]:
            try:
                found: dict[str, dict[str, Any]] = self.fs.find(
                    path, detail=True, withdirs=False, **limit
                )
                return found
            except FileNotFoundError:
                return {}

        found = self._call(f"list {prefix or '/'}", find)
        if len(found) > self.max_list_objects:
            raise self._too_many(prefix, found)
        objects = (self._object_info(raw) for raw in found.values())
        # Skip the temporary files of local writes still in progress.
        visible = (
            o for o in objects if not o.path.rsplit("/", 1)[-1].startswith(".tmp-")
        )
        return sorted(visible, key=lambda item: item.path)

    def _too_many(self, prefix: str, found: dict[str, Any]) -> TooManyObjectsError:
        folders: dict[str, int] = {}
        for name in found:
            rel = name.removeprefix(self.root + "/")
            top = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
            folders[top] = folders.get(top, 0) + 1
        biggest = sorted(folders.items(), key=lambda item: -item[1])[:3]
        where = ", ".join(f"{folder}: {count}" for folder, count in biggest)
        return TooManyObjectsError(
            f"{self.url} holds more than {self.max_list_objects} objects under "
            f"{prefix or '/'} ({where}); a run makes a few per checkpoint, lease "
            f"and history chunk. Delete what does not belong to the run, most "
            f"likely under {self.url}/{biggest[0][0]}, (`colab-resume prune` "
            f"removes old checkpoints), or pass a larger max_list_objects."
        )

    def _object_info(self, raw: dict[str, Any]) -> ObjectInfo:
        name = raw["name"]
        rel = name[len(self.root) + 1 :] if name.startswith(self.root + "/") else name
        return ObjectInfo(
            path=rel,
            size=int(raw.get("size") or 0),
            updated=_timestamp(raw),
            crc32c=raw.get("crc32c"),
        )

    def get_file(self, rel: str, local_path: str) -> None:
        """Download one object to a local file."""
        path = self.full(rel)
        self._call(
            f"download {rel}",
            lambda limit: self.fs.get_file(path, local_path, **limit),
        )

    def get_file_checked(self, rel: str, local_path: str) -> tuple[int, str]:
        """Download one object; return its size and CRC32C as they arrived.

        One request per object (on GCS the media GET alone: no metadata
        request before it), and the CRC32C (base64, GCS style) is computed
        while the bytes stream, so checking a download against a manifest
        needs neither another request nor another read of the file.

        Raises:
            FileNotFoundError: no such object.
        """
        path = self.full(rel)
        if self.is_gcs:
            from colab_resume.storage.gcs import get_file_checked

            return self._call(
                f"download {rel}",
                lambda limit: get_file_checked(self.fs, path, local_path, **limit),
            )
        return self._call(
            f"download {rel}", lambda _: self._copy_checked(path, local_path)
        )

    def _copy_checked(self, path: str, local_path: str) -> tuple[int, str]:
        checksum = StreamingCrc32c()
        with self.fs.open(path, "rb") as source, open(local_path, "wb") as target:
            while data := source.read(1 << 20):
                target.write(data)
                checksum.update(data)
        return checksum.size, checksum.value

    # --- writing ------------------------------------------------------------

    def write_bytes(self, rel: str, data: bytes, *, create_only: bool = False) -> None:
        """Write an object whole, atomically replacing any previous version.

        Args:
            create_only: fail with FileExistsError if the object exists
                (GCS ``ifGenerationMatch=0``; locally an atomic hard link).
        """
        path = self._record_path(rel)
        verb = "create" if create_only else "write"
        if self.protocol == "file":
            self._call(f"{verb} {rel}", lambda _: _local_write(path, data, create_only))
            return
        mode = "create" if create_only else "overwrite"
        # A create whose response is lost (connection reset, truncated body)
        # gets retried, by gcsfs or by us, and then meets the object it made
        # itself: 412, FileExistsError, although this write won. A tag unique
        # to this call, stored as object metadata, tells the two apart.
        write_id = uuid.uuid4().hex
        tag = (
            {"metadata": {WRITE_ID_KEY: write_id}}
            if create_only and self.is_gcs
            else {}
        )
        try:
            self._call(
                f"{verb} {rel}",
                lambda limit: self.fs.pipe_file(path, data, mode=mode, **tag, **limit),
            )
        except FileNotFoundError:
            # GCS answers a write into a missing bucket with 404.
            self.check()
            raise
        except FileExistsError:
            if tag and self._write_id(rel) == write_id:
                log.info("storage: %s was created by an earlier attempt", rel)
                return
            raise

    def _write_id(self, rel: str) -> str | None:
        raw = self._call(
            f"stat {rel}", lambda limit: self.fs.info(self.full(rel), **limit)
        )
        return (raw.get("metadata") or {}).get(WRITE_ID_KEY)

    def write_json(
        self, rel: str, value: dict[str, Any], *, create_only: bool = False
    ) -> None:
        data = json.dumps(value, indent=1, sort_keys=True).encode("utf-8")
        self.write_bytes(rel, data, create_only=create_only)

    def put_file(self, local_path: str, rel: str) -> None:
        """Upload one local file (not atomic on its own: commit with a marker)."""
        path = self.full(rel)
        self._call(
            f"upload {rel}",
            lambda limit: self.fs.put_file(local_path, path, **limit),
        )

    def delete(self, rel: str) -> None:
        """Delete one object; deleting what is already gone is not an error."""
        path = self.full(rel)

        def rm(limit: Limit) -> None:
            try:
                self.fs.rm_file(path, **limit)
            except FileNotFoundError:
                pass

        self._call(f"delete {rel}", rm)

    def remove_empty_folder(self, rel: str) -> None:
        """Remove the folder ``rel`` if it is empty, where folders exist.

        Object stores have none (a prefix vanishes with its last object); a
        local run directory would keep one per deleted checkpoint.
        """
        if self.protocol == "file":
            with contextlib.suppress(OSError):  # not empty, or already gone
                os.rmdir(self.full(rel))


def _filesystem(protocol: str, options: dict[str, Any]) -> Any:
    if protocol in GCS_PROTOCOLS:
        from colab_resume.storage.gcs import open_filesystem

        return open_filesystem(options)
    return fsspec.filesystem(protocol, **options)


def _timestamp(raw: dict[str, Any]) -> float:
    """Modification time from an fsspec info dict, whichever backend made it."""
    for key in ("updated", "mtime", "created", "LastModified"):
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.timezone.utc)
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return datetime.datetime.fromisoformat(
                value.replace("Z", "+00:00")
            ).timestamp()
    return 0.0


def _local_write(path: str, data: bytes, create_only: bool) -> None:
    """Write via a temporary file so readers never see half a record.

    Create-only uses ``os.link``, which fails atomically if the target
    exists; overwrite uses ``os.replace``.
    """
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if create_only:
            try:
                os.link(tmp, path)  # FileExistsError if someone else was first
            except FileExistsError:
                raise
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                    raise  # the disk, not the links: explained by the choke point
                raise local_faults.no_hard_links(exc, path) from None
        else:
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
