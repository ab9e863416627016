"""The commit rule: when a checkpoint directory counts as committed (DESIGN §4).

A checkpoint ``checkpoints/step-S.eL/`` is committed when, and only when:

1. its ``MANIFEST.json`` exists. The writer uploads every file first and
   the manifest last, create-only, so a directory without one is an upload
   in flight, one that died, or one deleted halfway; and
2. no lease above ``L`` had been taken when the manifest was stored, by
   the storage server's clock: the manifest's ``updated`` is earlier than
   that of the first lease above ``L``. A holder checks its fence right
   before writing the manifest, so a newer session can take the run in
   between; the manifest then belongs to a fenced session, whose successor
   may already have restored an older step and be training from there. A
   tie counts as late: one clock stamped both, and equal stamps do not
   prove the manifest came first.

A checkpoint of a multi-process run (``processes`` > 1 in its manifest)
is committed only with every process's part: process ``k`` writes its
files, then its done marker ``PROCESS-k.json`` listing them with their
CRC32Cs; process 0 writes the manifest only after every marker is there
and every file a marker lists verifies, and the manifest lists the markers
(size and CRC32C) as it lists files. A directory missing a process's
marker or files is damage, never restored (:func:`missing_processes`).

Any lease above ``L`` counts, not only ``L + 1``. Sessions number leases
one above the highest they see, but a lease object can be planted with any
number (``lease/00000003.json`` while lease 1 trains): the next session
then takes 4, and lease 1 is fenced by 3 and 4 alike — the holder's check
(:func:`colab_resume.heartbeat.lease.successor`) and this rule read the
same listing. A committed checkpoint is the only kind restore reads,
liveness reports, or retention keeps; the rest are leftovers. Uncommitting
goes the other way: the manifest is deleted first (:func:`deletion_order`),
so a deletion cut short leaves an uncommitted directory, never a committed
one with files missing.

Pure functions: the facts come from a
:class:`~colab_resume.protocol.listing.RunListing`.
"""

from __future__ import annotations

from collections.abc import Iterable

from colab_resume.protocol.rundir import MANIFEST, process_marker
from colab_resume.storage import ObjectInfo

COMMITTED = "committed"
UNCOMMITTED = "uncommitted"  # no manifest
FENCED = "fenced"  # a manifest stored once the next lease was taken


def judge(manifest: ObjectInfo | None, next_lease_taken_at: float | None) -> str:
    """The commit state of one checkpoint directory.

    Args:
        manifest: its ``MANIFEST.json`` as listed, None when absent.
        next_lease_taken_at: server time the first lease above ``L`` was
            stored, None while no session has taken one.

    Returns:
        :data:`COMMITTED`, :data:`UNCOMMITTED` or :data:`FENCED`.
    """
    if manifest is None:
        return UNCOMMITTED
    if next_lease_taken_at is not None and manifest.visible_by >= next_lease_taken_at:
        return FENCED
    return COMMITTED


def deletion_order(file_names: Iterable[str]) -> list[str]:
    """The files of a checkpoint directory in the order to delete them."""
    names = sorted(file_names)
    return [MANIFEST] * (MANIFEST in names) + [n for n in names if n != MANIFEST]


def missing_processes(processes: int, file_names: Iterable[str]) -> list[int]:
    """The processes whose done marker is not among ``file_names``.

    Args:
        processes: the processes that took part (the manifest's ``processes``).
        file_names: the names listed in the checkpoint directory.
    """
    if processes <= 1:
        return []  # a single-process checkpoint has no markers: its manifest is it
    names = set(file_names)
    return [k for k in range(processes) if process_marker(k) not in names]
