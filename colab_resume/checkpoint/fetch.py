"""A checkpoint's files coming to local disk while other work goes on.

Two overlaps shorten the time to the first resumed step:

- :class:`Prefetch` lists the run directory, chooses the newest committed
  checkpoint, checks its manifest against the listing and starts its
  download as soon as the run is taken, while ``build_model()`` runs on
  the training thread;
- :class:`ShardFetch` downloads a checkpoint's files in the manifest's
  order and, where the checkpoint's format reads its files one by one
  (:attr:`~colab_resume.checkpoint.formats.Format.reads_while_arriving`:
  the portable one's shards), reads each as soon as it has arrived and
  verified, while the next ones download; the reader waits for each file
  only when it reaches it (:meth:`ShardFetch.arrived`).

The files go to local disk (the staging directory), and each is checked
against the manifest's size and CRC32C as it streams in, as a download
without a prefetch is. A shard read early is read exactly as the restore
reads it (the format's ``read_file``: one copy in memory of its own, its
CRC32C checked again over that copy); those copies
are the ones the restore holds anyway before it assigns, so reading them
early adds no memory, and it is skipped where the checkpoint would take
more than half the memory available. A cancelled fetch waits for the
downloads in flight and deletes its directory and copies: nothing is left
behind by a build that failed or was interrupted.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from colab_resume import procfs
from colab_resume.checkpoint import formats
from colab_resume.checkpoint.errors import DamagedObjectError
from colab_resume.checkpoint.transfer_progress import TransferProgress
from colab_resume.errors import CorruptRecordError
from colab_resume.events import EventLog
from colab_resume.protocol import commit
from colab_resume.protocol.listing import CheckpointDir, RunListing
from colab_resume.protocol.manifest import FileEntry, Manifest
from colab_resume.protocol.objects import object_path
from colab_resume.protocol.rundir import MANIFEST
from colab_resume.storage import Storage

# A prefetch leaves this much of the staging disk free: a checkpoint that
# does not fit beside it is downloaded after the build, once its size is
# checked against the state's (restore.size_bound), as without a prefetch.
FREE_DISK_MARGIN = 1 << 30
# Shards are read into memory as they arrive only while the whole
# checkpoint takes at most this share of the memory available.
EARLY_READ_SHARE = 0.5


def memory_available() -> int | None:
    """``MemAvailable`` of this machine in bytes (None: not Linux)."""
    text = procfs.read_text("/proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


class Damaged(Exception):
    """This checkpoint cannot be used; the message says why."""


def check_listing(manifest: Manifest, entry: CheckpointDir) -> None:
    """Compare the manifest with the storage listing; raise Damaged if it differs."""
    problems = []
    missing = commit.missing_processes(manifest.processes, entry.objects)
    if missing:
        problems.append(
            f"the done marker of process(es) {missing} of {manifest.processes} "
            f"is missing (a multi-process checkpoint without every process's part)"
        )
    for item in (*manifest.files, *manifest.markers):
        info = entry.objects.get(item.name)
        if info is None:
            problems.append(f"{item.name} is missing")
        elif info.size != item.size:
            problems.append(
                f"{item.name} has {info.size} bytes, manifest says {item.size} "
                f"({'truncated' if info.size < item.size else 'grown'})"
            )
        elif info.crc32c is not None and info.crc32c != item.crc32c:
            problems.append(
                f"{item.name} has CRC32C {info.crc32c}, manifest says {item.crc32c} "
                f"(corrupted)"
            )
    if problems:
        raise Damaged("; ".join(problems))


def check_arrival(item: FileEntry, size: int, crc: str) -> None:
    """Compare one downloaded file (bytes, CRC32C) with its manifest entry."""
    if size != item.size:
        raise Damaged(f"{item.name} downloaded {size} bytes, manifest says {item.size}")
    if crc != item.crc32c:
        raise Damaged(
            f"{item.name} has CRC32C {crc}, manifest says {item.crc32c} (corrupted)"
        )


def read_manifest(storage: Storage, entry: CheckpointDir) -> Manifest:
    """The manifest of ``entry``, checked against its directory name."""
    where = f"{storage.url}/{entry.name.manifest_path}"
    try:
        raw = storage.read_json(entry.name.manifest_path)
    except CorruptRecordError as exc:
        raise Damaged(f"{MANIFEST} unreadable: {exc}") from None
    except FileNotFoundError:
        raise Damaged(f"{MANIFEST} vanished while reading") from None
    try:
        manifest = Manifest.from_json(raw, where=where)
    except CorruptRecordError as exc:
        raise Damaged(str(exc)) from None
    if (manifest.step, manifest.lease) != (entry.name.step, entry.name.lease):
        raise Damaged(
            f"{MANIFEST} says step {manifest.step} lease {manifest.lease}, "
            f"the directory name says otherwise"
        )
    return manifest


class ShardFetch:
    """One checkpoint's files downloading, in the manifest's order, to ``directory``.

    Args:
        storage: the run directory.
        entry: the checkpoint.
        manifest: its manifest (checked against the listing already).
        directory: a new local directory for the files; deleted by :meth:`close`.
        events: for progress events.
        workers: parallel downloads.
        progress_seconds: quiet period before progress events.
    """

    def __init__(
        self,
        storage: Storage,
        entry: CheckpointDir,
        manifest: Manifest,
        directory: str,
        *,
        events: EventLog,
        workers: int,
        progress_seconds: float,
    ) -> None:
        self.entry = entry
        self.manifest = manifest
        self.directory = directory
        self.waited = 0.0  # seconds the reader spent blocked on a file
        state_format = formats.of_manifest(manifest)
        # The shared objects first: the reader reads them first.
        shared = manifest.objects.files if manifest.objects is not None else ()
        available = memory_available()
        whole = manifest.total_bytes + sum(item.size for item in shared)
        read_early = state_format.reads_while_arriving and (
            available is not None and whole <= EARLY_READ_SHARE * available
        )
        listed = sum(len(v) for v in manifest.structure.values() if isinstance(v, list))
        self._objects = {item.name for item in shared}
        remote = {item.name: object_path(item.name) for item in shared}
        remote.update((f.name, f"{entry.name.path}/{f.name}") for f in manifest.files)
        every = (*shared, *manifest.files)
        progress = TransferProgress(
            events,
            kind="checkpoint.download.progress",
            what=f"download of {entry.name.dirname}",
            total_bytes=sum(item.size for item in every),
            step=manifest.step,
            quiet_seconds=progress_seconds,
        )

        def one(item: FileEntry) -> None:
            local = os.path.join(directory, item.name)
            size, crc = storage.get_file_checked(remote[item.name], local)
            progress.advance(size)
            check_arrival(item, size, crc)

        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, min(workers, len(every))),
            thread_name_prefix="colab-resume-fetch",
        )
        # Submitted in the order the reader reads in.
        self._futures = {f.name: self._pool.submit(one, f) for f in every}
        # One reader, shard after shard as each arrives: parallel reads would
        # only compete with the downloads (and the build) for the cores.
        self._reader = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="colab-resume-early-read"
        )
        self._reads: dict[str, concurrent.futures.Future[Any]] = {}
        if read_early:

            def read(item: FileEntry) -> Any:
                self._futures[item.name].result()
                local = os.path.join(directory, item.name)
                return state_format.read_file(local, item, listed)

            for item in every:
                self._reads[item.name] = self._reader.submit(read, item)

    @property
    def prefix(self) -> str:
        """The local checkpoint prefix the reader reads from."""
        return os.path.join(self.directory, self.manifest.prefix)

    def arrived(self, name: str) -> dict[str, Any] | None:
        """Block until file ``name`` is on local disk and matches the manifest.

        Returns:
            Its tensors, where it is a shard read already (then handed over:
            a second call returns None), else None.

        Raises:
            DamagedCheckpointError: the shard read early is damaged.
            Damaged: it does not match, or vanished from storage.
            Exception: the download's own error (a storage outage past its
                retries is not damage, and is raised as is).
        """
        future = self._futures.get(name)
        if future is None:
            raise Damaged(f"{name} is not a file the manifest lists")
        started = time.perf_counter()
        try:
            future.result()
            read = self._reads.pop(name, None)
            return None if read is None else read.result()
        except FileNotFoundError as exc:
            if name in self._objects:
                gone = "missing from the run directory"
                raise DamagedObjectError(name, gone) from None
            raise Damaged(f"a file vanished during download ({exc})") from None
        except Damaged as exc:
            if name in self._objects:
                # The format may stand the arrays build_model() made in for it.
                raise DamagedObjectError(name, str(exc)) from None
            raise
        finally:
            self.waited += time.perf_counter() - started

    def close(self) -> None:
        """Cancel the downloads not started, wait for the others, delete the files."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._reader.shutdown(wait=True, cancel_futures=True)
        self._reads.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


class Prefetch:
    """The newest committed checkpoint, chosen and downloading in the background.

    Started right after the run is taken (the lease held: no other session
    commits meanwhile) and before the model is built. What it finds is
    handed to the restore (:meth:`take`), which verifies and reads it as it
    would any download; damage found here is the restore's to report, in
    the same words and with the same fallback. :meth:`close` cancels what
    the restore did not take.

    Args:
        storage: the run directory.
        scratch_dir: parent of the download directory.
        events: for progress events.
        workers: parallel downloads.
        progress_seconds: quiet period before progress events.
        background: run in a thread (False: run now, on this thread).
    """

    def __init__(
        self,
        storage: Storage,
        *,
        scratch_dir: str | None,
        events: EventLog,
        workers: int,
        progress_seconds: float,
        background: bool = True,
    ) -> None:
        self._storage = storage
        self._scratch_dir = scratch_dir
        self._events = events
        self._workers = workers
        self._progress_seconds = progress_seconds
        self._lock = threading.Lock()
        self._closed = False
        self._listing: RunListing | None = None
        self._error: BaseException | None = None
        self._newest: tuple[CheckpointDir, Manifest | Damaged] | None = None
        self._fetch: ShardFetch | None = None
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(
                target=self._run, name="colab-resume-prefetch", daemon=True
            )
            self._thread.start()
        else:
            self._run()

    def _run(self) -> None:
        try:
            listing = RunListing.read(self._storage)
            self._listing = listing
            if not listing.committed:
                return
            entry = listing.committed[-1]
            try:
                manifest = read_manifest(self._storage, entry)
                check_listing(manifest, entry)
            except Damaged as exc:
                self._newest = (entry, exc)
                return
            self._newest = (entry, manifest)
            self._start_fetch(entry, manifest)
        except BaseException as exc:  # the restore re-raises it on its thread
            self._error = exc

    def _start_fetch(self, entry: CheckpointDir, manifest: Manifest) -> None:
        scratch = self._scratch_dir or tempfile.gettempdir()
        free = shutil.disk_usage(scratch).free
        shared = manifest.objects.total_bytes if manifest.objects is not None else 0
        if manifest.total_bytes + shared + FREE_DISK_MARGIN > free:
            return  # the restore decides, once the state's size is known
        with self._lock:
            if self._closed:
                return
            self._fetch = open_fetch(
                self._storage,
                entry,
                manifest,
                scratch_dir=self._scratch_dir,
                events=self._events,
                workers=self._workers,
                progress_seconds=self._progress_seconds,
            )

    def listing(self) -> RunListing:
        """The listing it read (waits for it; raises the error it met)."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._listing is not None
        return self._listing

    def take(self, entry: CheckpointDir) -> tuple[Manifest, ShardFetch | None] | None:
        """What was found for ``entry``: its manifest and its download, if any.

        None when the prefetch did not look at ``entry`` (an older one).
        The download is the caller's to close from here on.

        Raises:
            Damaged: the manifest did not verify against the listing.
        """
        self.listing()
        if self._newest is None or self._newest[0].name != entry.name:
            return None
        found = self._newest[1]
        if isinstance(found, Damaged):
            raise found
        with self._lock:
            fetch, self._fetch = self._fetch, None
        return found, fetch

    def close(self) -> None:
        """Cancel and delete a download the restore did not take; idempotent.

        Does not wait for a listing still running (storage may be down, and
        a Ctrl-C should not wait out its retries): once closed, the
        prefetch starts no download.
        """
        with self._lock:
            self._closed = True
            fetch, self._fetch = self._fetch, None
        if fetch is not None:
            fetch.close()


def open_fetch(
    storage: Storage,
    entry: CheckpointDir,
    manifest: Manifest,
    *,
    scratch_dir: str | None,
    events: EventLog,
    workers: int,
    progress_seconds: float,
) -> ShardFetch:
    """Start downloading ``entry``'s files to a new directory under ``scratch_dir``."""
    directory = tempfile.mkdtemp(prefix="restore-", dir=scratch_dir)
    try:
        return ShardFetch(
            storage,
            entry,
            manifest,
            directory,
            events=events,
            workers=workers,
            progress_seconds=progress_seconds,
        )
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


# What a reader calls before it reads a file: blocks until the file is local
# and verified; returns the shard's tensors where they were read already.
ArrivalWait = Callable[[str], "dict[str, Any] | None"]
