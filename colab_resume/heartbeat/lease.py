"""Lease epochs: who owns the run (docs/DESIGN.md §4).

A session owns the run when it created the highest ``lease/NNNNNNNN.json``.
Leases are created one number above the highest one seen, create-only,
so of several sessions racing for the same number exactly one wins.
Because nobody can create lease N+2 without having seen N+1, a holder of
lease N learns it was superseded from one cheap existence check of N+1.
Listing the leases is the run directory listing's job
(:func:`colab_resume.listing.read_leases`).
"""

from __future__ import annotations

from colab_resume import rundir
from colab_resume.errors import CorruptRecordError, LeaseRaceError
from colab_resume.heartbeat.records import LeaseRecord, parse, to_json
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


def is_superseded(storage: Storage, lease: int) -> bool:
    """True once some session has taken a lease above ``lease``."""
    return storage.exists(rundir.lease_path(lease + 1))


# What verify_lease found: the lease is still ours; it had been deleted and
# this session put it back; or this session no longer owns the run.
HELD, RESTORED, SUPERSEDED, LOST = "held", "restored", "superseded", "lost"


def verify_lease(storage: Storage, record: LeaseRecord) -> str:
    """Whether ``record`` still makes its session the owner of the run.

    The cheap check (:func:`is_superseded`) cannot see the holder's own
    lease vanish: if someone deletes ``lease/N`` behind the holder's back,
    the next session computes ``N`` as the next number, creates it and
    trains, while the old holder never sees an ``N + 1``: two committers.
    So the holder also reads its own lease:

    - gone: it is created again, create-only, from the record. If that
      fails someone else took number ``N`` meanwhile, and this session is
      fenced; if it succeeds the run is protected again (``RESTORED``).
    - another session's, or unreadable (damage): this session can no
      longer prove it owns the run, so it stops writing (``LOST``).

    Returns:
        ``HELD``, ``RESTORED``, ``SUPERSEDED`` or ``LOST``.
    """
    if is_superseded(storage, record.lease):
        return SUPERSEDED
    try:
        current = read_lease(storage, record.lease)
    except FileNotFoundError:
        try:
            take_lease(storage, record)
        except LeaseRaceError:
            return LOST
        return RESTORED
    except CorruptRecordError:
        return LOST
    return HELD if current.session_id == record.session_id else LOST


def _describe_winner(storage: Storage, lease: int) -> str:
    try:
        winner = read_lease(storage, lease)
    except Exception:  # the refusal matters more than who won
        return "unknown session"
    return f"session {winner.session_id} on {winner.host}"
