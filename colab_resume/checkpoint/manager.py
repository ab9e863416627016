"""The checkpoint manager: stage with TensorFlow, upload, commit, verify, prune.

The training thread only waits for TensorFlow to write the state to a local
staging directory (with async checkpointing, only for the host copy). A
background thread then syncs, computes CRC32Cs, uploads the shards in
parallel, checks the fence and writes ``MANIFEST.json`` last and
create-only: until that write succeeds the checkpoint does not exist for
anyone. One upload is in flight at most; a save that comes due while one
is running waits for it, and that wait is reported as a checkpoint stall.

Example (the agent drives this)::

    manager = CheckpointManager(storage, lease=3, fence=lease.check, events=events)
    info = manager.restore(model)            # None: nothing saved yet
    ...
    manager.save(model, step=step, epoch=epoch, metrics=logs)
    manager.check()                          # raises a failed upload's error
    manager.close()
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from colab_resume import defaults
from colab_resume.checkpoint import formats, objects, retention, transfer
from colab_resume.checkpoint.fetch import ArrivalWait, Prefetch
from colab_resume.checkpoint.groups import StateLike
from colab_resume.checkpoint.processes import (
    ProcessRole,
    collect_markers,
    write_marker,
)
from colab_resume.checkpoint.restore import RestoredInfo, restore_latest, size_bound
from colab_resume.checkpoint.transfer_progress import TransferProgress
from colab_resume.checkpoint.upload_notes import (
    DailyUploads,
    UploadRate,
    frozen_estimate,
    frozen_note,
    rate_text,
    slow_objects,
)
from colab_resume.checkpoint.uploader import Uploader
from colab_resume.errors import FencedError
from colab_resume.events import EventLog
from colab_resume.protocol.listing import RunListing
from colab_resume.protocol.manifest import FileEntry, Manifest, crc32c_file
from colab_resume.protocol.rundir import CheckpointName, part_prefix
from colab_resume.storage import Storage
from colab_resume.validate import check_int

log = logging.getLogger(__name__)

PREFIX = "ckpt"
# Waits shorter than this (the last file closing) are not worth a warning.
STALL_REPORT_SECONDS = 0.05
# A save blocked this long on the previous upload says so while it waits:
# during a storage outage training stops, and the panel should say why.
WAITING_REPORT_SECONDS = 1.0
# Memory the uploads of a save may hold beyond the snapshot: this share of
# the state, and never less than this floor (see staging_bytes).
STAGING_SHARE = 16
MIN_STAGING_BYTES = 8 << 20
FROZEN_ONCE = "once"
FROZEN_MODES = (FROZEN_ONCE, "every", "rebuild")


def staging_bytes(state_bytes: int) -> int:
    """Host memory a save's uploads may hold beside the snapshot itself.

    A save holds one host copy of the state (the snapshot; on the CPU only
    the variables training updated meanwhile) and writes it to local disk
    shard by shard, releasing each; what the upload reads back is bounded
    by this, a sixteenth of the state (plus the HTTP client's own buffers,
    about 15 MB; tests/test_save_memory.py measures the whole).
    """
    return max(MIN_STAGING_BYTES, state_bytes // STAGING_SHARE)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """How checkpoints are written and kept.

    Attributes:
        keep: newest committed checkpoints to keep (>= 1).
        keep_every_steps: also keep every checkpoint whose step is a multiple
            of this (None: none extra).
        staging_dir: local directory for TensorFlow's files before upload
            (None: a temporary directory).
        io_device: ``experimental_io_device`` for TensorFlow, e.g.
            ``"/job:localhost"`` when variables live on a remote TPU worker.
        async_write: use TensorFlow's async checkpointing, so a save blocks
            only for the copy of the variables to host memory.
        shard_bytes: split the data into shards of about this size, so
            uploads run in parallel and report progress.
        workers: how many files to transfer at once (None: as many as suit
            the store, its ``transfer_streams``: 16 on Cloud Storage, 8 on
            Drive, 4 on a local disk).
        progress_seconds: transfers shorter than this report no progress.
        format: ``"portable"`` (host arrays both backends read; TensorFlow's
            own format only where a state group is an opaque trackable) or
            ``"tensorflow"`` (``tf.train.Checkpoint`` files, TensorFlow only).
        frozen: ``"once"``: arrays no training step changes (a LoRA's
            frozen base, frozen layers) are written by the first save that
            needs them as shared objects of the run directory, and only
            referenced by later checkpoints; ``"rebuild"``: they are not
            written at all, each checkpoint records their SHA-256 and a
            restore checks that ``build_model()`` made the same ones
            (``FrozenArraysChangedError`` if not); ``"every"``: every
            array into every checkpoint. The portable format only:
            TensorFlow's own writes every array every time.
    """

    keep: int = defaults.KEEP
    keep_every_steps: int | None = None
    staging_dir: str | None = None
    io_device: str | None = None
    async_write: bool = True
    shard_bytes: int = 32 << 20
    workers: int | None = None
    progress_seconds: float = 2.0
    format: str = formats.PORTABLE
    frozen: str = FROZEN_ONCE

    def __post_init__(self) -> None:
        def fail(name: str, need: str) -> None:
            raise ValueError(
                f"CheckpointConfig.{name} must be {need}, got {getattr(self, name)!r}."
            )

        # The Agent's flat keep= and keep_every_steps= are checked here
        # (through validate.build, which names them as the user typed them).
        check_int("CheckpointConfig.keep", self.keep)
        check_int(
            "CheckpointConfig.keep_every_steps", self.keep_every_steps, optional=True
        )
        if self.staging_dir is not None and not isinstance(self.staging_dir, str):
            fail("staging_dir", "a local directory path or None")
        if self.io_device is not None and not (
            isinstance(self.io_device, str) and self.io_device.startswith("/")
        ):
            fail("io_device", "a device name such as '/job:localhost' or None")
        if not _is_int(self.shard_bytes) or self.shard_bytes < (1 << 20):
            fail("shard_bytes", "an int >= 1 MiB")
        if self.format not in formats.REGISTRY:
            fail("format", " or ".join(repr(f) for f in formats.REGISTRY))
        if self.workers is not None and (not _is_int(self.workers) or self.workers < 1):
            fail("workers", "an int >= 1 or None")
        if self.frozen not in FROZEN_MODES:
            close = difflib.get_close_matches(str(self.frozen), FROZEN_MODES, n=1)
            raise ValueError(
                f"frozen must be 'once' (arrays no step changes are written once "
                f"per run), 'rebuild' (not written; build_model() makes them, "
                f"checked by fingerprint) or 'every' (into every checkpoint), "
                f"got {self.frozen!r}."
                + (f" Did you mean {close[0]!r}?" if close else "")
            )
        if (
            not isinstance(self.progress_seconds, (int, float))
            or self.progress_seconds < 0
        ):
            fail("progress_seconds", "a number >= 0")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class CheckpointManager:
    """Saves, restores and prunes the checkpoints of one session.

    Args:
        storage: the run directory.
        lease: this session's lease number; part of every checkpoint name.
        fence: raises :class:`~colab_resume.errors.FencedError` once a newer
            session owns the run; called right before every commit and delete.
        events: where commits, stalls, failures and progress are reported.
        clock: monotonic clock for durations (injectable).
        config: the settings, whole (then no ``**options``).
        process: this process's part in a multi-process run (None: the only
            one): process 0 writes the state and commits once every
            process's marker verifies; the others write their markers only
            (:mod:`colab_resume.checkpoint.processes`).
        **options: fields of :class:`CheckpointConfig` (``keep=``,
            ``keep_every_steps=``, ``staging_dir=``, ``io_device=``...).
    """

    def __init__(
        self,
        storage: Storage,
        *,
        lease: int,
        fence: Callable[[], None],
        events: EventLog,
        clock: Callable[[], float] = time.monotonic,
        config: CheckpointConfig | None = None,
        process: ProcessRole | None = None,
        **options: Any,
    ) -> None:
        if not _is_int(lease) or lease < 1:
            raise ValueError(f"lease must be an int >= 1, got {lease!r}.")
        if not callable(fence):
            raise TypeError(f"fence must be callable, got {fence!r}.")
        if config is not None and options:
            raise TypeError(f"pass config= or {sorted(options)}, not both.")
        self.config = config if config is not None else CheckpointConfig(**options)
        self.storage = storage
        # How many files move at once: the user's, or what suits the store.
        self.workers: int = self.config.workers or storage.store.transfer_streams
        self.lease = lease
        self.process = process
        self._fence = fence
        self._events = events
        self._clock = clock
        self._uploader = Uploader(self._report_failure)
        self._state: formats.StateWriter | None = None
        self._state_format = formats.PORTABLE  # the format _state writes
        self._format_warned: str | None = None
        self._owned_staging = self.config.staging_dir is None
        self._staging_root = self.config.staging_dir or tempfile.mkdtemp(
            prefix="colab-resume-staging-"
        )
        os.makedirs(self._staging_root, exist_ok=True)
        self._lock = threading.Lock()
        self._in_flight: CheckpointName | None = None
        self._cleared_leftovers = False  # see _upload_and_commit
        self._collected = False  # see prune
        self._daily = DailyUploads(
            getattr(storage.store, "daily_upload_bytes", None), self.config.frozen
        )
        self._upload_rate = UploadRate()
        # "rebuild" was suggested (before an upload or after a commit): once.
        self._suggested_rebuild = False
        self.last_saved: CheckpointName | None = None
        self.last_committed: CheckpointName | None = None
        # Its files' size (or, until a commit, the restored checkpoint's).
        self.last_committed_bytes: int | None = None
        self.stall_count = 0
        self.stall_seconds = 0.0
        self.last_blocking_seconds = 0.0

    # --- saving -------------------------------------------------------------

    def save(
        self,
        state: StateLike,
        *,
        step: int,
        epoch: int,
        metrics: dict[str, Any] | None = None,
        extras: dict[str, Any] | None = None,
    ) -> CheckpointName:
        """Stage a checkpoint of ``state`` and start uploading it.

        Returns once TensorFlow has the state in host memory (async) or on
        local disk (sync); the upload and commit happen in the background.

        Args:
            state: a compiled ``keras.Model`` (its optimizer and metrics are
                saved with it) or a dict of name -> trackable (models,
                optimizers, variables, ``tf.random.Generator``...). Pass the
                same kind of object to :meth:`restore`.
            step: global step the state belongs to.
            epoch: epoch of that step.
            metrics: JSON-able metrics for the manifest (numpy scalars ok).
            extras: JSON-able user values for the manifest.

        Returns:
            The name of the checkpoint being committed.

        Raises:
            FencedError: a newer session owns the run (from a previous upload).
            Exception: the error of a previous failed upload.
        """
        if not _is_int(step) or step < 0 or not _is_int(epoch) or epoch < 0:
            raise ValueError(
                f"step and epoch must be ints >= 0, got step={step!r}, epoch={epoch!r}."
            )
        metrics_json = _jsonable("metrics", metrics)
        extras_json = _jsonable("extras", extras)
        name = CheckpointName(step=step, lease=self.lease)
        self._wait_for_upload(step)
        if name == self.last_saved:
            log.info("checkpoint: step %d already saved as %s", step, name.dirname)
            return name
        training_state = self._training_state(state)
        staging = os.path.join(self._staging_root, name.dirname)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        started = self._clock()
        if self.process is None or self.process.commits:
            # Replicated state is written once, by the process that commits.
            training_state.write(os.path.join(staging, PREFIX))
        else:  # the pieces of a sharded state only this process holds
            part = part_prefix(PREFIX, self.process.index)
            training_state.write_part(os.path.join(staging, part))
        self.last_blocking_seconds = self._clock() - started
        wall_time = time.time()

        def job() -> None:
            if self.process is not None and not self.process.commits:
                self._write_part(training_state, name, staging)
                return
            self._upload_and_commit(
                training_state,
                name,
                staging,
                epoch,
                wall_time,
                metrics_json,
                extras_json,
            )

        with self._lock:
            self._in_flight = name
        self.last_saved = name
        self._uploader.submit(name.dirname, job)
        return name

    def _wait_for_upload(self, step: int) -> None:
        self.check()
        if not self._uploader.busy:
            return
        started = self._clock()
        if not self._uploader.wait(WAITING_REPORT_SECONDS):
            self._events.emit(
                "checkpoint.waiting",
                f"saving step {step} waits for the previous upload "
                f"(running {self._clock() - started:.1f}s so far)",
                level="warning",
                step=step,
            )
            self._uploader.wait()
        waited = self._clock() - started
        if waited < STALL_REPORT_SECONDS:
            self.check()
            return
        self.stall_count += 1
        self.stall_seconds += waited
        self._events.emit(
            "checkpoint.stall",
            f"waited {waited:.1f}s for the previous upload before saving step {step}",
            level="warning",
            step=step,
            seconds=waited,
            stall_count=self.stall_count,
            stall_seconds_total=self.stall_seconds,
        )
        self.check()

    def _settings(self) -> formats.FormatSettings:
        return formats.FormatSettings(
            shard_bytes=self.config.shard_bytes,
            write_behind=self.config.async_write,
            io_device=self.config.io_device,
            frozen=self.config.frozen,
        )

    def _training_state(self, state: StateLike) -> formats.StateWriter:
        # Reuse across saves: rebuilding the tf.train.Checkpoint every time
        # would also restart TF's async writer thread. Captured again only
        # when its variables changed (optimizer slots after a first step, a
        # new optimizer after model.compile).
        if (
            self._state is None
            or self._state.source is not state
            or self._state.outdated()
        ):
            self._state, self._state_format, why = formats.for_saving(
                state, format=self.config.format, settings=self._settings()
            )
            if why is not None and why != self._format_warned:
                self._format_warned = why
                self._events.emit("checkpoint.format", why, level="warning")
        return self._state

    def _upload_and_commit(
        self,
        training_state: formats.StateWriter,
        name: CheckpointName,
        staging: str,
        epoch: int,
        wall_time: float,
        metrics: dict[str, Any],
        extras: dict[str, Any],
    ) -> None:
        started = self._clock()
        if not self._cleared_leftovers:
            # A session that died mid-upload (a full disk, a kill) left its
            # uncommitted files: remove them before this upload needs their
            # space, not after its commit, which a full disk would prevent.
            self._cleared_leftovers = True
            self._prune_quietly(name.step)
        training_state.sync()
        files, entries = _staged(training_state, staging)
        shared, new_objects = training_state.objects()
        manifest = Manifest(
            step=name.step,
            epoch=epoch,
            lease=name.lease,
            wall_time=wall_time,
            files=entries,
            prefix=PREFIX,
            state_format=self._state_format,
            structure=training_state.structure,
            metrics=metrics,
            extras=extras,
            objects=shared,
        )
        uploads = [(os.path.join(staging, f), f"{name.path}/{f}") for f in files]
        fresh = []  # the shared objects this upload writes
        if shared is not None:
            fresh = objects.to_upload(self.storage, new_objects)
        uploads += fresh
        upload_bytes = sum(os.path.getsize(local) for local, _ in uploads)
        parallel, _ = transfer.upload_plan(staging_bytes(upload_bytes), self.workers)
        self._estimate_objects(
            name.step,
            sum(os.path.getsize(local) for local, _ in fresh),
            streams=min(len(fresh), parallel),
        )
        progress = TransferProgress(
            self._events,
            kind="checkpoint.upload.progress",
            what=f"upload of {name.dirname}",
            total_bytes=upload_bytes,
            step=name.step,
            quiet_seconds=self.config.progress_seconds,
        )
        upload_started = self._clock()
        transfer.upload(
            self.storage,
            uploads,
            progress=progress,
            workers=self.workers,
            # The files' size, not the state's nbytes: what is uploaded, in
            # either format (TensorFlow's nbytes cannot size every trackable).
            memory_bytes=staging_bytes(upload_bytes),
        )
        self._upload_rate.record(upload_bytes, self._clock() - upload_started)
        if self.process is not None:
            write_marker(self.storage, name, self.process, entries)
            markers, parts = collect_markers(self.storage, name, self.process)
            manifest = dataclasses.replace(
                manifest,
                processes=self.process.count,
                markers=markers,
                files=manifest.files + parts,
            )
        if shared is not None and shared.files:
            try:
                # A commit never references an object the run directory
                # does not list as it was written.
                objects.check_stored(self.storage, shared)
            except objects.MissingObjectError as exc:
                # Not the training's failure: this save is lost, the next
                # one writes the frozen arrays again.
                training_state.forget_objects()
                with self._lock:
                    self._in_flight = None
                self.last_saved = None
                shutil.rmtree(staging, ignore_errors=True)
                self._events.emit(
                    "checkpoint.objects_missing",
                    f"{name.dirname} not committed: {exc}",
                    level="warning",
                    step=name.step,
                )
                return
        self._fence()
        self.storage.write_json(
            name.manifest_path, manifest.to_json(), create_only=True, commit=True
        )
        seconds = self._clock() - started
        with self._lock:
            self._in_flight = None
            self.last_committed = name
            self.last_committed_bytes = manifest.total_bytes
        shutil.rmtree(staging, ignore_errors=True)
        shared_bytes = shared.total_bytes if shared is not None else 0
        note = frozen_note(
            mode=self.config.frozen,
            own=manifest.total_bytes,
            uploaded=upload_bytes,
            shared=shared_bytes,
            rebuilt=len(shared.rebuilt) if shared is not None else 0,
        )
        self._events.emit(
            "checkpoint.committed",
            f"committed {name.dirname} ({manifest.total_bytes / 1e6:.1f} MB in "
            f"{seconds:.1f}s{note})",
            step=name.step,
            checkpoint=name.dirname,
            bytes=manifest.total_bytes,
            seconds=seconds,
            uploaded_bytes=upload_bytes,
            shared_bytes=shared_bytes,
            frozen=self.config.frozen,
        )
        self._note_uploads(name.step, upload_bytes - manifest.total_bytes, seconds)
        warning = self._daily.record(self._clock(), upload_bytes)
        if warning is not None:
            self._events.emit(
                "checkpoint.upload_cap",
                warning[0],
                level="warning",
                step=name.step,
                bytes_per_day=warning[1],
                cap_bytes=self._daily.cap,
            )
        self._prune_quietly(name.step)
        training_state.committed()

    def _estimate_objects(self, step: int, fresh: int, *, streams: int) -> None:
        """Before an upload of ``fresh`` bytes of frozen arrays in
        ``streams`` parallel files starts: suggest ``"rebuild"`` now where it
        will take long, at the rate this session's uploads measured, else
        at the one the store typically allows (none known: nothing said)."""
        if fresh <= 0 or self._suggested_rebuild:
            return
        measured = self._upload_rate.bytes_per_second
        per_stream = getattr(self.storage.store, "upload_stream_bytes_per_second", None)
        if measured is not None:
            rate, basis = measured, "as this session's uploads measured"
        elif per_stream:
            rate = per_stream * max(1, streams)
            basis = (
                f"{max(1, streams)} at a time, each about {rate_text(per_stream)} as "
                f"this store typically allows"
            )
        else:
            return
        found = frozen_estimate(fresh, rate, basis)
        if found is None:
            return
        self._suggested_rebuild = True
        self._events.emit(
            "checkpoint.frozen_slow",
            found[0],
            step=step,
            bytes=fresh,
            estimated=True,
            estimated_seconds=found[1],
            bytes_per_second=rate,
        )

    def _note_uploads(self, step: int, fresh: int, seconds: float) -> None:
        """After a commit that uploaded ``fresh`` bytes of frozen arrays in
        ``seconds``: suggest ``"rebuild"`` where that was slow and nothing
        said so before the upload (no rate was known, or it was wrong)."""
        if self._suggested_rebuild:
            return
        suggestion = slow_objects(fresh, seconds)
        if suggestion is not None:
            self._suggested_rebuild = True
            self._events.emit(
                "checkpoint.frozen_slow",
                suggestion,
                step=step,
                seconds=seconds,
                bytes=fresh,
                estimated=False,
            )

    def _write_part(
        self, training_state: formats.StateWriter, name: CheckpointName, staging: str
    ) -> None:
        """A process that does not commit: its own part of the state (the
        pieces of a sharded state only its devices hold; none where it is
        replicated), uploaded, then its done marker listing it."""
        assert self.process is not None
        training_state.sync()
        files, entries = _staged(training_state, staging)
        if entries:
            transfer.upload(
                self.storage,
                [(os.path.join(staging, f), f"{name.path}/{f}") for f in files],
                workers=self.workers,
                memory_bytes=staging_bytes(sum(e.size for e in entries)),
            )
        write_marker(self.storage, name, self.process, entries)
        with self._lock:
            self._in_flight = None
            self.last_committed = name  # its part; process 0 commits the whole
        shutil.rmtree(os.path.join(self._staging_root, name.dirname), True)

    def _report_failure(self, job: str, exc: BaseException) -> None:
        with self._lock:
            failed, self._in_flight = self._in_flight, None
        self.last_saved = None
        kind = (
            "checkpoint.fenced" if isinstance(exc, FencedError) else "checkpoint.failed"
        )
        self._events.emit(
            kind,
            f"upload of {job} failed, nothing committed: {type(exc).__name__}: {exc}",
            level="error",
            step=failed.step if failed else None,
            checkpoint=job,
            error=type(exc).__name__,
        )

    # --- waiting and errors ------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the upload in flight; True when none is left running."""
        return self._uploader.wait(timeout)

    def check(self) -> None:
        """Raise, on this thread, the error of a failed background upload."""
        self._uploader.check()

    @property
    def uploading(self) -> bool:
        return self._uploader.busy

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Finish the upload in flight, raise its error, drop the staging area."""
        try:
            self._uploader.wait()
            self.check()
        finally:
            self._uploader.close()
            if self._owned_staging:
                shutil.rmtree(self._staging_root, ignore_errors=True)

    # --- restoring -----------------------------------------------------------

    def prefetch(self) -> Prefetch:
        """Start listing and downloading the newest committed checkpoint now.

        Call it before building the state that :meth:`restore` will take
        (with ``prefetch=``), so the download overlaps the build; close it
        (:meth:`Prefetch.close`) if the restore does not happen. The files
        go to the staging directory, on local disk.
        """
        self._uploader.wait()  # a commit in flight is part of what is listed
        return Prefetch(
            self.storage,
            scratch_dir=self._staging_root,
            events=self._events,
            workers=self.workers,
            progress_seconds=self.config.progress_seconds,
        )

    def restore(
        self, state: StateLike, *, prefetch: Prefetch | None = None
    ) -> RestoredInfo | None:
        """Load the newest valid committed checkpoint into ``state``.

        Args:
            state: what :meth:`save` was given, rebuilt (a fresh strategy
                scope is fine): a compiled ``keras.Model`` or the dict of
                trackables.
            prefetch: from :meth:`prefetch`, started before ``state`` was
                built; closed when this returns or raises.

        Returns:
            What was restored, or None when the run has no checkpoints.

        Raises:
            NoValidCheckpointError: checkpoints exist, none is usable.
            StructureMismatchError: the checkpoint does not fit ``state``.
        """
        try:
            training_state = self._training_state(state)
        except BaseException:
            if prefetch is not None:
                prefetch.close()
            raise

        def read(
            prefix: str, manifest: Manifest, arrived: ArrivalWait
        ) -> tuple[str, ...]:
            reader = formats.for_reading(
                state, manifest, self._settings(), training_state
            )
            return tuple(
                reader.restore(
                    prefix,
                    manifest.structure,
                    manifest.files,
                    arrived,
                    objects=manifest.objects,
                )
            )

        info = restore_latest(
            self.storage,
            read=read,
            events=self._events,
            scratch_dir=self._staging_root,
            workers=self.workers,
            progress_seconds=self.config.progress_seconds,
            max_bytes=size_bound(training_state.structure),
            prefetch=prefetch,
        )
        if info is not None:
            self.last_committed = info.name
            # What the next save uploads, known before it commits: the
            # upload budget of save_every="auto" holds from the first save.
            self.last_committed_bytes = info.total_bytes or None
            self._events.emit(
                "checkpoint.restored",
                # Keras's number of the epoch it was saved in, as printed.
                f"restored {info.name.dirname} (saved in epoch {info.epoch + 1})",
                step=info.step,
                checkpoint=info.name.dirname,
                skipped=[name for name, _ in info.skipped],
                seconds={k: round(v, 4) for k, v in info.seconds.items()},
            )
        return info

    # --- listing and retention ----------------------------------------------

    def committed(self) -> list[CheckpointName]:
        """Committed checkpoints in the run directory, oldest first."""
        return [d.name for d in RunListing.read(self.storage).committed]

    def prune(self) -> list[CheckpointName]:
        """Apply retention now; returns what was deleted.

        Raises:
            FencedError: a newer session owns the run (nothing is deleted).
        """
        with self._lock:
            in_flight = self._in_flight
        listed = RunListing.read(self.storage).checkpoints
        doomed = retention.plan(
            retention.with_leftovers(self.storage, listed),
            keep=self.config.keep,
            keep_every_steps=self.config.keep_every_steps,
            lease=self.lease,
            in_flight=in_flight,
        )
        if self.process is not None:
            # Another process may already be writing its part of a later step
            # of this session: that directory is not a leftover.
            last = in_flight or self.last_committed
            floor = last.step if last is not None else -1
            doomed = [
                d
                for d in doomed
                if d.committed or d.name.lease != self.lease or d.name.step <= floor
            ]
        deleted = []
        for entry in doomed:
            retention.delete(self.storage, entry, self._fence)
            deleted.append(entry.name)
        if (
            in_flight is None
            and (deleted or not self._collected)
            and (self.process is None or self.process.commits)
        ):
            # After the checkpoints: an object goes once nothing kept
            # references it, and never while an upload of ours may be
            # about to (one in flight is unreferenced until it commits).
            # Only a deletion makes one unreferenced, or a session that
            # died before its first commit: checked once per session.
            self._collect_objects()
            self._collected = True
        if deleted:
            self._events.emit(
                "checkpoint.pruned",
                f"deleted {len(deleted)} old or uncommitted checkpoint(s): "
                + ", ".join(n.dirname for n in deleted),
                checkpoints=[n.dirname for n in deleted],
            )
        return deleted

    def _collect_objects(self) -> None:
        removed, complete = objects.collect(self.storage, self._fence)
        if removed:
            self._events.emit(
                "checkpoint.objects_pruned",
                f"deleted {len(removed)} shared object(s) no kept checkpoint "
                f"references: " + ", ".join(removed),
                objects=removed,
            )
        if not complete:
            self._events.emit(
                "checkpoint.objects_kept",
                "kept every shared object: a committed checkpoint's manifest "
                "could not be read, so what it references is unknown",
                level="warning",
            )

    def _prune_quietly(self, step: int) -> None:
        # Retention failing costs disk space, not correctness: report it and
        # let training go on. Being fenced is different and propagates.
        try:
            self.prune()
        except FencedError:
            raise
        except Exception as exc:
            self._events.emit(
                "checkpoint.prune_failed",
                f"retention failed ({type(exc).__name__}: {exc}); old checkpoints "
                f"stay until the next save",
                level="warning",
                step=step,
            )


def _jsonable(field: str, value: dict[str, Any] | None) -> dict[str, Any]:
    """A JSON-clean copy of ``value``; numpy/TF scalars become Python numbers."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{field} must be a dict or None, got {type(value).__name__}.")

    def coerce(obj: Any) -> Any:
        for method in ("item", "tolist", "numpy"):
            if hasattr(obj, method):
                return getattr(obj, method)()
        raise TypeError(f"{type(obj).__name__} is not JSON-able")

    try:
        plain: dict[str, Any] = json.loads(json.dumps(value, default=coerce))
        return plain
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{field} must hold JSON-able values ({exc}); store tensors and other "
            f"objects in the state dict as trackables instead."
        ) from None


def _staged(
    training_state: formats.StateWriter, staging: str
) -> tuple[list[str], tuple[FileEntry, ...]]:
    """The files a sync left in ``staging`` and their manifest entries.

    Files only: shared objects are staged in a folder of their own. The
    portable format checksums each shard as it writes it (no second read of
    the files); TensorFlow's files are read here.
    """
    files = sorted(
        f for f in os.listdir(staging) if os.path.isfile(os.path.join(staging, f))
    )
    written: dict[str, tuple[int, str]] = getattr(training_state, "written", {})
    entries = tuple(
        FileEntry(name=f, size=written[f][0], crc32c=written[f][1])
        if f in written
        else FileEntry(
            name=f,
            size=os.path.getsize(os.path.join(staging, f)),
            crc32c=crc32c_file(os.path.join(staging, f)),
        )
        for f in files
    )
    return files, entries
