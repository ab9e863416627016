"""What is in ``checkpoints/``: one listing, grouped into checkpoints.

A single recursive listing gives every object's size and (on GCS) CRC32C,
which is all restore needs to verify a checkpoint and all retention needs
to decide what to delete.
"""

from __future__ import annotations

import dataclasses

from colab_resume.rundir import (
    CHECKPOINT_DIR,
    LEASE_DIR,
    MANIFEST,
    CheckpointName,
    parse_lease_name,
)
from colab_resume.storage import ObjectInfo, Storage


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointDir:
    """One ``checkpoints/step-*.e*`` directory as listed.

    Attributes:
        name: its parsed name (step, lease).
        objects: file name -> metadata, for the files directly inside it.
        committed_late: its manifest landed after the next lease was taken:
            the writer had been fenced (see :func:`scan`).
    """

    name: CheckpointName
    objects: dict[str, ObjectInfo]
    committed_late: bool = False

    @property
    def committed(self) -> bool:
        return MANIFEST in self.objects and not self.committed_late


def scan(storage: Storage) -> list[CheckpointDir]:
    """All checkpoint directories, oldest first (by step, then lease).

    Objects that do not belong to a well-named checkpoint directory are
    ignored: they are not ours to judge.

    A holder checks its fence right before writing a manifest, so a newer
    session can take the run between that check and the write. Such a
    manifest is the fenced session's: by the server's clock it was written
    after lease N+1 was created. It does not count as committed — the newer
    session may already have restored an older step and be training from
    there — and retention removes it like any other leftover.
    """
    grouped: dict[CheckpointName, dict[str, ObjectInfo]] = {}
    for info in storage.list(CHECKPOINT_DIR):
        parts = info.path.split("/")
        if len(parts) != 3 or parts[0] != CHECKPOINT_DIR:
            continue
        name = CheckpointName.parse(parts[1])
        if name is None:
            continue
        grouped.setdefault(name, {})[parts[2]] = info
    taken_at = _lease_creation_times(storage) if grouped else {}
    dirs = []
    for name in sorted(grouped):
        manifest = grouped[name].get(MANIFEST)
        successor = taken_at.get(name.lease + 1)
        late = (
            manifest is not None
            and successor is not None
            and manifest.updated >= successor
        )
        dirs.append(
            CheckpointDir(name=name, objects=grouped[name], committed_late=late)
        )
    return dirs


def _lease_creation_times(storage: Storage) -> dict[int, float]:
    """Lease number -> when the server stored it (leases are never rewritten)."""
    times = {}
    for info in storage.list(LEASE_DIR + "/"):
        number = parse_lease_name(info.path.rsplit("/", 1)[-1])
        if number is not None:
            times[number] = info.updated
    return times


def describe(dirs: list[CheckpointDir]) -> str:
    """A listing for error messages: one line per directory."""
    lines = []
    for entry in reversed(dirs):
        state = "committed" if entry.committed else "uncommitted"
        if entry.committed_late:
            state = "committed after its session was fenced (ignored)"
        size = sum(info.size for info in entry.objects.values())
        lines.append(
            f"  {entry.name.path}: {state}, {len(entry.objects)} files, {size} bytes"
        )
    return "\n".join(lines) if lines else "  (none)"
