"""Goodput: how much of a run's wall time went into training that counted.

**goodput = productive training time ÷ total time**, the rest split into
badput buckets named as Google's ``ml-goodput-measurement`` names them, so
the figures compare. Everything comes from the run directory: sessions and
their ends from leases and beats (the storage server's clock), steps from
beats, commits and the history, and what only a session can measure from
its own tally (:mod:`colab_resume.timings`). No cloud logging, no
billing account; a local disk, GCS or Drive alike.

The wall time is every session's, from its start (a script's process
start; in a notebook, its connect, before its lease) to its last sign of
life, plus the time between a session that died
or was taken over and the next one. Time between a session that ended on
purpose (``stop()``, SIGTERM, completed) and the next is idle, not the
run's loss, and so is time paused by a person: both are reported and left
out.

Buckets:

* ``TPU_INITIALIZATION``: connecting to the accelerator (any accelerator).
* ``TRAINING_PREP``: a script's own start before the agent (the
  interpreter, imports; not in a notebook) and ``build_model`` in a fresh
  strategy scope.
* ``PROGRAM_STARTUP``: the first step's excess over a steady step (tracing,
  compiling, the pipeline's first batch).
* ``UNPRODUCTIVE_CHECKPOINT_SAVE_TIME``: the training thread held by saves
  (the upload runs beside training and costs nothing here).
* ``UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME``: reading a checkpoint into the
  model.
* ``WASTED_PROGRESS_FROM_DISRUPTION``: steps trained again after a death or
  an in-session accelerator loss, at the session's steady step time.
* ``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION``: from a dead session's last
  sign of life to the next session's start (on Colab: no runtime), the wait
  for a silent holder's lease to expire, reconnecting in a session.
* ``OTHER``: the rest of each session's wall time (waits for data between
  what the step clock sees, the agent's start, a session's last seconds).

A session killed outright is seen last at its last beat; it trained on
until it died, and those steps were redone. So after a death the wasted
progress is a lower bound and the recovery time an upper bound, by at most
a heartbeat interval each, and the report says so. Data loading is part of
the step time (no ``DATA_LOADING_SYNC`` of its own): an input pipeline that
stalls makes every step slower, not a bucket bigger.

The ideal step time is the mean of every steady step the sessions measured
(total seconds ÷ steps, however short a step is); runs from versions that
measured nothing get it from the history's samples.

**The best fixed cadence** (:class:`Cadence`) follows from the same data:
with a save costing ``C`` seconds of training time and a failure every
``M`` seconds of training on average, saving every ``τ = √(2·C·M)``
seconds (Young's approximation; Daly refined it for large ``C``) loses
``C/τ`` per second to saves and ``τ/2`` per failure to redone steps, the
least of any fixed interval when failures come at random (exponentially
distributed, ``C`` small beside ``M``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable

from colab_resume.checkpoint.cadence import Evidence, young_interval
from colab_resume.report.history import RunHistory
from colab_resume.report.sessions import (
    DIED,
    TAKEN_OVER,
    RunReport,
    Session,
    read_report,
)
from colab_resume.storage import Storage
from colab_resume.timings import MAX_COUNT, Timings, duration, tally_sum

TPU_INITIALIZATION = "TPU_INITIALIZATION"
TRAINING_PREP = "TRAINING_PREP"
PROGRAM_STARTUP = "PROGRAM_STARTUP"
SAVE = "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"
RESTORE = "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"
WASTED = "WASTED_PROGRESS_FROM_DISRUPTION"
RECOVERY = "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"
OTHER = "OTHER"
log = logging.getLogger(__name__)
BUCKETS = (
    RECOVERY,
    WASTED,
    TPU_INITIALIZATION,
    TRAINING_PREP,
    RESTORE,
    PROGRAM_STARTUP,
    SAVE,
    OTHER,
)
# The one-line summary's words for the buckets.
SHORT = {
    RECOVERY: "downtime",
    WASTED: "redone",
    TPU_INITIALIZATION: "connect",
    TRAINING_PREP: "build",
    RESTORE: "restore",
    PROGRAM_STARTUP: "compile",
    SAVE: "saves",
    OTHER: "other",
}
# Session ends after which the time until the next session is the run's loss.
DISRUPTED = (DIED, TAKEN_OVER)


@dataclasses.dataclass(frozen=True)
class SessionGoodput:
    """One session's share: its counted wall time and where it went.

    Attributes:
        lease: the session's lease.
        seconds: its counted wall time (paused time left out), the gap
            before it included when that gap was the run's loss.
        productive: seconds of steps that counted.
        buckets: badput seconds by bucket name.
        measured: it left a tally of its own (else only steps are known).
    """

    lease: int
    seconds: float
    productive: float
    buckets: dict[str, float]
    measured: bool


@dataclasses.dataclass(frozen=True)
class Cadence:
    """The fixed save interval that would have lost the least time.

    Attributes:
        save_seconds: what one more save costs the training thread (the
            mean, builds' first saves left out).
        between_failures: mean seconds of training between failures.
        failures: deaths and in-session accelerator losses seen.
        interval: the best interval, seconds of training (``√(2·C·M)``).
        steps: the same in steps (at the ideal step time).
        actual_interval: the run's mean seconds of training between saves.
        lost: what saves and redone steps cost at the run's own mean
            interval, by the model (seconds).
        best_lost: the same at the best interval.
        goodput: the run's goodput with that interval instead.
    """

    save_seconds: float
    between_failures: float
    failures: int
    interval: float
    steps: int
    actual_interval: float
    lost: float
    best_lost: float
    goodput: float


@dataclasses.dataclass(frozen=True)
class Goodput:
    """A run's goodput and its badput, all sessions together.

    Attributes:
        total: the counted wall time, seconds.
        productive: seconds of steps that counted.
        buckets: badput seconds by bucket name (:data:`BUCKETS`).
        ideal_step: seconds of one steady step (None: none measured).
        sessions: each session's share.
        idle: seconds between sessions that ended on purpose (left out).
        paused: seconds paused by a person (left out).
        deaths: sessions that died.
        recoveries: accelerator losses recovered inside a session.
        at_least: buckets that are lower bounds; ``at_most``: upper bounds.
        cadence: the best fixed cadence, where failures and saves were seen.
        notes: what limits the figures, in words.
        chosen: what ``save_every="auto"`` last said it chose, if it ran.
        unmeasured: why no figure could be derived at all (see
            :func:`measure`), None where one was.
        history_left_out: older history chunks a bounded read left out
            (``status``): the figures are the newest sessions' then.
    """

    total: float
    productive: float
    buckets: dict[str, float]
    ideal_step: float | None
    sessions: list[SessionGoodput]
    idle: float = 0.0
    paused: float = 0.0
    deaths: int = 0
    recoveries: int = 0
    at_least: frozenset[str] = frozenset()
    at_most: frozenset[str] = frozenset()
    cadence: Cadence | None = None
    notes: tuple[str, ...] = ()
    chosen: str | None = None
    unmeasured: str | None = None
    history_left_out: int = 0

    @classmethod
    def not_measured(cls, why: str) -> Goodput:
        """No figure: the records gave none (``why`` says what failed)."""
        return cls(
            total=0.0,
            productive=0.0,
            buckets=dict.fromkeys(BUCKETS, 0.0),
            ideal_step=None,
            sessions=[],
            unmeasured=why,
        )

    @property
    def goodput(self) -> float | None:
        """Productive ÷ total, None before any time or step was measured."""
        if self.total <= 0 or self.ideal_step is None:
            return None
        return self.productive / self.total

    def share(self, bucket: str) -> float:
        return self.buckets.get(bucket, 0.0) / self.total if self.total > 0 else 0.0

    def one_line(self) -> str:
        """``goodput 81.3% of 2h04m (downtime 12.0%, redone ≥3.1%, …)``."""
        figure = self.goodput
        if self.unmeasured is not None:
            return f"goodput: not measured ({self.unmeasured})"
        if figure is None:
            return "goodput: not measured yet (no steady steps)"
        parts = []
        for bucket in sorted(BUCKETS, key=lambda b: -self.buckets.get(b, 0.0)):
            share = self.share(bucket)
            if share >= 0.0005:
                bound = _bound_mark(self, bucket)
                parts.append(f"{SHORT[bucket]} {bound}{share:.1%}")
        detail = f" ({', '.join(parts)})" if parts else ""
        partial = (
            f"; newest history only, {self.history_left_out} older chunks left "
            f"out: 'colab-resume report' reads them all"
            if self.history_left_out
            else ""
        )
        return f"goodput {figure:.1%} of {duration(self.total)}{detail}{partial}"

    def table(self) -> list[str]:
        """The report's lines: every bucket, the step time, the best cadence."""
        figure = self.goodput
        if figure is None:
            return [self.one_line()]
        deaths = f", {self.deaths} death{'s' if self.deaths != 1 else ''}"
        lines = [
            f"goodput {figure:.1%} of {duration(self.total)} "
            f"({len(self.sessions)} session{'s' if len(self.sessions) != 1 else ''}"
            f"{deaths if self.deaths else ''})",
            f"  {'productive training':<40} {duration(self.productive):>9} "
            f"{figure:>6.1%}",
        ]
        for bucket in BUCKETS:
            seconds = self.buckets.get(bucket, 0.0)
            bound = {"≥": "  at least", "≤": "  at most"}.get(_bound_mark(self, bucket))
            lines.append(
                f"  {bucket:<40} {duration(seconds):>9} {self.share(bucket):>6.1%}"
                f"{bound or ''}"
            )
        if self.ideal_step is not None:
            lines.append(f"  ideal step: {self.ideal_step:.4g} s")
        if self.idle or self.paused:
            lines.append(
                f"  left out: {duration(self.idle)} between sessions that ended "
                f"on purpose, {duration(self.paused)} paused"
            )
        cadence = self.cadence
        if cadence is not None:
            lines.append(
                f"  best fixed cadence: a save every {cadence.steps:,} steps "
                f"({duration(cadence.interval)} of training): goodput "
                f"{cadence.goodput:.1%} instead of {figure:.1%}, "
                f"{duration(cadence.lost - cadence.best_lost)} less lost (this "
                f"run saved every {duration(cadence.actual_interval)}; a save "
                f"holds training {cadence.save_seconds:.3g} s, a failure came "
                f"every {duration(cadence.between_failures)} of training)"
            )
        lines += [f"  note: {note}" for note in self.notes]
        return lines

    def to_json(self) -> dict[str, object]:
        return {
            "goodput": self.goodput,
            "total_seconds": self.total,
            "productive_seconds": self.productive,
            "badput_seconds": dict(self.buckets),
            "ideal_step_seconds": self.ideal_step,
            "idle_seconds": self.idle,
            "paused_seconds": self.paused,
            "deaths": self.deaths,
            "recoveries": self.recoveries,
            "at_least": sorted(self.at_least),
            "at_most": sorted(self.at_most),
            "best_cadence": dataclasses.asdict(self.cadence) if self.cadence else None,
            "notes": list(self.notes),
            "save_every_auto": self.chosen,
            "not_measured": self.unmeasured,
            "history_chunks_left_out": self.history_left_out,
        }


def _bound_mark(result: Goodput, bucket: str) -> str:
    if bucket in result.at_least:
        return "≥"
    return "≤" if bucket in result.at_most else ""


def measure(report: RunReport) -> Goodput:
    """:func:`compute`, or "not measured" and why: what every reader calls.

    A figure derived from the run directory never stops a session or a
    reader: whatever the records hold, this returns.
    """
    try:
        return compute(report)
    except Exception as exc:  # a figure must never stop its reader
        log.warning("goodput not measured: %s: %s", type(exc).__name__, exc)
        return Goodput.not_measured(f"{type(exc).__name__}: {exc}"[:200])


def compute(report: RunReport) -> Goodput:
    """The goodput of the run ``report`` read (see the module docstring).

    Total: tallies are :meth:`~Timings.clamped` first, every division is
    guarded, and a result with a figure that is not finite is "not
    measured" (:meth:`Goodput.not_measured`), never NaN or infinity.
    """
    history = report.history
    tallies = {n: t.clamped() for n, t in history.timings.items()}
    ideal = _ideal_step(tallies.values(), history)
    redone_by_lease = _redone_in_sessions(history)
    shares: list[SessionGoodput] = []
    idle = paused = 0.0
    recoveries = 0
    previous: Session | None = None
    previous_end: float | None = None
    for session in report.sessions:
        timings = tallies.get(session.lease)
        if session.started_at is None:
            previous = session
            continue
        begun = session.started_at - (
            timings.launch + timings.connect + timings.wait if timings else 0.0
        )
        ended = max(session.ended_at or session.started_at, session.started_at)
        gap = 0.0
        if previous_end is not None:
            begun = max(begun, previous_end)  # a takeover overlaps its holder
            ended = max(ended, begun)
            before = begun - previous_end
            if previous is not None and previous.end in DISRUPTED:
                gap = before
            else:
                idle += before
        in_session = redone_by_lease.get(session.lease, [])
        recoveries += len(in_session)
        share = _session_share(session, timings, ideal, ended - begun, in_session)
        # A session killed outright trained on past its last sign: what it
        # is known to have done then (commits its successor restored) ends
        # it later, and that time is not the gap's too.
        held = timings.paused if timings else 0.0
        previous, previous_end = session, max(ended, begun + share.seconds + held)
        if gap:
            share.buckets[RECOVERY] = share.buckets.get(RECOVERY, 0.0) + gap
            share = dataclasses.replace(share, seconds=share.seconds + gap)
        paused += held
        shares.append(share)
    buckets = {b: sum(s.buckets.get(b, 0.0) for s in shares) for b in BUCKETS}
    total = sum(s.seconds for s in shares)
    productive = sum(s.productive for s in shares)
    deaths = len(report.deaths)
    notes = []
    if any(not s.measured for s in shares):
        notes.append(
            "a session left no tally of its own (an older version, or killed "
            "before its first history chunk): its start-up is in OTHER"
        )
    if ideal is None:
        notes.append("no steady step measured yet: goodput needs one")
    result = Goodput(
        total=total,
        productive=productive,
        buckets=buckets,
        ideal_step=ideal,
        sessions=shares,
        idle=idle,
        paused=paused,
        deaths=deaths,
        recoveries=recoveries,
        at_least=frozenset({WASTED}) if deaths else frozenset(),
        at_most=frozenset({RECOVERY}) if deaths else frozenset(),
        notes=tuple(notes),
        history_left_out=history.left_out,
    )
    run = tally_sum(tallies.values())
    cadence = best_cadence(result, run.saves, run.save_price)
    said = [e.message for e in history.events if e.kind == "checkpoint.cadence"]
    return _checked(
        dataclasses.replace(result, cadence=cadence, chosen=said[-1] if said else None)
    )


def _checked(result: Goodput) -> Goodput:
    """``result``, or "not measured" where a figure is not finite."""
    figures = [result.total, result.productive, result.idle, result.paused]
    figures += list(result.buckets.values())
    figures += [s.seconds for s in result.sessions]
    figures += [result.ideal_step or 0.0]
    if all(math.isfinite(f) for f in figures):
        return result
    return Goodput.not_measured("the records give no finite figure")


def ideal_step(history: RunHistory) -> float | None:
    """Seconds of one steady step: every measured one, else the samples'."""
    return _ideal_step(history.timings.values(), history)


def _ideal_step(tallies: Iterable[Timings], history: RunHistory) -> float | None:
    run = tally_sum(tallies)
    if run.steps:
        step = run.step_seconds / run.steps
        return step if step > 0 and math.isfinite(step) else None
    # Older runs: the samples' pace, each session's first sample left out
    # (it follows the first step's compile).
    spent = done = 0.0
    by_lease: dict[int, list[tuple[float, int]]] = {}
    for point in history.points:
        by_lease.setdefault(point.lease, []).append((point.time, point.step))
    for points in by_lease.values():
        points.sort()
        if len(points) >= 3:
            spent += points[-1][0] - points[1][0]
            done += points[-1][1] - points[1][1]
    if not (done > 0 and spent > 0):
        return None
    pace = spent / done
    return pace if math.isfinite(pace) else None


def _redone_in_sessions(history: RunHistory) -> dict[int, list[int]]:
    """Steps redone after each accelerator loss recovered in a session, by
    lease: one pass over the events, whatever the number of sessions."""
    redone: dict[int, list[int]] = {}
    lost_at: dict[int, int] = {}
    for event in history.events:
        if event.step is None:
            continue
        if event.kind == "recovery.started":
            lost_at[event.lease] = event.step
        elif event.kind == "run.resumed_at" and event.lease in lost_at:
            lost = lost_at.pop(event.lease)
            redone.setdefault(event.lease, []).append(max(0, lost - event.step))
    return redone


def _session_share(
    session: Session,
    timings: Timings | None,
    ideal: float | None,
    wall: float,
    in_session: list[int],
) -> SessionGoodput:
    """Where one session's ``wall`` seconds went."""
    buckets = dict.fromkeys(BUCKETS, 0.0)
    trained = (
        session.last_step - session.first_step
        if session.first_step is not None and session.last_step is not None
        else 0
    )
    step = _step_time(timings, ideal, trained + sum(in_session))
    redone = (session.redone[1] - session.redone[0]) if session.redone else 0
    redone += sum(in_session)
    trained += sum(in_session)
    redone = min(redone, trained)
    productive = (trained - redone) * step
    buckets[WASTED] = redone * step
    if timings is not None:
        buckets[TPU_INITIALIZATION] = timings.connect
        buckets[RECOVERY] = timings.wait + timings.recovery
        buckets[TRAINING_PREP] = timings.launch + timings.build
        buckets[RESTORE] = timings.restore
        buckets[SAVE] = timings.save
        buckets[PROGRAM_STARTUP] = max(
            0.0, timings.first_step - timings.first_steps * step
        )
        wall = max(0.0, wall - timings.paused)
    accounted = productive + sum(buckets.values())
    buckets[OTHER] = max(0.0, wall - accounted)
    # Measured seconds beyond the wall time (clocks apart, a session seen
    # last before its final tally) stretch the session, never go negative.
    seconds = max(wall, accounted)
    return SessionGoodput(
        session.lease, seconds, productive, buckets, measured=timings is not None
    )


def _step_time(timings: Timings | None, ideal: float | None, trained: int) -> float:
    """One step's seconds in a session that trained ``trained`` steps.

    Its tally's own steps at their measured time, the rest at the run's
    ideal step: a session killed long after its last history chunk sent a
    tally of its first steps only (just after the compile and the restore,
    slower than its steady ones), which would price every later step too.
    """
    own = timings.step_time if timings else None
    if not own or timings is None:
        return ideal or 0.0
    if ideal is None or trained <= timings.steps:
        return own
    rest = trained - timings.steps
    return (timings.step_seconds + rest * ideal) / trained


def best_cadence(
    result: Goodput, saves: int, save_seconds: float | None
) -> Cadence | None:
    """The fixed interval that would have lost least (Young), or None.

    Both cadences are priced by the same model (saves at ``C`` each, half
    an interval redone per failure), so the saving is never negative and
    does not hinge on where this run's deaths happened to fall. Needs a
    failure, a save and a step time: without a failure any interval loses
    only its saves, and the best is "never". ``save_seconds`` is what one
    more save costs (:func:`~colab_resume.timings.mean_save`): a
    build's first save is paid whatever the cadence.
    """
    failures = result.deaths + result.recoveries
    if not failures or saves <= 0 or not result.ideal_step or not save_seconds:
        return None
    cost = save_seconds
    work = result.productive
    between = (work + result.buckets.get(WASTED, 0.0)) / failures
    interval = young_interval(cost, between)
    actual = work / saves
    if interval is None or not actual > 0:  # no step kept: nothing to compare
        return None

    def lost(every: float) -> float:
        return work * cost / every + failures * every / 2

    best_total = result.total - lost(actual) + lost(interval)
    steps = min(interval / result.ideal_step, MAX_COUNT)
    if not (math.isfinite(best_total) and math.isfinite(steps)):
        return None
    return Cadence(
        save_seconds=cost,
        between_failures=between,
        failures=failures,
        interval=interval,
        steps=max(1, round(steps)),
        actual_interval=actual,
        lost=lost(actual),
        best_lost=lost(interval),
        goodput=work / best_total if best_total > 0 else 0.0,
    )


def read_goodput(storage: Storage, live: dict[int, Timings] | None = None) -> Goodput:
    """The goodput of the run in ``storage``, read from its run directory.

    Args:
        live: tallies newer than the history holds (a session asking about
            itself), by lease.
    """
    report = read_report(storage)
    report.history.timings.update(live or {})
    return measure(report)


def evidence_before(storage: Storage, lease: int) -> Evidence:
    """What the sessions before ``lease`` showed, for ``save_every="auto"``.

    Nothing (the prior alone) when the records cannot be read or give no
    figure: the cadence then starts as a new run's does.
    """
    try:
        return evidence_of(read_report(storage), lease)
    except Exception as exc:  # a figure must never stop training
        log.warning("save_every='auto': earlier sessions not read (%s)", exc)
        return Evidence()


def evidence_of(report: RunReport, lease: int) -> Evidence:
    """What the sessions of ``report`` before ``lease`` showed (it is
    changed: only those sessions are kept)."""
    report.sessions = [s for s in report.sessions if s.lease < lease]
    earlier = {n: t for n, t in report.history.timings.items() if n < lease}
    report.history.timings = earlier
    result = measure(report)
    training = result.productive + result.buckets.get(WASTED, 0.0)
    return Evidence.of(
        training, result.deaths + result.recoveries, tally_sum(earlier.values())
    )
