"""Taking a run, holding it, and letting go (docs/DESIGN.md §4).

A :class:`RunSession` is one process's claim on a run directory:

1. It reads the highest lease. A holder on this host whose process is
   gone is dead at once (:mod:`~colab_resume.heartbeat.process`). Else, if
   the holder's last beat is recent, it *watches*: a new beat means the
   run is alive (refuse, unless ``takeover``); silence for
   ``dead_after_seconds`` means it is dead. A countdown is reported while
   it waits. A refused session writes nothing.
2. It creates ``run.json`` (first session only) and the next lease,
   create-only; of several sessions racing, exactly one wins.
3. It beats in the background and checks for a newer lease before every
   beat and every checkpoint commit (:meth:`RunSession.fence`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from colab_resume import defaults
from colab_resume._version import __version__
from colab_resume.errors import FencedError, RunInUseError, RunMismatchError
from colab_resume.events import EventLog
from colab_resume.heartbeat import liveness, process
from colab_resume.heartbeat.lease import take_lease
from colab_resume.heartbeat.writer import HeartbeatWriter
from colab_resume.protocol import rundir
from colab_resume.protocol.records import (
    MAX_DEAD_AFTER_SECONDS,
    MAX_STALL_AFTER_SECONDS,
    LeaseRecord,
    RunRecord,
    parse,
    to_json,
)
from colab_resume.storage import Storage
from colab_resume.validate import check_bool, check_seconds

log = logging.getLogger(__name__)

# 10 s beats, dead after 4 (40 s): a rerun on a new VM waits at most 40 s
# after a silent death, and a holder survives 3 lost beats (each retried
# for one interval) before it is judged dead. See README "Heartbeats" for
# what the beats cost.
DEFAULT_HEARTBEAT_SECONDS = defaults.HEARTBEAT_SECONDS
BEATS_BEFORE_DEAD = defaults.BEATS_BEFORE_DEAD
# While waiting on a silent holder: a log line this often (or 4 per wait,
# if the wait is shorter), so the countdown shows without flooding.
REPORT_EVERY_SECONDS = 5.0
# A run id lands in run.json and in messages: keep it plain.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SessionOptions:
    """How a session beats and how it judges the one before it.

    Attributes:
        heartbeat_seconds: interval between beats.
        dead_after_seconds: silence after which a holder is dead; default
            ``4 * heartbeat_seconds``.
        stall_after_seconds: time without step progress (while training)
            after which a beating holder is reported STALLED.
        takeover: take the run even from a live holder (it gets fenced).
        expected_run_id: refuse a run directory whose ``run.json`` names
            another run; a new run directory gets this id.
    """

    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    dead_after_seconds: float | None = None
    stall_after_seconds: float = defaults.STALL_AFTER_SECONDS
    takeover: bool = False
    expected_run_id: str | None = None

    def __post_init__(self) -> None:
        # The one home of these checks: the Agent's flat options of the same
        # names are checked here, so the wording is the Agent's.
        check_seconds("heartbeat_seconds", self.heartbeat_seconds)
        check_seconds("dead_after_seconds", self.dead_after_seconds, optional=True)
        check_seconds("stall_after_seconds", self.stall_after_seconds)
        check_bool("takeover", self.takeover)
        if (
            self.dead_after_seconds is not None
            and self.dead_after_seconds <= self.heartbeat_seconds
        ):
            raise ValueError(
                f"dead_after_seconds ({self.dead_after_seconds:g}) must be longer "
                f"than heartbeat_seconds ({self.heartbeat_seconds:g}), or a live "
                f"session would look dead between two beats; e.g. "
                f"dead_after_seconds={BEATS_BEFORE_DEAD * self.heartbeat_seconds:g} "
                f"({BEATS_BEFORE_DEAD} beats), or None for that default."
            )
        # Readers treat a lease beyond these bounds as damage: never write one.
        if not self.dead_after <= MAX_DEAD_AFTER_SECONDS:
            raise ValueError(
                f"dead_after_seconds (or {BEATS_BEFORE_DEAD} x heartbeat_seconds) "
                f"must be at most {MAX_DEAD_AFTER_SECONDS:.0f} (a day), got "
                f"{self.dead_after!r}; pick a shorter heartbeat."
            )
        if not self.stall_after_seconds <= MAX_STALL_AFTER_SECONDS:
            raise ValueError(
                f"stall_after_seconds must be at most {MAX_STALL_AFTER_SECONDS:.0f} "
                f"(a week), got {self.stall_after_seconds!r}."
            )
        if self.expected_run_id is not None and not (
            isinstance(self.expected_run_id, str)
            and RUN_ID_PATTERN.fullmatch(self.expected_run_id)
        ):
            raise ValueError(
                f"run_id must be 1-128 letters, digits, '.', '_' or '-' (or None), "
                f"got {self.expected_run_id!r}; e.g. run_id='mnist-resnet-v3'."
            )

    @property
    def dead_after(self) -> float:
        if self.dead_after_seconds is not None:
            return self.dead_after_seconds
        return BEATS_BEFORE_DEAD * self.heartbeat_seconds


# Called with (seconds_left, holder_description) while waiting on a silent holder.
CountdownHook = Callable[[float, str], None]


class RunSession:
    """This process's claim on a run. Use :meth:`open`.

    Attributes:
        storage: the run directory.
        lease: the lease number this session holds.
        session_id: random id of this session.
        run: the run's ``run.json``.
    """

    def __init__(
        self,
        storage: Storage,
        lease: LeaseRecord,
        run: RunRecord,
        events: EventLog,
    ) -> None:
        self.storage = storage
        self.lease_record = lease
        self.run = run
        self.events = events
        self.writer = HeartbeatWriter(storage, lease, events)
        self._closed = False

    @property
    def lease(self) -> int:
        return self.lease_record.lease

    @property
    def session_id(self) -> str:
        return self.lease_record.session_id

    # --- taking the run ---------------------------------------------------------

    @classmethod
    def open(
        cls,
        storage: Storage,
        options: SessionOptions | None = None,
        *,
        events: EventLog | None = None,
        on_countdown: CountdownHook | None = None,
        sleep: Callable[[float], None] = time.sleep,
        identity: Callable[[], process.ProcessIdentity | None] = process.this_process,
    ) -> RunSession:
        """Take the run in ``storage`` and start beating.

        Args:
            storage: the run directory.
            options: how to beat and judge the previous holder.
            events: where the wait, the takeover and the lease are reported.
            on_countdown: called with (seconds left, holder) at every poll
                while waiting on a silent holder.
            sleep: how to wait between polls.
            identity: this process as the lease will name it (for tests
                that play a holder on another machine).

        Raises:
            RunInUseError: a live session holds the run and ``takeover`` is off.
            LeaseRaceError: another session took the run at the same moment.
            RunMismatchError: ``run.json`` names a different run.
        """
        options = options or SessionOptions()
        events = events or EventLog()
        storage.check()
        holder = liveness.read_holder(storage)
        here = identity()
        took_over_from = previous_state = None
        if holder.lease and options.expected_run_id:
            # Refuse another run's directory before waiting on its holder.
            _ensure_run_record(storage, options, fresh=False)
        if holder.lease:
            previous_state = _wait_for_verdict(
                storage, holder, options, events, on_countdown, sleep, here
            )
            took_over_from = holder.lease
        run = _ensure_run_record(storage, options, fresh=not holder.lease)
        record = LeaseRecord(
            lease=holder.lease + 1,
            session_id=uuid.uuid4().hex[:12],
            host=socket.gethostname(),
            pid=os.getpid(),
            created_at=time.time(),
            package_version=__version__,
            heartbeat_seconds=options.heartbeat_seconds,
            dead_after_seconds=options.dead_after,
            stall_after_seconds=options.stall_after_seconds,
            took_over_from=took_over_from,
            previous_state=previous_state,
            boot_id=here.boot_id if here else None,
            pid_namespace=here.pid_namespace if here else None,
            start_ticks=here.start_ticks if here else None,
        )
        take_lease(storage, record)
        events.emit(
            "lease.taken",
            f"took lease {record.lease} of {storage.url} as session "
            f"{record.session_id} on {record.host}",
            lease=record.lease,
            session_id=record.session_id,
        )
        session = cls(storage, record, run, events)
        session.writer.start()
        return session

    # --- while holding it ---------------------------------------------------------

    def update(self, **fields: Any) -> None:
        """Report progress for the next beat: ``step``, ``state``, ``accelerator``,
        ``checkpoint_step``, ``error``. Cheap; call it every step."""
        self.writer.update(**fields)

    def check(self) -> None:
        """Raise FencedError if the heartbeat found a newer lease (no I/O)."""
        if self.writer.fenced:
            raise self._fenced_error()

    def fence(self) -> None:
        """Check storage for a newer lease now; call before every commit.

        Raises:
            FencedError: another session took the run; write nothing more.
        """
        self.check()
        if not self.writer.verify_lease(self.storage):
            raise self._fenced_error()

    def _fenced_error(self) -> FencedError:
        if self.writer.fenced_by == self.lease:
            return FencedError(
                f"Session {self.session_id} (lease {self.lease}) was fenced: "
                f"{self.storage.url}/{rundir.lease_path(self.lease)} no longer "
                f"names this session, or {rundir.LEASE_DIR}/ holds what is not a "
                f"lease ({self.writer.fenced_why}), so it cannot prove it owns the "
                f"run and stopped writing. Check who else trains this run; rerun "
                f"to take it over cleanly."
            )
        return FencedError(
            f"Session {self.session_id} (lease {self.lease}) was fenced: a newer "
            f"session took lease {self.writer.fenced_by} of {self.storage.url}. This "
            f"session stopped writing; training continues in the newer session."
        )

    # --- letting go -------------------------------------------------------------

    def complete(self, summary: dict[str, Any] | None = None) -> None:
        """Write DONE.json (once) and a final 'completed' beat."""
        self.fence()
        record = {
            "run_id": self.run.run_id,
            "lease": self.lease,
            "session_id": self.session_id,
            "finished_at": time.time(),
            **(summary or {}),
        }
        try:
            self.storage.write_json(rundir.DONE_RECORD, record, create_only=True)
        except FileExistsError:
            pass  # finished before; DONE.json stays as first written
        self.events.emit("run.completed", f"run completed; wrote {rundir.DONE_RECORD}")
        self.close("completed")

    def close(self, state: str = "stopped", error: str | None = None) -> None:
        """Stop beating; the last beat says ``state`` (``stopped``, ``failed``...)."""
        if self._closed:
            return
        self._closed = True
        self.writer.stop(final_state=state, error=error)

    def __enter__(self) -> RunSession:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            self.close("stopped")
        elif isinstance(exc, FencedError):
            self.close("fenced")
        else:
            self.close("failed", error=f"{type(exc).__name__}: {exc}")


def _ensure_run_record(
    storage: Storage, options: SessionOptions, *, fresh: bool
) -> RunRecord:
    where = f"{storage.url}/{rundir.RUN_RECORD}"
    if fresh:
        record = RunRecord(
            # A caller who names its run gets that name, so a later session
            # with another name is refused (see expected_run_id).
            run_id=options.expected_run_id or uuid.uuid4().hex,
            created_at=time.time(),
            package_version=__version__,
        )
        try:
            storage.write_json(rundir.RUN_RECORD, to_json(record), create_only=True)
        except FileExistsError:
            pass  # another session created the run at the same moment
    try:
        run = parse(RunRecord, storage.read_json(rundir.RUN_RECORD), where)
    except FileNotFoundError:
        raise RunMismatchError(
            f"{storage.url} has leases but no {rundir.RUN_RECORD}: it is damaged or "
            f"not a colab_resume run directory. Use a new run_dir."
        ) from None
    if options.expected_run_id and run.run_id != options.expected_run_id:
        raise RunMismatchError(
            f"{storage.url} belongs to run {run.run_id}, not "
            f"{options.expected_run_id}; this session wrote nothing. Use "
            f"another run_dir, or pass run_id={run.run_id!r} (or no run_id) to "
            f"continue that run."
        )
    return run


def _wait_for_verdict(
    storage: Storage,
    holder: liveness.HolderView,
    options: SessionOptions,
    events: EventLog,
    on_countdown: CountdownHook | None,
    sleep: Callable[[float], None],
    here: process.ProcessIdentity | None,
) -> str:
    """Return the holder's state once it may be replaced (DEAD, STOPPED,
    FAILED; or, with ``takeover``, ALIVE or STALLED); raise RunInUseError if
    it may not.

    Checked at every poll: a holder on this host whose process is gone is
    dead at once, even one that was still running when the wait began.
    """
    record = holder.lease_record
    dead_after, stall_after = liveness.thresholds(
        record, dead_after=options.dead_after_seconds
    )
    who = (
        f"session {record.session_id} on {record.host} (lease {holder.lease})"
        if record
        else f"lease {holder.lease}"
    )
    poll = min(2.0, max(0.1, dead_after / 20))
    report_every = min(REPORT_EVERY_SECONDS, dead_after / 4)
    first_sign = holder.last_sign
    next_report = float("inf")
    while True:
        now = storage.server_time()
        age, _ = liveness.sign_age(holder, now)
        age = age if age is not None else float("inf")
        gone = process.proof_of_death(holder.lease_record, here)
        _, dead_host = liveness.judge_hosts(holder, now, dead_after)
        state, detail = liveness.judge(
            done=False,
            lease=record,
            beat=holder.beat,
            age=age,
            dead_after=dead_after,
            stall_after=stall_after,
            gone=gone,
            dead_host=dead_host,
        )
        if state in liveness.FREE:
            events.emit(
                "lease.previous_dead",
                f"{who} is {state}: {detail}; taking over",
                lease=holder.lease,
                reason=detail,
                process_gone=gone is not None,
            )
            return state
        if options.takeover:
            events.emit(
                "lease.takeover",
                f"{who} is {state} ({detail}); taking it over (takeover=True); "
                f"it will be fenced at its next beat or commit",
                level="warning",
                lease=holder.lease,
            )
            return state
        if holder.last_sign != first_sign:
            raise RunInUseError(
                f"The run {storage.url} is {state}: {who} is still beating "
                f"({detail}). Two sessions must never train one run. Stop the "
                f"other session, wait for it to die, or pass takeover=True to "
                f"take the run (the other session will be fenced)."
            )
        left = dead_after - age
        if on_countdown is not None:
            on_countdown(left, who)
        if left <= next_report:  # an event every few seconds, not every poll
            next_report = left - report_every
            events.emit(
                "lease.waiting",
                f"{who} beat {age:.0f}s ago; waiting up to {left:.0f}s for "
                f"another beat before judging it dead",
                level="warning",  # visible in a notebook without the panel
                lease=holder.lease,
                seconds_left=round(left, 1),
            )
        sleep(min(poll, max(left, 0.05)))
        newer = liveness.read_holder(storage)
        if newer.lease != holder.lease:
            raise RunInUseError(
                f"Another session took {storage.url} (lease {newer.lease}) while "
                f"this one waited for {who} to die. Only one session may train a "
                f"run; stop the other one or pass takeover=True."
            )
        holder = newer
