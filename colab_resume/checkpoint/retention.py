"""Which checkpoints to delete, and deleting them safely.

Rules: keep the newest ``keep`` committed checkpoints, plus every one whose
step is a multiple of ``keep_every_steps``; never the newest committed one;
only older than a committed one (so nothing is deleted before its successor
has committed). Uncommitted directories of this or older leases are
leftovers of dead or failed uploads and are removed, except the upload in
flight. A directory's files that are not objects (a Drive upload killed
before its name was stored) go with it, and a directory that holds nothing
else, which no listing shows, is found by :func:`with_leftovers`. What
counts as committed, and the order of deletion that keeps a half-deleted
checkpoint from looking committed, is :mod:`colab_resume.protocol.commit`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from colab_resume.protocol import commit
from colab_resume.protocol.listing import CheckpointDir, checkpoint_file
from colab_resume.protocol.rundir import CHECKPOINT_DIR, CheckpointName
from colab_resume.storage import Storage


def plan(
    dirs: Sequence[CheckpointDir],
    *,
    keep: int,
    keep_every_steps: int | None,
    lease: int,
    in_flight: CheckpointName | None = None,
) -> list[CheckpointDir]:
    """The directories to delete, oldest first. Pure.

    Args:
        dirs: the listed checkpoints, oldest first
            (:attr:`~colab_resume.protocol.listing.RunListing.checkpoints`).
        keep: newest committed checkpoints to keep (>= 1).
        keep_every_steps: also keep committed checkpoints at multiples of this.
        lease: the current session's lease; uncommitted directories of newer
            leases belong to another live session and are left alone.
        in_flight: this session's upload in progress, never touched.
    """
    if keep < 1:
        raise ValueError(
            f"keep must be >= 1 (the newest is never deleted), got {keep!r}."
        )
    committed = [d for d in dirs if d.committed]
    doomed: list[CheckpointDir] = []
    if committed:
        newest = committed[-1].name
        for entry in committed[:-keep]:
            if keep_every_steps and entry.name.step % keep_every_steps == 0:
                continue
            if entry.name < newest:
                doomed.append(entry)
    for entry in dirs:
        if entry.committed or entry.name == in_flight or entry.name.lease > lease:
            continue
        doomed.append(entry)
    return sorted(doomed, key=lambda d: d.name)


def with_leftovers(
    storage: Storage, dirs: Sequence[CheckpointDir]
) -> list[CheckpointDir]:
    """``dirs``, and the directories holding only leftovers, oldest first.

    A session killed during the first upload of a checkpoint on Drive
    leaves a file no listing shows (its name never reached the run's
    index), so the directory is not among ``dirs``; it is added here as an
    uncommitted directory without objects, for :func:`plan` to judge like
    any other leftover. Its bytes would otherwise fill the quota for good.
    """
    known = {d.name for d in dirs}
    found = []
    for path in storage.leftovers(CHECKPOINT_DIR):
        parsed = checkpoint_file(path)
        if parsed is not None and parsed[0] not in known:
            known.add(parsed[0])
            found.append(CheckpointDir(name=parsed[0], objects={}))
    return sorted([*dirs, *found], key=lambda d: d.name)


def delete(storage: Storage, entry: CheckpointDir, fence: Callable[[], None]) -> None:
    """Delete one checkpoint directory: fence check, then uncommit it first."""
    fence()
    for file_name in commit.deletion_order(entry.objects):
        storage.delete(f"{entry.name.path}/{file_name}")
    storage.remove_leftovers(entry.name.path)
