"""Where a session's time went, measured where it was spent.

Goodput (:mod:`colab_resume.report.goodput`) splits a run's wall time
into training and what cost it. Leases and beats say when each session
began and was last seen, by the storage server's clock; what happened in
between only the session itself can measure: how long connecting, the
build, the restore and the first step took, how long its training thread
was held by saves, how long one step takes.

A :class:`Timings` is that tally, on the session's monotonic clock, kept by
:class:`StepClock` on the training thread. Every history chunk carries the
tally so far (:mod:`colab_resume.report.history`): the newest chunk of a
lease is what the session had measured when it was last heard from. So a
session killed outright loses the seconds since its last chunk, and goodput
says which of its figures are lower bounds.

It sits low (docs/DESIGN.md §3): the agent keeps the tally, the checkpoint
cadence (:mod:`colab_resume.checkpoint.cadence`) prices a save with it, and
the report reads it back; it imports none of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from colab_resume import procfs
from colab_resume.errors import CorruptRecordError
from colab_resume.exit_status import in_kernel
from colab_resume.parsing import is_number

# A session measures at most this many seconds of anything (ten years):
# a larger figure in a chunk is damage.
MAX_SECONDS = 10 * 365 * 86_400.0
MAX_COUNT = 10**12


@dataclasses.dataclass
class Timings:
    """One session's measured seconds (its monotonic clock) and counts.

    Attributes:
        launch: a script's own start before the agent's (the interpreter,
            imports, the user's code up to the agent), once per process; 0
            in a notebook, whose kernel was up before anyone pressed *Run*.
        connect: connecting to the accelerator, before the lease.
        wait: taking the lease, waiting out a silent holder included.
        build: ``build_model`` inside a fresh strategy scope (all builds).
        restore: reading the checkpoint into the model (all restores).
        first_step: the first step after each build (tracing, compiling,
            the dataset's first batch).
        first_steps: how many first steps (one per build).
        step_seconds: every other step, the agent's own per-step work
            included, saves and pauses not.
        steps: how many steps ``step_seconds`` covers.
        save: the training thread held by saves (the snapshot, a wait for
            the previous upload); the upload itself runs beside training.
        saves: how many saves.
        save_setup: the part of ``save`` paid once whatever the cadence,
            which ``save_every="auto"`` leaves out of a save's price: each
            build's first save whole (it reads every variable one by one
            and sets up the one-call read later saves use: tens of
            milliseconds where a later one takes one) and each epoch's
            data fingerprint (taken by the epoch's first save).
        first_saves: how many of ``saves`` were a build's first.
        paused: paused by a person (``pause()``): not the run's cost.
        recovery: reconnecting after an accelerator loss in the session.
        recoveries: how many such losses.
    """

    launch: float = 0.0
    connect: float = 0.0
    wait: float = 0.0
    build: float = 0.0
    restore: float = 0.0
    first_step: float = 0.0
    first_steps: int = 0
    step_seconds: float = 0.0
    steps: int = 0
    save: float = 0.0
    saves: int = 0
    save_setup: float = 0.0
    first_saves: int = 0
    paused: float = 0.0
    recovery: float = 0.0
    recoveries: int = 0

    @property
    def step_time(self) -> float | None:
        """Seconds of one steady step, None before one was measured."""
        return self.step_seconds / self.steps if self.steps else None

    @property
    def save_price(self) -> float | None:
        """What one more save costs (:func:`mean_save` of this tally's saves)."""
        return mean_save(self.save, self.saves, self.save_setup, self.first_saves)

    def clamped(self) -> Timings:
        """This tally with every field a finite number in range (NaN, a
        negative or an absurd figure as 0 or the bound): what arithmetic on
        tallies may assume, whoever built them."""
        values: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            counted = field.type in (int, "int")
            limit = MAX_COUNT if counted else MAX_SECONDS
            if not is_number(value) or value < 0:
                value = 0
            values[field.name] = (
                int(min(value, limit)) if counted else float(min(value, limit))
            )
        return Timings(**values)

    @contextlib.contextmanager
    def measure(self, field: str) -> Iterator[None]:
        """``with timings.measure("build"):`` adds the block's seconds to ``field``."""
        began = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - began
            setattr(self, field, getattr(self, field) + spent)

    def to_json(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)

    @classmethod
    def parse(cls, raw: Any, where: str) -> Timings:
        """A chunk's ``timings``, checked field by field.

        Unknown fields are ignored (a newer writer's); a known one of the
        wrong type or out of range is damage.

        Raises:
            CorruptRecordError: not an object, or a field is not a number
                within range.
        """
        if not isinstance(raw, dict):
            raise CorruptRecordError(f"{where}: 'timings' is not an object.")
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if field.name not in raw:
                continue
            value = raw[field.name]
            counted = field.type in (int, "int")
            limit = MAX_COUNT if counted else MAX_SECONDS
            ok = (
                (isinstance(value, int) and not isinstance(value, bool))
                if counted
                else is_number(value)
            )
            if not ok or not 0 <= value <= limit:
                raise CorruptRecordError(
                    f"{where}: timings field {field.name!r} is {value!r}, not "
                    f"a {'count' if counted else 'number of seconds'} in range."
                )
            values[field.name] = int(value) if counted else float(value)
        return cls(**values)


def mean_save(seconds: float, saves: int, setup: float, firsts: int) -> float | None:
    """What one more save costs the training thread: the mean of the saves
    that were not a build's first, less what an epoch pays once
    (:attr:`Timings.save_setup`); every save whole while only firsts were
    measured; None before any save, or where the figures give no finite
    price (a figure read from the run directory never stops a reader)."""
    if saves > firsts >= 0:
        seconds, saves = seconds - setup, saves - firsts
    if saves <= 0 or not math.isfinite(seconds):
        return None
    price = max(0.0, seconds) / saves
    return price if math.isfinite(price) else None


def tally_sum(tallies: Iterable[Timings]) -> Timings:
    """Every field of ``tallies`` summed, each tally :meth:`~Timings.clamped`
    first: the one home of "what these sessions measured together"."""
    names = [field.name for field in dataclasses.fields(Timings)]
    sums = dict.fromkeys(names, 0)
    for tally in tallies:
        clean = tally.clamped()
        for name in names:
            sums[name] += getattr(clean, name)
    return Timings(**sums)


_launch_counted = False


def script_launch_seconds(now: Callable[[], float] = time.time) -> float:
    """Seconds from this process's start to now, the first time a script asks.

    A script's start is the job's start (a launcher, or ``python train.py``
    after a death), so its interpreter and imports are the run's time. A
    notebook's kernel was up before anyone pressed *Run*, and a process asks
    once (its first session): both get 0, as does a system without
    ``/proc``.
    """
    global _launch_counted
    if _launch_counted or in_kernel():
        return 0.0
    _launch_counted = True
    started = procfs.started_at()
    return max(0.0, now() - started) if started is not None else 0.0


def duration(seconds: float | None) -> str:
    """``2h04m``, ``3m05s``, ``42s``, ``0.4s``."""
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds < 0:
        return f"-{duration(-seconds)}"
    if math.isinf(seconds):
        return "forever"
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class StepClock:
    """Measures one session's steps on its training thread (cheap per step).

    :meth:`started` marks where training (re)starts after a build; each
    :meth:`step_ended` adds the time since the previous mark to the first
    step or to the steady steps; :meth:`duty_ended` closes the agent's
    own work after the step, less what :meth:`held` measured (saves, a
    pause), which count apart.
    """

    def __init__(
        self, timings: Timings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timings = timings
        self._clock = clock
        self._mark: float | None = None
        self._first = False
        self._duty_began = 0.0
        self._held = 0.0  # of the current duty: saves and pauses
        self._first_save = True  # the next save is a build's first

    def started(self) -> None:
        """Training starts (again) from a fresh build: a first step is next."""
        self._mark = self._clock()
        self._first = True
        self._first_save = True

    def step_ended(self) -> None:
        """A step finished; its duties begin now."""
        now = self._clock()
        self._duty_began, self._held = now, 0.0
        if self._mark is None:
            return
        if self._first:
            self.timings.first_step += now - self._mark
            self.timings.first_steps += 1
        else:
            self.timings.step_seconds += now - self._mark
            self.timings.steps += 1

    def saved(self, seconds: float, *, setup: float = 0.0) -> None:
        """The duty spent ``seconds`` in a save, ``setup`` of them paid once
        an epoch whatever the cadence (see :attr:`Timings.save_setup`)."""
        self._held += seconds
        self.timings.save += seconds
        self.timings.saves += 1
        if self._first_save:
            self._first_save = False
            self.timings.save_setup += seconds
            self.timings.first_saves += 1
        else:
            self.timings.save_setup += min(setup, seconds)

    def paused(self, seconds: float) -> None:
        """The duty spent ``seconds`` paused by a person."""
        self._held += seconds
        self.timings.paused += seconds

    def duty_ended(self) -> None:
        """The step's duties are done: the next step begins."""
        now = self._clock()
        if self._mark is not None:
            # The agent's own per-step work is part of a step's cost.
            spent = max(0.0, now - self._duty_began - self._held)
            if self._first:
                self.timings.first_step += spent
            else:
                self.timings.step_seconds += spent
        self._first = False
        self._mark = now
