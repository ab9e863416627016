"""A run directory on a local disk (or a mounted one that makes hard links).

A disk has what an object store has not, and the store guards against it:
symlinks (a linked ``history/`` would send writes and retention's deletes
outside the run directory), directories where records belong, and the
empty folders that deleted checkpoints leave. Records are written through
a temporary file, so readers never see half of one; create-only is an
atomic hard link.

A disk also keeps written data in the page cache until the kernel writes
it back: a machine that loses power (a preempted VM, a mounted volume
detached) loses what was not. So every file the store places is synced,
then the directories whose entries it added, before the call returns:
a checkpoint's shards are on the disk before its manifest is written,
and the manifest before its commit counts (docs/protocol.md, "Local
disks").
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import tempfile
from typing import Any

from colab_resume.errors import RunDirNotFoundError, StorageError, UnsafePathError
from colab_resume.storage import local_faults
from colab_resume.storage.fsspec_store import FsspecStore
from colab_resume.storage.store_contract import ObjectInfo

# Names of the temporary files of writes in progress (never listed).
TEMP_PREFIX = ".tmp-"


class LocalStore(FsspecStore):
    """A run directory at a local path; see :class:`.store_contract.Store`.

    No path below the run directory may be a symlink, and no record path a
    directory: both raise :class:`~colab_resume.errors.UnsafePathError`
    rather than being followed.
    """

    # An upload is a rename on the same disk and a download a read from it:
    # a few at a time keep the disk busy, more only contend for it.
    transfer_streams = 4

    def __init__(
        self, url: str, protocol: str, root: str, storage_options: dict[str, Any]
    ) -> None:
        options = dict(storage_options)
        options.setdefault("auto_mkdir", True)
        super().__init__(url, protocol, os.path.abspath(root), options)

    # --- naming ------------------------------------------------------------

    def path(self, rel: str) -> str:
        if rel:
            self._refuse_links(rel)
        return super().path(rel)

    def _refuse_links(self, rel: str) -> None:
        """Refuse a symlink anywhere below the run directory.

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
        """The path of the record ``rel``; refuses a directory there.

        Sessions create records as files, atomically: a directory in a
        record's place is damage. Read, it would crash the reader
        (IsADirectoryError); created, it would look like a lost race.
        """
        path = self.path(rel)
        if os.path.isdir(path):
            raise UnsafePathError(
                f"{path} is a directory where colab_resume keeps a record (a "
                f"file); no session makes that, so it is damage. Remove it "
                f"(`rm -r {path}`) to let the run use that name."
            )
        return path

    # --- the primitives ----------------------------------------------------

    def require_run_dir(self) -> None:
        # A session creates its run directory on its first write: missing
        # here is a typo, not a run nobody started yet.
        if not os.path.isdir(self.root):
            raise RunDirNotFoundError(
                f"no run directory at {self.root} (a local path). Check the "
                f"path; for Cloud Storage write gs://BUCKET/runs/NAME."
            )

    def read(
        self, rel: str, *, max_bytes: int | None = None, timeout: float | None = None
    ) -> bytes:
        self._record_path(rel)
        return super().read(rel, max_bytes=max_bytes, timeout=timeout)

    def info(self, rel: str, *, timeout: float | None = None) -> ObjectInfo:
        self._record_path(rel)
        return super().info(rel, timeout=timeout)

    def list(self, prefix: str, *, timeout: float | None = None) -> list[ObjectInfo]:
        found = super().list(prefix, timeout=timeout)
        # The temporary files of writes still in progress are not objects yet.
        return [o for o in found if not _temporary(o.path)]

    def leftovers(
        self, prefix: str, *, timeout: float | None = None
    ) -> builtins.list[str]:
        # A temporary file outlives its write only when the writer was killed.
        found = super().list(prefix, timeout=timeout)
        return [o.path for o in found if _temporary(o.path)]

    def write(
        self,
        rel: str,
        data: bytes,
        *,
        create_only: bool,
        write_id: str,
        timeout: float | None = None,
    ) -> None:
        write_atomically(self._record_path(rel), data, create_only)

    def move_file(
        self,
        local_path: str,
        rel: str,
        *,
        timeout: float | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        # A rename, not a second write of the same bytes: a checkpoint saved
        # every few seconds would otherwise write its state twice a save,
        # and the upload thread fall behind the saves. Across disks, a copy.
        target = self.path(rel)
        made = _make_dirs(os.path.dirname(target))
        try:
            os.replace(local_path, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            self.put_file(local_path, rel, timeout=timeout)
            return
        # The staging disk's write-back may not have happened: the data and
        # the rename are made durable here, before the manifest commits them.
        sync_placed(target, made)

    def put_file(
        self,
        local_path: str,
        rel: str,
        *,
        timeout: float | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        target = self.path(rel)
        made = _make_dirs(os.path.dirname(target))
        super().put_file(local_path, rel, timeout=timeout, chunk_bytes=chunk_bytes)
        sync_placed(target, made)

    def mark_visible(self, rel: str, *, timeout: float | None = None) -> None:
        # A record's mtime is when its temporary file was written; the link
        # that made it visible comes later, and a takeover can fall in
        # between (a slow fsync, a paused process). Stamped now, the mtime
        # is no earlier than the link, so a manifest that landed after the
        # next lease counts as late, as on GCS. Leases keep the write's
        # stamp: for them the rule needs the earliest moment, and that is it.
        # Between the link and this call a reader may still judge by the
        # older stamp: the successor then restores that manifest, a state
        # its holder reached, which no later judgement contradicts (a
        # fenced manifest is only ignored).
        with contextlib.suppress(FileNotFoundError):  # deleted since: no stamp
            os.utime(self._record_path(rel))

    def remove_leftovers(self, rel: str, *, timeout: float | None = None) -> None:
        for path in self.leftovers(rel, timeout=timeout):
            self.delete(path, timeout=timeout)
        # A local run directory would otherwise keep one per deleted checkpoint.
        with contextlib.suppress(OSError):  # not empty, or already gone
            os.rmdir(self.path(rel))

    # --- faults ------------------------------------------------------------

    def explain(self, exc: OSError, operation: str) -> StorageError | None:
        return local_faults.explain(exc, operation, self.root)


def write_atomically(path: str, data: bytes, create_only: bool) -> None:
    """Write via a temporary file so readers never see half a record.

    Create-only uses ``os.link``, which fails atomically if the target
    exists; overwrite uses ``os.replace``. The data is synced before the
    link or rename, and the directory after it: once this returns, the
    record survives a power cut (a manifest written here commits).

    Raises:
        FileExistsError: create-only, and the record exists.
        NoHardLinksError: create-only on a file system without hard links.
    """
    directory = os.path.dirname(path)
    made = _make_dirs(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX)
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
    sync_directories([directory, *made])


def sync_placed(path: str, made: list[str]) -> None:
    """Sync the file at ``path``, then its directory and the ones ``made``
    for it (their entries name it): all of it survives a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    sync_directories([os.path.dirname(path), *made])


def sync_directories(directories: list[str]) -> None:
    """Sync each directory's entries (the names added to it), in order.

    Where the file system cannot sync a directory (some network mounts
    refuse it with EINVAL), the names are as durable as it makes them.
    """
    for directory in directories:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
                raise
        finally:
            os.close(fd)


def _make_dirs(directory: str) -> list[str]:
    """Create ``directory`` and missing parents; return the parents whose
    entries changed (each new directory's own parent), deepest first."""
    missing: list[str] = []
    path = directory
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    os.makedirs(directory, exist_ok=True)
    return [os.path.dirname(p) for p in missing]


def _temporary(path: str) -> bool:
    """Whether ``path`` names the temporary file of a write, not an object."""
    return path.rsplit("/", 1)[-1].startswith(TEMP_PREFIX)
