"""What the run-directory protocol needs from a store, stated once.

A :class:`Store` is one kind of storage (a local disk, Cloud Storage, any
other fsspec filesystem) offering a handful of primitives on objects named
by paths relative to the run directory. :class:`~colab_resume.storage.store.Storage`
wraps one store with what is the same everywhere (retries, the retry
budget, redaction, bounded reads, the listing bound) and never asks which
kind of store it has. A new kind of store (Drive, say) is a new subclass
and one line in :func:`colab_resume.storage.stores.store_class`.

What the protocol relies on, and every store must keep:

* **Create-only is atomic.** ``write(..., create_only=True)`` makes the
  object only if no object of that name exists, and of two concurrent
  creates exactly one succeeds; the other raises ``FileExistsError``. The
  lease is taken by this race (``lease/<n>.json``), and the commit of a
  checkpoint by its manifest: a store that cannot do it atomically must
  refuse (as the local store does on a disk without hard links), never
  degrade to check-then-write.
* **Writes are whole.** A reader sees an object's previous content or its
  new content, never a part (records are written as one object).
* **``updated`` is the server's clock.** :attr:`ObjectInfo.updated` and
  :meth:`Store.server_time` come from the same clock, the one that stamps
  objects as they are written. The commit rule (a manifest counts only if
  it is older than the next lease) and liveness (a lease is alive while
  its heartbeat is recent) compare these stamps with each other and with
  ``server_time``, never with the reader's clock. A store whose objects
  become visible in two steps (Drive: upload, then the index names it)
  reports both bounds of that moment (``visible_from``, ``updated``).
  A store whose stamp is when the bytes were written, not when the object
  became visible (a local disk: a temporary file's, linked into place
  later), stamps a commit again once it is visible (:meth:`Store.mark_visible`),
  so that ``updated`` is the latest moment it can have become visible.
* **Listing is recursive and objects only.** ``list(prefix)`` returns every
  object below ``prefix`` at any depth, with paths relative to the run
  directory, and no "directories"; a missing prefix is an empty list. A
  listing is consistent with writes that finished before it began.
* **Missing is ``FileNotFoundError``**, for reads, ``info`` and downloads;
  ``delete`` of a missing object is not an error.

Every primitive takes ``timeout``: the seconds left of the caller's retry
budget. A store whose client retries inside a request (gcsfs does) must
stop by then, so that the budget bounds the whole call; a store without
inner retries may ignore it.

Knows nothing of TensorFlow.
"""

from __future__ import annotations

import abc
import builtins
import dataclasses
from typing import Any

from colab_resume.errors import PermissionDeniedError, StorageError
from colab_resume.redact import redact


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    """One object of the run directory, as the storage server describes it.

    Attributes:
        path: path relative to the run directory, with ``/`` separators.
        size: size in bytes.
        updated: last modification, seconds since the epoch, by the
            server's clock.
        crc32c: the server's CRC32C (base64, GCS style) when it keeps one.
        visible_from: where a store cannot stamp the moment an object became
            visible exactly (Drive: its file is uploaded, then named in the
            run's index), the earliest it can have been, with ``updated``
            the latest; None where ``updated`` is that moment (a GCS
            object's creation). The commit rule needs both bounds.
    """

    path: str
    size: int
    updated: float
    crc32c: str | None = None
    visible_from: float | None = None

    @property
    def visible_by(self) -> float:
        """The latest the object can have become visible (server's clock)."""
        return self.updated

    @property
    def visible_since(self) -> float:
        """The earliest the object can have become visible (server's clock)."""
        return self.updated if self.visible_from is None else self.visible_from


class Store(abc.ABC):
    """One kind of storage, holding one run directory; see the module docstring.

    Args:
        url: the run directory's URL, as the user gave it.
        protocol: its scheme (``file`` for a local path).
        root: the run directory's path inside the store.
        storage_options: the user's options for this kind of store.

    Attributes:
        url: the run directory's URL, for messages.
        protocol: the URL's scheme.
        root: the run directory's path inside the store.
        principal: who the store acts as, for messages ("the local user").
        service: this kind of storage as users call it, for messages ("Drive").
        daily_upload_bytes: how much one user may upload to this kind of
            storage a day (Drive: 750 GB), which ``save_every="auto"`` stays
            well under; None: no such cap.
        heartbeat_seconds: the interval between heartbeats this kind of
            storage wants when the user chose none (a service with tight
            per-user quotas); None: the product's default.
        upload_stream_bytes_per_second: what one upload stream to this kind
            of storage typically moves, to estimate a long upload before it
            starts; None: not known (or fast enough not to matter).
        transfer_streams: how many of a checkpoint's files to move to or
            from this kind of storage at once (a checkpoint's ``workers``
            when the user set none): enough to keep a far link busy, few
            enough not to trip the service's own limits.
    """

    principal = "the local user"
    service = "the store"
    transfer_streams = 8
    heartbeat_seconds: float | None = None
    daily_upload_bytes: float | None = None
    upload_stream_bytes_per_second: float | None = None

    def __init__(
        self, url: str, protocol: str, root: str, storage_options: dict[str, Any]
    ) -> None:
        self.url = url
        self.protocol = protocol
        self.root = root

    @classmethod
    def validate_url(cls, url: str, root: str) -> None:
        """Refuse a URL this kind of store cannot hold a run directory at.

        Raises:
            UnsupportedURLError: the URL misses what this store needs.
        """
        return None  # most URLs fsspec parses are fine

    # --- naming ------------------------------------------------------------

    def path(self, rel: str) -> str:
        """The store's own path of ``rel`` (relative to the run directory).

        Raises:
            UnsafePathError: ``rel`` leads outside the run directory.
        """
        return f"{self.root}/{rel}" if rel else self.root

    # --- the primitives ----------------------------------------------------

    def check(self, *, timeout: float | None = None) -> None:
        """Verify the store is there and ours to use (a no-op where nothing can be).

        Raises:
            BucketNotFoundError, PermissionDeniedError, NoCredentialsError.
        """
        return None  # nothing to check until the first write

    def require_run_dir(self) -> None:
        """For readers: refuse a run directory that only a typo explains.

        Raises:
            RunDirNotFoundError: the store knows the run directory is missing.
        """
        return None  # an object store's prefix exists only once written

    @abc.abstractmethod
    def server_time(self, *, timeout: float | None = None) -> float:
        """Now by the clock that stamps :attr:`ObjectInfo.updated` (epoch seconds)."""

    @abc.abstractmethod
    def exists(self, rel: str, *, timeout: float | None = None) -> bool:
        """Whether the object ``rel`` exists (objects only, not "directories")."""

    @abc.abstractmethod
    def read(
        self, rel: str, *, max_bytes: int | None = None, timeout: float | None = None
    ) -> bytes:
        """The object's bytes: all, or only the first ``max_bytes + 1``.

        Reading one byte past the bound lets the caller tell "at the bound"
        from "beyond it" without a second request.

        Raises:
            FileNotFoundError: no such object.
        """

    @abc.abstractmethod
    def info(self, rel: str, *, timeout: float | None = None) -> ObjectInfo:
        """Size, CRC32C and ``updated`` of one object.

        Raises:
            FileNotFoundError: no such object.
        """

    @abc.abstractmethod
    def list(self, prefix: str, *, timeout: float | None = None) -> list[ObjectInfo]:
        """Every object under ``prefix``, recursively, in any order; [] if none."""

    @abc.abstractmethod
    def write(
        self,
        rel: str,
        data: bytes,
        *,
        create_only: bool,
        write_id: str,
        timeout: float | None = None,
    ) -> None:
        """Write the object whole, replacing any previous one.

        Args:
            create_only: raise ``FileExistsError`` if the object exists,
                atomically (the lease race).
            write_id: the same for every attempt of one write; a store whose
                create can succeed with its answer lost keeps it, for
                :meth:`written_by`.
        """

    def written_by(
        self, rel: str, write_id: str, *, timeout: float | None = None
    ) -> bool:
        """Whether the existing object ``rel`` was made by the write ``write_id``.

        A create whose answer was lost is retried and meets the object it
        made itself; this tells that from a lost race. Stores whose creates
        cannot lose their answer say no.
        """
        return False

    @abc.abstractmethod
    def put_file(
        self,
        local_path: str,
        rel: str,
        *,
        timeout: float | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        """Upload one local file (not atomic on its own: commit with a marker).

        Args:
            chunk_bytes: hold no more than about this much of the file in
                memory at a time where the store sends it from memory (GCS
                streams it in reads of at most 1 MiB; None: the store's own
                choice).
        """

    def move_file(
        self,
        local_path: str,
        rel: str,
        *,
        timeout: float | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        """:meth:`put_file` a local file its writer no longer needs.

        A store on the same disk moves it there instead of copying it (a
        checkpoint's shards, written once to the staging directory, are
        not written twice); the others upload it, and the caller deletes
        it as before.
        """
        self.put_file(local_path, rel, timeout=timeout, chunk_bytes=chunk_bytes)

    @abc.abstractmethod
    def get_file(
        self, rel: str, local_path: str, *, timeout: float | None = None
    ) -> None:
        """Download one object to a local file.

        Raises:
            FileNotFoundError: no such object.
        """

    @abc.abstractmethod
    def get_file_checked(
        self, rel: str, local_path: str, *, timeout: float | None = None
    ) -> tuple[int, str]:
        """Download one object; its size and CRC32C (base64) as the bytes arrived.

        Raises:
            FileNotFoundError: no such object.
        """

    @abc.abstractmethod
    def delete(self, rel: str, *, timeout: float | None = None) -> None:
        """Delete one object; deleting what is already gone is not an error."""

    def mark_visible(self, rel: str, *, timeout: float | None = None) -> None:
        """Stamp the object ``rel``, just made, with the server's time now.

        Called after the create that commits a checkpoint (its manifest):
        the commit rule counts it only if it became visible before the next
        lease was taken, and reads ``updated`` as the latest moment it can
        have. Stores whose ``updated`` of a create already is that moment
        (a GCS object's creation, Drive's touch after the claim) do nothing.
        """
        return None

    def leftovers(
        self, prefix: str, *, timeout: float | None = None
    ) -> builtins.list[str]:
        """What interrupted writes left below ``prefix`` that is not an object.

        A write killed halfway can leave bytes that no listing shows but
        that still take space: on Drive an upload whose name never reached
        the run's index, on a local disk a temporary file. Paths are relative
        to the run directory. Object stores leave nothing (an unfinished GCS
        upload is not an object, and the server drops it).
        """
        return []

    def remove_leftovers(self, rel: str, *, timeout: float | None = None) -> None:
        """Remove what is left of the directory ``rel`` once its objects are deleted.

        That is its :meth:`leftovers`, and the folder itself where folders
        exist (object stores have none: a prefix vanishes with its last
        object). Call it only for a directory no live writer uses: a write
        in flight is a leftover until it lands.
        """
        return None

    # --- the store's own bookkeeping -----------------------------------------

    def damage(self) -> str | None:
        """What was found wrong with the store's own bookkeeping, or None.

        Only a store that keeps one (Drive's index) can say anything here;
        its objects are still read (from what the files prove).
        """
        return None

    def repair(self, *, timeout: float | None = None) -> str:
        """Rebuild the store's own bookkeeping; what was done, in words."""
        return f"{self.url} keeps no index of its own: nothing to repair"

    # --- faults ------------------------------------------------------------

    def refresh_credentials(self) -> None:
        """Get new credentials after the server refused them (401), before a retry."""
        return None  # stores without credentials have nothing to refresh

    def explain(self, exc: OSError, operation: str) -> StorageError | None:
        """The error, with the fix, to raise instead of ``exc``; None for ``exc``.

        Args:
            exc: what a primitive raised, retries spent.
            operation: what was being done ("create lease/00000002.json").
        """
        return None

    def permission_denied(
        self, operation: str, exc: BaseException
    ) -> PermissionDeniedError:
        """The error for a refused ``operation``, naming who was refused and the fix."""
        return PermissionDeniedError(
            f"Permission denied to {operation} in {self.url} for "
            f"{self.principal} ({redact(str(exc))}). Give this user read/write "
            f"access to that directory (`chown`/`chmod`), or point run_dir "
            f"at one it can write."
        )


GCS_PROTOCOLS = ("gs", "gcs")
# Schemes served by a store of ours that no fsspec filesystem stands behind.
DRIVE_PROTOCOLS = ("gdrive",)
