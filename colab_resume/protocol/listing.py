"""One listing of the run directory, read once per operation and shared.

Liveness, restore, retention and the CLI all judge the same two folders:
``lease/`` (who took the run, and when by the server's clock) and
``checkpoints/`` (what was saved). A :class:`RunListing` is one immutable
snapshot of both, so an operation (``status``, ``prune``, a restore, one
``watch`` poll) lists each folder once and every reader sees the same
state, instead of each reader listing again and racing the others.

It lists the two folders, not the whole run directory: ``history/`` grows
with the run, and a poll should neither pay for it nor fail when it is
stuffed. ``colab-resume ls``, which shows everything, lists once and
builds the snapshot from that (:meth:`RunListing.from_objects`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from colab_resume.errors import CorruptRecordError
from colab_resume.protocol import commit, rundir
from colab_resume.protocol.rundir import (
    CHECKPOINT_DIR,
    LEASE_DIR,
    MANIFEST,
    CheckpointName,
)
from colab_resume.storage import ObjectInfo, Storage

# Leases count up from 1, one per session; a number this far above the
# count of leases was not made by a session.
MAX_LEASE_GAP = 1_000

Lease = tuple[int, ObjectInfo]  # number, its object (``updated``: when taken)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointDir:
    """One ``checkpoints/step-*.e*`` directory as listed.

    Attributes:
        name: its parsed name (step, lease).
        objects: file name -> metadata, for the files directly inside it.
        next_lease_taken_at: server time the first lease above
            ``name.lease`` was stored; None while nobody has taken one.
    """

    name: CheckpointName
    objects: dict[str, ObjectInfo]
    next_lease_taken_at: float | None = None

    @property
    def state(self) -> str:
        """Its commit state under :func:`colab_resume.protocol.commit.judge`."""
        return commit.judge(self.objects.get(MANIFEST), self.next_lease_taken_at)

    @property
    def committed(self) -> bool:
        return self.state == commit.COMMITTED

    @property
    def committed_late(self) -> bool:
        """Its manifest landed after its session was fenced (not committed)."""
        return self.state == commit.FENCED


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunListing:
    """What ``lease/`` and ``checkpoints/`` held at one listing.

    Attributes:
        url: the run directory.
        leases: every lease, ascending by number.
        checkpoints: every well-named checkpoint directory, oldest first
            (by step, then lease).
    """

    url: str
    leases: tuple[Lease, ...]
    checkpoints: tuple[CheckpointDir, ...]

    @classmethod
    def read(cls, storage: Storage) -> RunListing:
        """List ``lease/`` and ``checkpoints/`` of ``storage``: two listings.

        Raises:
            CorruptRecordError: a lease number no session makes (see
                :func:`read_leases`).
        """
        leases = read_leases(storage)
        objects = storage.list(CHECKPOINT_DIR)
        return cls(url=storage.url, leases=leases, checkpoints=_group(objects, leases))

    @classmethod
    def from_objects(cls, url: str, objects: Iterable[ObjectInfo]) -> RunListing:
        """The snapshot within a listing of the whole run directory. Pure."""
        objects = list(objects)
        leases = _leases(url, objects)
        return cls(url=url, leases=leases, checkpoints=_group(objects, leases))

    @property
    def lease(self) -> int:
        """The highest lease number taken so far; 0 when the run is new."""
        return self.leases[-1][0] if self.leases else 0

    @property
    def committed(self) -> tuple[CheckpointDir, ...]:
        """The committed checkpoints, oldest first: what restore may read."""
        return tuple(d for d in self.checkpoints if d.committed)

    @property
    def committed_step(self) -> int | None:
        """Step of the newest committed checkpoint (as restore would see it)."""
        committed = self.committed
        return max(d.name.step for d in committed) if committed else None


def read_leases(storage: Storage) -> tuple[Lease, ...]:
    """Every lease of ``storage``, ascending: one listing of ``lease/``.

    The one place that says what a lease object is, for every reader and
    writer: the holder checking for a successor
    (:func:`~colab_resume.heartbeat.lease.successor`), a session choosing
    the next number, liveness, the commit rule and the CLI.
    :meth:`RunListing.read` takes its leases from here too.

    Raises:
        CorruptRecordError: an object under ``lease/`` that is not a lease
            (another width, other digits, a folder: see
            :func:`~colab_resume.protocol.rundir.parse_lease_name`), or a lease
            number no session makes: above
            :data:`~colab_resume.protocol.rundir.MAX_LEASE`, or more than
            :data:`MAX_LEASE_GAP` above the number of leases. Taking the
            next number would give a lease whose checkpoints nobody sees.
    """
    return _leases(storage.url, storage.list(LEASE_DIR + "/"))


def _leases(url: str, objects: Iterable[ObjectInfo]) -> tuple[Lease, ...]:
    found = []
    for info in objects:
        if not info.path.startswith(LEASE_DIR + "/"):
            continue
        name = info.path[len(LEASE_DIR) + 1 :]
        number = rundir.parse_lease_name(name)
        if number is None:
            raise CorruptRecordError(
                f"{url}/{info.path} is not a lease object: sessions name their "
                f"leases with 8 digits from 1 ({rundir.lease_path(1)}), and "
                f"nothing else belongs in {LEASE_DIR}/. It was put there by hand "
                f"or by damage; delete {url}/{info.path} to let the run continue."
            )
        found.append((number, info))
    found.sort(key=lambda pair: pair[0])
    if found:
        number, info = found[-1]
        if number > min(rundir.MAX_LEASE, len(found) + MAX_LEASE_GAP):
            raise CorruptRecordError(
                f"{url}/{info.path} claims lease {number}, but the run "
                f"has {len(found)} lease objects: sessions number leases from 1 "
                f"upwards, with 8 digits at most. It is damaged or was put there "
                f"by hand; delete {url}/{info.path} to let the run continue."
            )
    return tuple(found)


def checkpoint_file(path: str) -> tuple[CheckpointName, str] | None:
    """The checkpoint directory and file name of a run-relative ``path``.

    None unless ``path`` is a file directly inside a well-named
    ``checkpoints/step-*.e*`` directory.
    """
    parts = path.split("/")
    if len(parts) != 3 or parts[0] != CHECKPOINT_DIR:
        return None
    name = CheckpointName.parse(parts[1])
    return None if name is None else (name, parts[2])


def _group(
    objects: Iterable[ObjectInfo], leases: tuple[Lease, ...]
) -> tuple[CheckpointDir, ...]:
    """Checkpoint directories among ``objects``, each with its successor lease.

    Objects that do not belong to a well-named checkpoint directory are
    ignored: they are not ours to judge.
    """
    grouped: dict[CheckpointName, dict[str, ObjectInfo]] = {}
    for info in objects:
        found = checkpoint_file(info.path)
        if found is None:
            continue
        name, file_name = found
        grouped.setdefault(name, {})[file_name] = info
    return tuple(
        CheckpointDir(
            name=name,
            objects=grouped[name],
            next_lease_taken_at=_first_taken_above(leases, name.lease),
        )
        for name in sorted(grouped)
    )


def _first_taken_above(leases: tuple[Lease, ...], lease: int) -> float | None:
    """When the first lease above ``lease`` was taken (server time), or None.

    Any lease above fences ``lease``, not only ``lease + 1``: a planted
    ``lease/00000003.json`` while lease 1 trains makes the next session take
    4, and lease 1's later manifests must count as late against 3's stamp.
    Leases are create-only, never rewritten: when taken is when the object
    became visible, and the earliest it can have been counts
    (:attr:`~colab_resume.storage.ObjectInfo.visible_since`): a manifest is
    judged against it with the latest it can have become visible, so where
    a store knows only bounds the rule errs towards "late", never "in time".
    """
    stamps = [info.visible_since for number, info in leases if number > lease]
    return min(stamps) if stamps else None
