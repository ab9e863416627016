"""Is the run alive? The verdict, judged from storage (docs/DESIGN.md §4).

Ages are measured between two readings of the *storage server's* clock:
the heartbeat object's ``updated`` time and the server's "now". The
reader's own clock never enters, so a laptop whose clock is minutes off
reaches the same verdict as the training VM.

One fact comes from the reader's machine instead: a reader on the
holder's own host can prove the holder's process gone
(:mod:`colab_resume.heartbeat.process`), and then the holder is DEAD at
once, whatever its last beat said.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from colab_resume import defaults
from colab_resume.errors import CorruptRecordError
from colab_resume.heartbeat import hosts, process
from colab_resume.heartbeat.hosts import HostBeat
from colab_resume.heartbeat.lease import read_lease
from colab_resume.protocol import rundir
from colab_resume.protocol.listing import Lease, RunListing, read_leases
from colab_resume.protocol.records import BeatRecord, LeaseRecord, parse
from colab_resume.redact import redact
from colab_resume.storage import ObjectInfo, Storage

log = logging.getLogger(__name__)

NEW = "NEW"
ALIVE = "ALIVE"
STALLED = "STALLED"
DEAD = "DEAD"
STOPPED = "STOPPED"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
STATES = (NEW, ALIVE, STALLED, DEAD, STOPPED, COMPLETED, FAILED)
# Nobody holds the run: the next session takes it at once, without waiting.
FREE = (DEAD, STOPPED, FAILED)

# Defaults when the holder's lease is unreadable (damage): its own promise
# is unknown. Deliberately the old default's 4 beats of 30 s, longer than
# today's: the holder may be an older version that beats that slowly.
DEFAULT_DEAD_AFTER_S = defaults.UNREADABLE_LEASE_DEAD_AFTER_SECONDS
DEFAULT_STALL_AFTER_S = defaults.STALL_AFTER_SECONDS
# The object stamps and "now" come from one clock, so a stamp this far
# ahead is a touched or damaged object, not skew; counting it would keep
# the run ALIVE until that future arrives.
MAX_FUTURE_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """What anyone can learn about a run from its run directory.

    Attributes:
        state: NEW, ALIVE, STALLED, DEAD, STOPPED, COMPLETED or FAILED.
        step: the furthest step the holder is known to have trained: its
            last beat's step, or the step of a checkpoint it committed
            since that beat (beats and commits do not wait for each other).
        checkpoint_step: the newest committed checkpoint's step (whoever
            committed it; restore takes it).
        heartbeat_age_s: seconds since the holder's last sign of life, by
            the storage server's clock.
        lease: the highest lease number (0: never taken).
        session_id: the session holding that lease.
        host: the machine it runs on.
        accelerator: what it trains on, as it reported.
        holder_state: what the holder last said it was doing.
        detail: one line explaining the verdict.
        dead_after_s: the silence after which the holder counts as dead.
        run_dir: where the run lives.
        beat_step: the step the holder's last beat reported, which ``step``
            exceeds when the holder committed a checkpoint after it.
        processes: in a multi-process run, each process's last beat and
            verdict (:mod:`colab_resume.heartbeat.hosts`); empty otherwise.
    """

    state: str
    step: int | None = None
    checkpoint_step: int | None = None
    heartbeat_age_s: float | None = None
    lease: int = 0
    session_id: str | None = None
    host: str | None = None
    accelerator: str | None = None
    holder_state: str | None = None
    detail: str = ""
    dead_after_s: float | None = None
    run_dir: str = ""
    beat_step: int | None = None
    processes: tuple[HostBeat, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def judge(
    *,
    done: bool,
    lease: LeaseRecord | None,
    beat: BeatRecord | None,
    age: float | None,
    dead_after: float,
    stall_after: float,
    gone: str | None = None,
    dead_host: str | None = None,
) -> tuple[str, str]:
    """The verdict and its one-line reason. Pure; see the module docstring.

    Args:
        done: DONE.json exists.
        lease: the highest lease, if any (None: never taken or unreadable).
        beat: that lease's last heartbeat, if any.
        age: seconds since the last sign of life (beat, else lease).
        dead_after: silence that makes the holder dead.
        stall_after: time without step progress that makes it stalled.
        gone: proof that the holder's process no longer runs
            (:func:`~colab_resume.heartbeat.process.proof_of_death`).
        dead_host: why one process of a multi-process run is dead
            (:func:`~colab_resume.heartbeat.hosts.dead_host`): the run is.
    """
    if done:
        return COMPLETED, "training finished (DONE.json written)"
    if age is None:
        return NEW, "no session has taken this run yet"
    if beat is not None and beat.state == "failed":
        return (
            FAILED,
            f"the holder stopped on an error: {redact(beat.error or 'unknown')}",
        )
    if beat is not None and beat.state in ("stopped", "completed"):
        # A clean end (stop(), SIGTERM, Ctrl-C) is no death: the holder
        # said it was leaving, after its final checkpoint.
        return STOPPED, (
            "the holder stopped cleanly (stop(), SIGTERM or Ctrl-C); run the "
            "same code again to continue, the run can be taken at once"
        )
    if gone is not None:
        return DEAD, f"{gone}; the run can be taken at once"
    if dead_host is not None:
        return DEAD, f"{dead_host}; the run can be taken at once"
    if age > dead_after:
        silence = f"{age:.0f}s" if age != float("inf") else "a trustworthy time"
        return DEAD, f"no heartbeat for {silence} (dead after {dead_after:.0f}s)"
    if beat is None:
        return ALIVE, "lease taken, first heartbeat not yet written"
    if beat.state == "training" and beat.since_progress_s + age > stall_after:
        idle = beat.since_progress_s + age
        return STALLED, (
            f"heartbeats arrive but the step has not moved for {idle:.0f}s "
            f"(stalled after {stall_after:.0f}s)"
        )
    return ALIVE, f"{beat.state}, last heartbeat {age:.0f}s ago"


@dataclasses.dataclass(frozen=True)
class HolderView:
    """The raw facts behind a verdict, for sessions deciding whether to wait."""

    lease: int
    lease_record: LeaseRecord | None
    beat: BeatRecord | None
    beat_info: ObjectInfo | None
    last_sign: float | None  # server time of the last sign of life
    problems: tuple[str, ...] = ()
    lease_info: ObjectInfo | None = None
    hosts: tuple[HostBeat, ...] = ()  # a multi-process lease's, unjudged


def sign_age(holder: HolderView, now: float) -> tuple[float | None, str | None]:
    """Seconds since the holder's last sign of life at server time ``now``.

    Stamps more than :data:`MAX_FUTURE_SECONDS` ahead of ``now`` are
    damage and ignored; with no other sign left the age is infinite (DEAD).

    Returns:
        The age (None: no lease at all) and a problem to report, if any.
    """
    if holder.last_sign is None:
        return None, None
    stamped = [info for info in (holder.lease_info, holder.beat_info) if info]
    future = [i for i in stamped if i.updated > now + MAX_FUTURE_SECONDS]
    if not future:
        return max(0.0, now - holder.last_sign), None
    problem = "; ".join(
        f"{info.path} is stamped {info.updated - now:.0f}s in the future "
        f"(ignored as damage)"
        for info in future
    )
    valid = [i.updated for i in stamped if i not in future]
    return (max(0.0, now - max(valid)) if valid else float("inf")), problem


def read_holder(
    storage: Storage, leases: tuple[Lease, ...] | None = None
) -> HolderView:
    """Read the highest lease and its heartbeat; damaged records become problems.

    Args:
        storage: the run directory.
        leases: its leases as already listed; listed here when None.
    """
    problems: list[str] = []
    leases = read_leases(storage) if leases is None else leases
    if not leases:
        return HolderView(0, None, None, None, None)
    number, lease_info = leases[-1]
    record: LeaseRecord | None = None
    try:
        record = read_lease(storage, number, lease_info.path)
    except FileNotFoundError:
        problems.append(f"{storage.url}/{lease_info.path} vanished while reading")
    except CorruptRecordError as exc:
        problems.append(str(exc))
    beat, beat_info = None, None
    path = rundir.heartbeat_path(number)
    try:
        beat_info = storage.info(path)
        beat = parse(BeatRecord, storage.read_json(path), f"{storage.url}/{path}")
    except FileNotFoundError:
        pass
    except CorruptRecordError as exc:
        problems.append(str(exc))
    last_sign = max(lease_info.updated, beat_info.updated if beat_info else 0.0)
    return HolderView(
        number,
        record,
        beat,
        beat_info,
        last_sign,
        tuple(problems),
        lease_info,
        hosts.read_beats(storage, number),
    )


def judge_hosts(
    holder: HolderView, now: float, dead_after: float
) -> tuple[tuple[HostBeat, ...], str | None]:
    """A multi-process holder's hosts, judged at server time ``now``.

    Returns:
        Each process's beat with its verdict, and why the run is dead for
        one of them (None: every host lives, or a single-process lease).
    """
    if not holder.hosts or holder.lease_info is None:
        return (), None
    lease_age = max(0.0, now - holder.lease_info.updated)
    judged = hosts.judge(
        holder.hosts, now=now, dead_after=dead_after, lease_age=lease_age
    )
    return judged, hosts.dead_host(judged)


def thresholds(
    record: LeaseRecord | None,
    *,
    dead_after: float | None = None,
    stall_after: float | None = None,
) -> tuple[float, float]:
    """The dead-after and stall-after seconds a holder is judged by.

    The one rule for every reader (``status``, ``watch``, the panels) and
    every session waiting to take the run, so they reach the same verdict
    on the same record: the caller's own override, else what the holder's
    lease promised, else — an unreadable lease — :data:`DEFAULT_DEAD_AFTER_S`
    and :data:`DEFAULT_STALL_AFTER_S`.
    """
    return (
        dead_after or (record.dead_after_seconds if record else DEFAULT_DEAD_AFTER_S),
        stall_after
        or (record.stall_after_seconds if record else DEFAULT_STALL_AFTER_S),
    )


def read_status(
    storage: Storage,
    *,
    dead_after_seconds: float | None = None,
    stall_after_seconds: float | None = None,
    listing: RunListing | None = None,
) -> RunStatus:
    """Judge the run in ``storage``; thresholds default to the holder's own.

    On the holder's own host a holder whose process is gone is DEAD at once.

    Args:
        storage: the run directory.
        dead_after_seconds: silence that makes the holder dead.
        stall_after_seconds: time without step progress that makes it stalled.
        listing: the run directory as the caller already listed it, so an
            operation that goes on to act on it (prune) lists only once.

    Raises:
        BucketNotFoundError, PermissionDeniedError, StorageUnavailableError.
    """
    storage.check()
    listing = RunListing.read(storage) if listing is None else listing
    done = storage.exists(rundir.DONE_RECORD)
    holder = read_holder(storage, listing.leases)
    problems = list(holder.problems)
    damage = storage.damage()
    if damage:  # read from the files' proof meanwhile
        problems.append(
            f"{damage} (fix: `colab-resume repair {storage.url}`, or resume the run)"
        )
    now = storage.server_time()
    age, problem = sign_age(holder, now)
    problems += [problem] if problem else []
    record, beat = holder.lease_record, holder.beat
    dead_after, stall_after = thresholds(
        record, dead_after=dead_after_seconds, stall_after=stall_after_seconds
    )
    judged, dead_host = judge_hosts(holder, now, dead_after)
    state, detail = judge(
        done=done,
        lease=record,
        beat=beat,
        age=age,
        dead_after=dead_after,
        stall_after=stall_after,
        gone=process.proof_of_death(record, process.this_process()),
        dead_host=dead_host,
    )
    if problems:
        detail += "; " + "; ".join(problems)
    beat_step = beat.step if beat else None
    judged = hosts.follow_run(
        judged, run_dead=state == DEAD, run_step=beat_step if state == ALIVE else None
    )
    return RunStatus(
        state=state,
        step=trained_step(beat_step, holder.lease, listing),
        checkpoint_step=listing.committed_step,
        heartbeat_age_s=None if age is None else round(age, 1),
        lease=holder.lease,
        session_id=record.session_id if record else (beat.session_id if beat else None),
        host=record.host if record else (beat.host if beat else None),
        accelerator=beat.accelerator if beat else None,
        holder_state=beat.state if beat else None,
        detail=detail,
        dead_after_s=dead_after,
        run_dir=storage.url,
        beat_step=beat_step,
        processes=judged,
    )


def trained_step(beat_step: int | None, lease: int, listing: RunListing) -> int | None:
    """The furthest step lease ``lease`` is known to have trained.

    A beat carries the step of its moment, up to one interval old; a
    checkpoint committed since proves its writer got to its step. Only the
    holder's own commits count: a newer checkpoint of an earlier session
    (one this holder could not restore, being damaged) says nothing of
    where this holder is.
    """
    own = [d.name.step for d in listing.committed if d.name.lease == lease]
    known = [s for s in (beat_step, max(own, default=None)) if s is not None]
    return max(known) if known else None
