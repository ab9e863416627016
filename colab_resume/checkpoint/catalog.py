"""What is in ``checkpoints/``: one listing, grouped into checkpoints.

A single recursive listing gives every object's size and (on GCS) CRC32C,
which is all restore needs to verify a checkpoint and all retention needs
to decide what to delete.
"""

from __future__ import annotations

import dataclasses

from colab_resume.rundir import CHECKPOINT_DIR, MANIFEST, CheckpointName
from colab_resume.storage import ObjectInfo, Storage


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointDir:
    """One ``checkpoints/step-*.e*`` directory as listed.

    Attributes:
        name: its parsed name (step, lease).
        objects: file name -> metadata, for the files directly inside it.
    """

    name: CheckpointName
    objects: dict[str, ObjectInfo]

    @property
    def committed(self) -> bool:
        return MANIFEST in self.objects


def scan(storage: Storage) -> list[CheckpointDir]:
    """All checkpoint directories, oldest first (by step, then lease).

    Objects that do not belong to a well-named checkpoint directory are
    ignored: they are not ours to judge.
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
    return [CheckpointDir(name=n, objects=grouped[n]) for n in sorted(grouped)]


def describe(dirs: list[CheckpointDir]) -> str:
    """A listing for error messages: one line per directory."""
    lines = []
    for entry in reversed(dirs):
        state = "committed" if entry.committed else "uncommitted"
        size = sum(info.size for info in entry.objects.values())
        lines.append(
            f"  {entry.name.path}: {state}, {len(entry.objects)} files, {size} bytes"
        )
    return "\n".join(lines) if lines else "  (none)"
