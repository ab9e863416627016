"""Restore: newest committed checkpoint that verifies, else the next older one.

Verification costs no request of its own. Before any download, the
listing (which GCS gives with each object's size and CRC32C) must show
every file the manifest lists, with the listed size and, where the storage
keeps one, the listed CRC32C. Then every file is downloaded with one
request each, its size and CRC32C computed as the bytes stream in, and
compared with the manifest, which is trusted once its commit marker is
(:mod:`colab_resume.protocol.commit`): damage that happened after the listing, on
the wire, or on a storage that keeps no checksums is caught there. The
reader checks the CRC32C once more over the bytes it restores from (held
in memory of its own), so a file changed on the local disk after that
check is damage too, and checks every tensor against the manifest: a
shard that disagrees with the manifest that committed it is damage, while
a manifest that disagrees with the model being restored is the user's
change of model (:class:`StructureMismatchError`, never a fallback). A
damaged checkpoint is skipped with a warning event naming what is wrong;
if checkpoints exist and none is usable, :class:`NoValidCheckpointError`
is raised, never a silent fresh start.

The download overlaps other work (:mod:`colab_resume.checkpoint.fetch`):
the newest checkpoint's files start coming while the model is built, and
the reader reads each shard as soon as it has arrived and verified, while
the next ones are still downloading; nothing is assigned to the live
state before every file has.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from colab_resume.checkpoint.errors import (
    DamagedCheckpointError,
    NoValidCheckpointError,
    StructureMismatchError,
)
from colab_resume.checkpoint.fetch import (
    ArrivalWait,
    Damaged,
    Prefetch,
    ShardFetch,
    check_listing,
    open_fetch,
    read_manifest,
)
from colab_resume.errors import CorruptRecordError
from colab_resume.events import EventLog
from colab_resume.protocol import commit
from colab_resume.protocol.listing import CheckpointDir
from colab_resume.protocol.manifest import Manifest
from colab_resume.protocol.records import BeatRecord, parse
from colab_resume.protocol.rundir import HEARTBEAT_DIR, MANIFEST, CheckpointName
from colab_resume.storage import Storage


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoredInfo:
    """What :meth:`CheckpointManager.restore` put back.

    Attributes:
        name: the checkpoint restored.
        step: training step to continue from.
        epoch: index (0-based) of the epoch the save was taken in; at an
            epoch's end, that epoch's.
        lease: lease of the session that wrote it.
        wall_time: when it was saved (writer's clock).
        metrics: metrics recorded at the save.
        extras: JSON extras recorded at the save.
        skipped: newer checkpoints that were damaged, with the reason.
        skipped_groups: optional state groups not restored (e.g. metrics of a
            model whose compiled metrics are not built yet).
        total_bytes: its files' size (shared objects apart): what a save
            of the same state uploads.
        seconds: where the restore's time went: ``list`` (the listing),
            ``verify`` (manifests read and checked against the listing),
            ``download`` (files fetched and checksummed as they stream),
            ``read`` (the files read into the live state).
    """

    name: CheckpointName
    step: int
    epoch: int
    lease: int
    wall_time: float
    metrics: dict[str, Any]
    extras: dict[str, Any]
    skipped: tuple[tuple[str, str], ...] = ()
    skipped_groups: tuple[str, ...] = ()
    total_bytes: int = 0
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    def describe(
        self, steps_per_epoch: int | None = None, *, now: float | None = None
    ) -> str:
        """One line for the user: where training resumes, from what.

        Args:
            steps_per_epoch: batches per epoch, to say in which epoch the
                training goes on, numbered as Keras prints it ("Epoch 3/10").
            now: the wall clock, for the checkpoint's age.
        """
        age = max(0.0, (time.time() if now is None else now) - self.wall_time)
        if age < 120:
            ago = f"{age:.0f} s"
        elif age < 7200:
            ago = f"{age / 60:.0f} min"
        else:
            ago = f"{age / 3600:.1f} h"
        return (
            f"resumed at step {self.step}{keras_epoch(self.step, steps_per_epoch)} "
            f"from the checkpoint session {self.lease} committed {ago} ago"
        )


def keras_epoch(step: int, steps_per_epoch: int | None) -> str:
    """Where training goes on after ``step``, in Keras's epoch numbers.

    Keras counts epochs from 1 where it prints them ("Epoch 3/10") and from
    0 everywhere else (``initial_epoch``, callbacks); a user reads the
    former, so that is the one said. Empty when the epoch length is unknown.
    """
    if not steps_per_epoch:
        return ""
    index, done = divmod(step, steps_per_epoch)
    if done == 0:
        return f" (the start of epoch {index + 1})"
    return f" (epoch {index + 1}, after {done} of its {steps_per_epoch} steps)"


# Variables are what a StateWriter.nbytes counts; opaque state (iterators,
# RNGs) and optimizer slots not yet built come on top. A manifest listing
# more than this was not written for the state being restored.
STATE_SIZE_FACTOR = 4
SIZE_SLACK_BYTES = 1 << 30


def size_bound(structure: dict[str, Any]) -> int:
    """Most bytes a checkpoint of the live state ``structure`` may list.

    Args:
        structure: ``StateWriter.structure``: ``{group: [[name, shape,
            dtype], ...]}``, or a string for an opaque trackable.
    """
    import numpy as np

    total = 0
    for variables in structure.values():
        for _, shape, dtype in variables if isinstance(variables, list) else ():
            try:
                itemsize = np.dtype(
                    dtype.removeprefix("<dtype: '").rstrip("'>")
                ).itemsize
            except TypeError:
                itemsize = 8  # a dtype numpy does not name (bfloat16...)
            total += int(np.prod(shape, dtype=np.int64)) * itemsize
    return STATE_SIZE_FACTOR * total + SIZE_SLACK_BYTES


def restore_latest(
    storage: Storage,
    *,
    read: Callable[[str, Manifest, ArrivalWait], tuple[str, ...]],
    events: EventLog,
    scratch_dir: str | None,
    workers: int,
    progress_seconds: float,
    max_bytes: int | None = None,
    prefetch: Prefetch | None = None,
) -> RestoredInfo | None:
    """Restore the newest usable committed checkpoint.

    Args:
        storage: the run directory.
        read: ``read(prefix, manifest, arrived)`` restores the local prefix
            into the live state and returns the optional groups it skipped.
            The files are still downloading: it calls ``arrived(name)``
            before it reads a file, and for every file of the manifest
            before it assigns anything (that call raises the damage it
            found). A StructureMismatchError from it (the manifest does not
            fit the state) is raised as is: an older checkpoint would not
            fit either. A DamagedCheckpointError (the files do not hold what
            the manifest lists) is damage.
        events: for warnings and progress.
        scratch_dir: parent of the temporary download directory.
        workers: parallel downloads.
        progress_seconds: quiet period before progress events.
        max_bytes: a checkpoint listing more is damaged (see
            :func:`size_bound`); never downloaded, unless a prefetch had
            started on it before the state's size was known.
        prefetch: what was listed and started downloading while the state
            was built (None: list now). Closed on return, whatever happens.

    Returns:
        What was restored, or None when there are no checkpoints at all.

    Raises:
        NoValidCheckpointError: checkpoints exist but none is usable.
        StructureMismatchError: the newest usable one does not fit the state.
    """
    clock = _Stopwatch()
    if prefetch is None:
        prefetch = Prefetch(
            storage,
            scratch_dir=scratch_dir,
            events=events,
            workers=workers,
            progress_seconds=progress_seconds,
            background=False,
        )
    try:
        listing = prefetch.listing()
        clock.lap("list")
        skipped: list[tuple[str, str]] = []
        for entry in reversed(listing.committed):
            fetch: ShardFetch | None = None
            try:
                taken = prefetch.take(entry)
                if taken is None:
                    manifest = read_manifest(storage, entry)
                    check_listing(manifest, entry)
                else:
                    manifest, fetch = taken
                if max_bytes is not None and manifest.total_bytes > max_bytes:
                    raise Damaged(
                        f"{MANIFEST} lists {manifest.total_bytes} bytes, more than "
                        f"the {max_bytes} a checkpoint of this state can hold"
                    )
                if fetch is None:
                    fetch = open_fetch(
                        storage,
                        entry,
                        manifest,
                        scratch_dir=scratch_dir,
                        events=events,
                        workers=workers,
                        progress_seconds=progress_seconds,
                    )
                clock.lap("verify")
                groups = read(fetch.prefix, manifest, fetch.arrived)
                # Reading overlapped the downloads: the time it waited for
                # files is the download's, the rest the read's.
                clock.split("download", fetch.waited, rest="read")
            except Damaged as exc:
                clock.split("download", fetch.waited if fetch else 0.0, rest="verify")
                reason = str(exc)
            except DamagedCheckpointError as exc:
                # Caught before StructureMismatchError's rule below: the files
                # disagree with their own manifest, so an older checkpoint may
                # well be intact.
                clock.lap("read")
                reason = str(exc)
            except StructureMismatchError:
                raise
            except Exception as exc:
                clock.lap("read")
                # TF refusing the files (DataLossError...) or a record we cannot
                # parse is damage too; storage outages surface through retries
                # first, and falling back past them would be wrong, so re-raise.
                if _is_storage_outage(exc):
                    raise
                reason = f"{type(exc).__name__}: {exc}"
            else:
                return RestoredInfo(
                    name=entry.name,
                    step=manifest.step,
                    epoch=manifest.epoch,
                    lease=manifest.lease,
                    wall_time=manifest.wall_time,
                    metrics=dict(manifest.metrics),
                    extras=dict(manifest.extras),
                    skipped=tuple(skipped),
                    skipped_groups=tuple(groups),
                    total_bytes=manifest.total_bytes,
                    seconds=clock.laps,
                )
            finally:
                if fetch is not None:
                    fetch.close()
            skipped.append((entry.name.dirname, reason))
            events.emit(
                "checkpoint.damaged",
                f"skipping {entry.name.path}: {reason}; trying the next older "
                f"checkpoint",
                level="warning",
                step=entry.name.step,
                checkpoint=entry.name.dirname,
                reason=reason,
            )
    finally:
        prefetch.close()
    if not listing.checkpoints:
        return None
    if not any(d.committed or d.committed_late for d in listing.checkpoints):
        committed_once = _committed_once(storage)
        if committed_once is None:
            # A session died during the first upload of the run: nothing
            # was ever committed, so there is nothing to resume from.
            events.emit(
                "checkpoint.none_committed",
                f"no checkpoint of this run was ever committed "
                f"({_count(listing.checkpoints)}, left by a session that died "
                f"uploading): training starts from step 0; the first save "
                f"removes what was left",
                level="warning",
                left=[d.name.dirname for d in listing.checkpoints],
            )
            return None
        skipped.append(
            (
                "(heartbeats)",
                f"a session reported a committed checkpoint at step "
                f"{committed_once}; none is committed now (its {MANIFEST} was "
                f"removed?)",
            )
        )
    reasons = "\n".join(f"  {name}: {why}" for name, why in skipped) or "  (none)"
    raise NoValidCheckpointError(
        f"{storage.url} has checkpoints but none can be restored.\n"
        f"Listing:\n{describe(listing.checkpoints)}\nProblems:\n{reasons}\n"
        f"Uncommitted directories (no {MANIFEST}) are never restored. Restore a "
        f"checkpoint from a backup, or delete checkpoints/ to start the run from "
        f"scratch on purpose."
    )


def _count(directories: tuple[CheckpointDir, ...]) -> str:
    n = len(directories)
    return "one uncommitted directory" if n == 1 else f"{n} uncommitted directories"


def _committed_once(storage: Storage) -> int | None:
    """The newest step any session's heartbeat reported committed, or None.

    Tells a run whose first upload was cut short (no beat ever named a
    committed checkpoint) from one whose committed checkpoints lost their
    manifests (a beat did): the first starts over, the second is refused.
    A beat that cannot be read counts as no report.
    """
    steps: list[int] = []
    for info in storage.list(HEARTBEAT_DIR + "/"):
        if not info.path.endswith(".json"):
            continue
        try:
            beat = parse(BeatRecord, storage.read_json(info.path), info.path)
        except (CorruptRecordError, FileNotFoundError, ValueError):
            continue
        if beat.checkpoint_step is not None:
            steps.append(beat.checkpoint_step)
    return max(steps) if steps else None


_STATE_TEXT = {
    commit.COMMITTED: "committed",
    commit.UNCOMMITTED: "uncommitted",
    commit.FENCED: "committed after its session was fenced (ignored)",
}


def describe(dirs: tuple[CheckpointDir, ...]) -> str:
    """A listing for error messages: one line per directory, newest first."""
    lines = []
    for entry in reversed(dirs):
        state = _STATE_TEXT[entry.state]
        size = sum(info.size for info in entry.objects.values())
        lines.append(
            f"  {entry.name.path}: {state}, {len(entry.objects)} files, {size} bytes"
        )
    return "\n".join(lines) if lines else "  (none)"


def _is_storage_outage(exc: BaseException) -> bool:
    from colab_resume.errors import StorageError

    return isinstance(exc, StorageError) and not isinstance(exc, CorruptRecordError)


class _Stopwatch:
    """Seconds per phase of one restore, summed over the checkpoints tried."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = self.laps.get(phase, 0.0) + now - self._last
        self._last = now

    def split(self, phase: str, seconds: float, *, rest: str) -> None:
        """The time since the last lap: ``seconds`` of it to ``phase``, the
        rest to ``rest``."""
        now = time.perf_counter()
        spent = now - self._last
        part = min(seconds, spent)
        self.laps[phase] = self.laps.get(phase, 0.0) + part
        self.laps[rest] = self.laps.get(rest, 0.0) + spent - part
        self._last = now
