"""The only code that performs I/O on a run directory.

A :class:`Storage` wraps one :class:`~colab_resume.storage.store_contract.Store`
(local, GCS, any other fsspec filesystem) rooted at the run directory and
offers the handful of operations the protocol needs: small JSON records
(optionally create-only), file transfer, listing with server-side
timestamps, deletion, and the server's clock. Every call goes through one
choke point that retries transient faults and turns permanent ones into
errors that say what to do. What differs between kinds of storage lives
in the stores; nothing here asks which one it has.

Knows nothing of TensorFlow.
"""

from __future__ import annotations

import builtins
import copy
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import fsspec

from colab_resume.errors import (
    CorruptRecordError,
    PermissionDeniedError,
    TooManyObjectsError,
    UnsupportedURLError,
)
from colab_resume.parsing import MAX_RECORD_BYTES, decode
from colab_resume.storage import drivefs
from colab_resume.storage.faults import is_forbidden
from colab_resume.storage.retry import RetryHook, RetryPolicy, call_with_retry
from colab_resume.storage.store_contract import DRIVE_PROTOCOLS, ObjectInfo, Store
from colab_resume.storage.stores import store_class

log = logging.getLogger(__name__)

T = TypeVar("T")
# A run makes a few objects per checkpoint, lease and history chunk; a
# listing far beyond that is not the run's, and would cost minutes and
# gigabytes in every reader.
MAX_LIST_OBJECTS = 100_000


__all__ = ["MAX_LIST_OBJECTS", "ObjectInfo", "Storage", "split_url"]


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
    routed = drivefs.route(text) if protocol == "file" else None
    if routed is not None:  # never a local path on the Drive mount
        protocol, text = "gdrive", routed
    if protocol in DRIVE_PROTOCOLS:  # our own store: no fsspec filesystem
        path = text.split("://", 1)[1].strip("/")
        store_class(protocol).validate_url(text, path)
        return protocol, path
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
    store_class(protocol).validate_url(text, path)
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
        self.protocol, root = split_url(self.url)
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        self.store: Store = store_class(self.protocol)(
            self.url, self.protocol, root, dict(storage_options or {})
        )

    # --- naming -------------------------------------------------------------

    @property
    def root(self) -> str:
        """The run directory's path inside its store."""
        return self.store.root

    @property
    def principal(self) -> str:
        """Who the store acts as, for messages."""
        return self.store.principal

    @property
    def fs(self) -> Any:
        """The store's fsspec filesystem (tests and benchmarks reach past with it)."""
        return getattr(self.store, "fs", None)

    def full(self, rel: str) -> str:
        """Store path of ``rel`` (relative to the run directory).

        Raises:
            UnsafePathError: locally, a part of ``rel`` is a symlink.
        """
        return self.store.path(rel)

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

    def _call(self, operation: str, func: Callable[[float], T]) -> T:
        """Run ``func(timeout)`` under the retry policy.

        ``func`` must pass ``timeout=`` (what is left of the retry budget)
        to the store primitive it calls. A client that retries inside each
        request (gcsfs: 6 tries, ~31 s of sleeps), unseen by the policy,
        would stretch a 3 s budget to ~35 s; the timeout cancels that inner
        loop when the budget is spent, so the budget bounds the whole call.
        """
        deadline: list[float] = []  # set when the first attempt starts

        def attempt() -> T:
            if not deadline:
                deadline.append(time.monotonic() + self.retry.total_seconds)
            left = deadline[0] - time.monotonic()
            if left <= 0:
                raise TimeoutError(self._budget_spent())
            try:
                return func(left)
            except fsspec.exceptions.FSTimeoutError:
                if time.monotonic() < deadline[0]:
                    raise  # the timeout of a single request: retry it
                raise TimeoutError(self._budget_spent()) from None

        try:
            return call_with_retry(
                attempt,
                operation=operation,
                policy=self.retry,
                refresh_credentials=self.store.refresh_credentials,
                on_retry=self.on_retry,
            )
        except OSError as exc:
            explained = self.store.explain(exc, operation)
            if explained is not None:
                raise explained from None
            if is_forbidden(exc) and not isinstance(exc, PermissionDeniedError):
                raise self.store.permission_denied(operation, exc) from None
            raise

    def _budget_spent(self) -> str:
        return (
            f"still failing when the {self.retry.total_seconds:g}s retry budget "
            f"ran out (the storage client was retrying inside the request)"
        )

    # --- checks -------------------------------------------------------------

    def check(self) -> None:
        """Verify the bucket exists and is ours to use (GCS; a no-op elsewhere).

        Raises:
            BucketNotFoundError, PermissionDeniedError, NoCredentialsError.
        """
        self._call(
            f"read the run directory {self.url}",
            lambda timeout: self.store.check(timeout=timeout),
        )

    def require_run_dir(self) -> None:
        """For readers (``cr.inspect``, the CLI): a local run directory must exist.

        A session creates its local run directory on its first write, so a
        reader pointed at a missing one has a typo, not a run nobody started
        yet. (A GCS prefix exists only once written: there, missing is NEW.)

        Raises:
            RunDirNotFoundError: a local run directory that does not exist.
        """
        self.store.require_run_dir()

    def server_time(self) -> float:
        """Now, by the storage server's clock (seconds since the epoch).

        Liveness compares object timestamps with this rather than with the
        reader's clock, so a reader whose clock is off reaches the same
        verdict. GCS: the ``Date`` header of a bucket request (1 s
        resolution). Local and memory: this machine's clock, which is the
        clock that stamped the files.
        """
        return self._call(
            f"read the time of {self.url}",
            lambda timeout: self.store.server_time(timeout=timeout),
        )

    # --- reading ------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        """Whether the object ``rel`` exists (objects only, not "directories")."""
        return self._call(
            f"check {rel}", lambda timeout: self.store.exists(rel, timeout=timeout)
        )

    def read_bytes(self, rel: str, *, max_bytes: int | None = None) -> bytes:
        """Read an object whole; at most ``max_bytes`` (CorruptRecordError beyond).

        Raises:
            FileNotFoundError: no such object.
        """
        data = self._call(
            f"read {rel}",
            lambda timeout: self.store.read(rel, max_bytes=max_bytes, timeout=timeout),
        )
        if max_bytes is not None and len(data) > max_bytes:
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
        return self._call(
            f"stat {rel}", lambda timeout: self.store.info(rel, timeout=timeout)
        )

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """All objects under ``prefix`` (recursively), sorted by path.

        Raises:
            TooManyObjectsError: more than ``max_list_objects`` of them.
        """
        found = self._call(
            f"list {prefix or '/'}",
            lambda timeout: self.store.list(prefix, timeout=timeout),
        )
        if len(found) > self.max_list_objects:
            raise self._too_many(prefix, found)
        return sorted(found, key=lambda item: item.path)

    def _too_many(
        self, prefix: str, found: builtins.list[ObjectInfo]
    ) -> TooManyObjectsError:
        folders: dict[str, int] = {}
        for item in found:
            top = item.path.split("/", 1)[0] + ("/" if "/" in item.path else "")
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

    def get_file(self, rel: str, local_path: str) -> None:
        """Download one object to a local file."""
        self._call(
            f"download {rel}",
            lambda timeout: self.store.get_file(rel, local_path, timeout=timeout),
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
        return self._call(
            f"download {rel}",
            lambda timeout: self.store.get_file_checked(
                rel, local_path, timeout=timeout
            ),
        )

    # --- writing ------------------------------------------------------------

    def write_bytes(
        self, rel: str, data: bytes, *, create_only: bool = False, commit: bool = False
    ) -> None:
        """Write an object whole, atomically replacing any previous version.

        Args:
            create_only: fail with FileExistsError if the object exists
                (GCS ``ifGenerationMatch=0``; locally an atomic hard link).
            commit: the object commits a checkpoint (its manifest): once
                written it is stamped as visible (:meth:`.Store.mark_visible`).
        """
        verb = "create" if create_only else "write"
        # One id for every attempt of this call: a create retried after its
        # answer was lost meets its own object, which the store recognises.
        write_id = uuid.uuid4().hex
        try:
            self._call(
                f"{verb} {rel}",
                lambda timeout: self.store.write(
                    rel,
                    data,
                    create_only=create_only,
                    write_id=write_id,
                    timeout=timeout,
                ),
            )
        except FileNotFoundError:
            # An object store answers a write into a missing bucket with 404:
            # say which bucket, and how to make it.
            self.check()
            raise
        except FileExistsError:
            if create_only and self._call(
                f"stat {rel}",
                lambda timeout: self.store.written_by(rel, write_id, timeout=timeout),
            ):
                log.info("storage: %s was created by an earlier attempt", rel)
            else:
                raise
        if commit:
            self._call(
                f"stamp {rel}",
                lambda timeout: self.store.mark_visible(rel, timeout=timeout),
            )

    def write_json(
        self,
        rel: str,
        value: dict[str, Any],
        *,
        create_only: bool = False,
        commit: bool = False,
    ) -> None:
        data = json.dumps(value, indent=1, sort_keys=True).encode("utf-8")
        self.write_bytes(rel, data, create_only=create_only, commit=commit)

    def put_file(
        self,
        local_path: str,
        rel: str,
        *,
        chunk_bytes: int | None = None,
        move: bool = False,
    ) -> None:
        """Upload one local file (not atomic on its own: commit with a marker).

        Args:
            chunk_bytes: hold at most about this much of the file in memory
                at a time, where the store sends it from memory (GCS).
            move: the caller no longer needs the local file: a store on the
                same disk may move it rather than copy it (it is then gone).
        """
        put = self.store.move_file if move else self.store.put_file
        self._call(
            f"upload {rel}",
            lambda timeout: put(
                local_path, rel, timeout=timeout, chunk_bytes=chunk_bytes
            ),
        )

    def delete(self, rel: str) -> None:
        """Delete one object; deleting what is already gone is not an error."""
        self._call(
            f"delete {rel}", lambda timeout: self.store.delete(rel, timeout=timeout)
        )

    def leftovers(self, prefix: str) -> builtins.list[str]:
        """What interrupted writes left below ``prefix`` that is not an object.

        Paths, sorted. No listing shows them, but they take space: a Drive
        upload killed before its name was stored, a local temporary file.
        """
        found = self._call(
            f"list leftovers of {prefix or '/'}",
            lambda timeout: self.store.leftovers(prefix, timeout=timeout),
        )
        return sorted(found)

    def damage(self) -> str | None:
        """What was found wrong with the store's bookkeeping (Drive's index), or None.

        The run is still read, from what its files prove; ``colab-resume
        repair`` (:meth:`repair`) or the next session rebuilds it.
        """
        return self.store.damage()

    def repair(self) -> str:
        """Rebuild the store's bookkeeping from its files; what was done, in words."""
        result: str = self._call(
            f"repair {self.url}", lambda timeout: self.store.repair(timeout=timeout)
        )
        return result

    def remove_leftovers(self, rel: str) -> None:
        """Remove what is left of the directory ``rel`` once its objects are gone.

        Its :meth:`leftovers`, and the folder where folders exist (a local
        run directory would keep one per deleted checkpoint). Only for a
        directory no live writer uses: a write in flight is a leftover
        until it lands.
        """
        self._call(
            f"remove leftovers of {rel}",
            lambda timeout: self.store.remove_leftovers(rel, timeout=timeout),
        )
