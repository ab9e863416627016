"""Lease epochs: who owns the run (docs/DESIGN.md §4).

A session owns the run when it created the highest ``lease/NNNNNNNN.json``.
Leases are created one number above the highest one seen, create-only,
so of several sessions racing for the same number exactly one wins.
A holder of lease N is superseded by *any* lease object above N, not only
N+1: a lease can be planted with any number, and the next session then
takes one above that, so a check of N+1 alone would let two sessions
write. The holder therefore lists ``lease/`` (one request) through the run
directory listing (:func:`colab_resume.protocol.listing.read_leases`), which is also
the one place that says what a lease object is; an object there that is
not one fences the holder as it refuses every other reader.
"""

from __future__ import annotations

import dataclasses

from colab_resume.errors import CorruptRecordError, LeaseRaceError
from colab_resume.protocol import rundir
from colab_resume.protocol.listing import read_leases
from colab_resume.protocol.records import LeaseRecord, parse, to_json
from colab_resume.storage import Storage


def read_lease(storage: Storage, lease: int, path: str | None = None) -> LeaseRecord:
    """Parse lease ``lease`` (from ``path`` when listed under another width)."""
    path = path or rundir.lease_path(lease)
    return parse(LeaseRecord, storage.read_json(path), f"{storage.url}/{path}")


def take_lease(storage: Storage, record: LeaseRecord) -> None:
    """Create ``record.lease``, create-only.

    Raises:
        LeaseRaceError: another session created that lease number first.
    """
    path = rundir.lease_path(record.lease)
    if record.lease > rundir.MAX_LEASE:
        raise CorruptRecordError(
            f"{storage.url} has used every lease number up to {rundir.MAX_LEASE}; "
            f"continue training in a new run_dir."
        )
    try:
        storage.write_json(path, to_json(record), create_only=True)
    except FileExistsError:
        winner = _describe_winner(storage, record.lease)
        raise LeaseRaceError(
            f"Another session ({winner}) took lease {record.lease} of "
            f"{storage.url} at the same moment; this session writes nothing and "
            f"stops. Only one session may train a run: stop the other one, or "
            f"run again with takeover=True to take the run from it."
        ) from None


def successor(storage: Storage, lease: int) -> int | None:
    """The lowest lease number above ``lease``, or None while there is none.

    Raises:
        CorruptRecordError: ``lease/`` holds an object that is not a lease,
            or an absurd number (:func:`~colab_resume.protocol.listing.read_leases`).
    """
    above = [number for number, _ in read_leases(storage) if number > lease]
    return min(above) if above else None


# What verify_lease found: the lease is still ours; it had been deleted and
# this session put it back; or this session no longer owns the run.
HELD, RESTORED, SUPERSEDED, LOST = "held", "restored", "superseded", "lost"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What :func:`verify_lease` found.

    Attributes:
        state: ``HELD``, ``RESTORED``, ``SUPERSEDED`` or ``LOST``.
        by: the lease that superseded this one (``SUPERSEDED`` only).
        why: what made the lease ``LOST``, in words.
    """

    state: str
    by: int | None = None
    why: str = ""


def verify_lease(storage: Storage, record: LeaseRecord) -> Verdict:
    """Whether ``record`` still makes its session the owner of the run.

    First: is there any lease above it (:func:`successor`)? Then the holder
    reads its own lease, because a check from above cannot see the holder's
    own lease vanish: if someone deletes ``lease/N`` behind the holder's
    back, the next session computes ``N`` as the next number, creates it and
    trains, while the old holder sees nothing above ``N``: two committers.

    - gone: it is created again, create-only, from the record. If that
      fails someone else took number ``N`` meanwhile, and this session is
      fenced; if it succeeds the run is protected again (``RESTORED``).
    - another session's, or unreadable (damage): this session can no
      longer prove it owns the run, so it stops writing (``LOST``).

    ``lease/`` holding something that is not a lease is ``LOST`` too: every
    other reader refuses the run by that object's name, and a holder that
    cannot read the leases cannot prove that none is above its own.
    """
    try:
        above = successor(storage, record.lease)
    except CorruptRecordError as exc:
        return Verdict(LOST, why=str(exc))
    if above is not None:
        return Verdict(SUPERSEDED, by=above)
    try:
        current = read_lease(storage, record.lease)
    except FileNotFoundError:
        try:
            take_lease(storage, record)
        except LeaseRaceError:
            return Verdict(LOST, why=f"lease {record.lease} was taken again")
        return Verdict(RESTORED)
    except CorruptRecordError as exc:
        return Verdict(LOST, why=str(exc))
    if current.session_id != record.session_id:
        return Verdict(LOST, why=f"lease {record.lease} names another session")
    return Verdict(HELD)


def _describe_winner(storage: Storage, lease: int) -> str:
    try:
        winner = read_lease(storage, lease)
    except Exception:  # the refusal matters more than who won
        return "unknown session"
    return f"session {winner.session_id} on {winner.host}"
