"""``save_every="auto"``: the save interval that loses the least time.

Saving often costs the training thread a save's blocking time ``C`` each
time; saving rarely costs, at every failure, the steps since the last save.
With failures at random, a mean ``M`` seconds of training apart, the
interval ``τ = √(2·C·M)`` minimises the sum (Young's approximation, good
while ``C`` is small beside ``M``, as a save's blocking part is here: the
upload runs beside training).

``C`` is measured: the mean blocking time of this run's saves, earlier
sessions' included (:mod:`colab_resume.timings`), less what is paid
once whatever the interval, like a first step's compile: each build's
first save (it sets up what the others reuse: 60 ms where the next take
1 ms, on a small model) and each epoch's data fingerprint (its dataset
built and its first batch read, by the epoch's first save). Counted in,
they priced a save several times too high where saves are frequent and
held the interval well above its optimum. ``M`` is what the
run directory shows — training time over deaths and accelerator losses,
all sessions — blended with a stated prior so a run with no failure yet
still saves: ``M = (W + k·M₀) / (F + k)`` with ``W`` seconds trained, ``F``
failures seen, ``M₀`` the prior (one hour: a free Colab session rarely
lasts much longer unattended) and ``k`` its weight, a tenth of a failure.
That is the mean failure rate under a Gamma prior (the rate, not the mean
time between, is what the expected loss is linear in), and the weight is
small because the prior is a guess about someone else's platform: one
failure seen outweighs it ten to one, and a spot VM dying every ten
minutes is believed within a few deaths, not after hours.

Until a save other than a build's first is measured, the interval is the
floor: the first save measures little but its own setup. The interval is
then held within the user's floor and ceiling, and above what the store
allows, the ceiling included: Drive lets one user upload 750 GB a day, and
a cadence that uploads more than that stops at the cap mid-run (every
upload refused until the next day). A save uploads its checkpoint's own
files (the frozen arrays that ``frozen="once"`` stores as shared objects
go up once per run, not with each save), so at an interval of ``τ``
seconds a run uploads ``B·86400/τ`` bytes a day; ``τ`` stays at or above
``B·86400 / (½·cap)``, half the cap: the margin is for the run's first
upload of the frozen arrays, saves the cadence does not time (the
lifetime save, **Checkpoint now**, ``save_every_steps``) and the user's
other uploads that day. When the cap is what sets the interval the
choice says so, with the interval it replaced and the figures (see
:meth:`Choice.describe`). It is re-estimated after every save.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from colab_resume import defaults
from colab_resume.timings import MAX_SECONDS, Timings, duration, tally_sum

PRIOR_BETWEEN_FAILURES = defaults.PRIOR_BETWEEN_FAILURES_SECONDS  # M₀
PRIOR_WEIGHT = defaults.PRIOR_WEIGHT_FAILURES  # k
FLOOR_SECONDS = defaults.AUTO_SAVE_FLOOR_SECONDS
CEILING_SECONDS = defaults.AUTO_SAVE_CEILING_SECONDS
# The share of a store's daily upload allowance a cadence may take.
BUDGET_SHARE = 0.5
DAY = 86_400.0
# A save measured at 0 s still costs something: the interval stays finite.
LEAST_SAVE_SECONDS = 1e-6


def young_interval(cost: float, between: float) -> float | None:
    """``τ = √(2·C·M)``: Young's interval for saves costing ``cost`` seconds
    and failures ``between`` seconds of training apart (see the module
    docstring). The one home of the rule, for ``save_every="auto"`` and
    the report's best fixed cadence alike.

    Returns:
        Seconds of training between saves; None where either figure is not
        a finite number above 0 (nothing to choose from).
    """
    if not (_positive(cost) and _positive(between)):
        return None
    # Two roots, not the root of a product: 1e300 · 1e300 would overflow.
    interval = math.sqrt(2.0 * cost) * math.sqrt(between)
    return interval if math.isfinite(interval) else None


def _positive(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What the earlier sessions of the run showed (from its run directory).

    Attributes:
        training: seconds of training they measured.
        failures: their deaths and accelerator losses.
        save_seconds, saves: their saves' blocking time, and how many.
        save_setup, first_saves: the part of those paid once whatever the
            cadence, and how many saves were a build's first (see
            :class:`~colab_resume.timings.Timings`).
    """

    training: float = 0.0
    failures: int = 0
    save_seconds: float = 0.0
    saves: int = 0
    save_setup: float = 0.0
    first_saves: int = 0

    @classmethod
    def of(cls, training: float, failures: int, tally: Timings) -> Evidence:
        """What sessions that trained ``training`` seconds, failed
        ``failures`` times and measured ``tally`` (summed) showed."""
        return cls(
            training=training,
            failures=failures,
            save_seconds=tally.save,
            saves=tally.saves,
            save_setup=tally.save_setup,
            first_saves=tally.first_saves,
        )

    @property
    def tally(self) -> Timings:
        """The saves as a tally, to sum with a live one."""
        return Timings(
            save=self.save_seconds,
            saves=self.saves,
            save_setup=self.save_setup,
            first_saves=self.first_saves,
        )


@dataclasses.dataclass(frozen=True)
class UploadBudget:
    """What a store's daily upload cap made of the interval, where it set it.

    Attributes:
        save_bytes: what one save uploads (the newest checkpoint's files).
        daily_bytes: the store's daily upload cap.
        service: the store's name as users know it ("Drive").
        instead_of: the interval the save cost and failures alone gave
            (within the floor and ceiling).
    """

    save_bytes: int
    daily_bytes: float
    service: str
    instead_of: float

    def per_day(self, seconds: float) -> float:
        """Bytes uploaded a day by a save every ``seconds``."""
        return self.save_bytes * DAY / seconds


def budget_interval(save_bytes: int, daily_bytes: float) -> float:
    """The shortest interval at which saves of ``save_bytes`` each take at
    most :data:`BUDGET_SHARE` of a daily upload cap of ``daily_bytes``."""
    return save_bytes * DAY / (daily_bytes * BUDGET_SHARE)


@dataclasses.dataclass(frozen=True)
class Choice:
    """An interval and the figures it came from.

    Attributes:
        seconds: the interval chosen.
        save_cost: what a save holds training, None before one was measured.
        between_failures: the training time between failures, ``M``.
        failures: how many were seen.
        limited_by: "floor", "ceiling", "upload budget" or None.
        budget: the upload cap's part, when it set the interval.
        step_seconds: one steady step, to say the interval in steps.
    """

    seconds: float
    save_cost: float | None
    between_failures: float
    failures: int
    limited_by: str | None
    budget: UploadBudget | None = None
    step_seconds: float | None = None

    def describe(self) -> str:
        """``saving every 4m10s (auto): a save holds training 0.8 s, …``; with
        the upload cap in charge, ``saving every 38m24s (auto), about 1,152
        steps, not 4m10s (about 125): each save uploads 10,000.0 MB and
        Drive allows 750 GB a day, …``."""
        head = f"saving every {duration(self.seconds)} (auto)"
        reasons = []
        budget = self.budget
        if budget is not None:
            head += (
                f"{self._steps(self.seconds, ', about {} steps')}, not "
                f"{duration(budget.instead_of)}"
                f"{self._steps(budget.instead_of, ' (about {})')}"
            )
            reasons.append(
                f"each save uploads {_megabytes(budget.save_bytes)} and "
                f"{budget.service} allows {budget.daily_bytes / 1e9:,.0f} GB a "
                f"day, of which checkpoints take at most "
                f"{BUDGET_SHARE:.0%}"
            )
        if self.save_cost is None:
            reasons.append("measuring what a save costs first")
        else:
            seen = (
                f"{self.failures} seen" if self.failures else "none seen yet, a prior"
            )
            reasons.append(
                f"a save holds training {self.save_cost:.3g} s, a failure every "
                f"{duration(self.between_failures)} of training ({seen})"
            )
        if self.limited_by in ("floor", "ceiling"):
            reasons.append(f"held at the {self.limited_by}")
        return f"{head}: {'; '.join(reasons)}"

    def data(self) -> dict[str, Any]:
        """The figures, for the event beside :meth:`describe`'s words."""
        figures: dict[str, Any] = {
            "seconds": self.seconds,
            "limited_by": self.limited_by,
        }
        if self.budget is not None:
            figures.update(
                instead_of_seconds=self.budget.instead_of,
                save_bytes=self.budget.save_bytes,
                daily_upload_bytes=self.budget.daily_bytes,
                bytes_per_day=self.budget.per_day(self.seconds),
            )
        return figures

    def _steps(self, seconds: float, form: str) -> str:
        """``form`` with the steps ``seconds`` holds; "" while unmeasured."""
        if not (self.step_seconds and _positive(self.step_seconds)):
            return ""
        steps = seconds / self.step_seconds
        if not math.isfinite(steps):
            return ""
        return form.format(f"{max(1, round(steps)):,}")


def _megabytes(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f} MB" if nbytes >= 100_000 else f"{nbytes:,} bytes"


class AutoCadence:
    """Chooses the interval between saves; see the module docstring.

    Args:
        evidence: what the earlier sessions showed.
        timings: this session's live tally (saves, steps, recoveries).
        floor, ceiling: the user's bounds, seconds.
        daily_upload_bytes: the store's daily upload allowance, if it has one.
        service: the store's name as users know it, for the message.
        checkpoint_bytes: what one save uploads (the newest checkpoint's
            files, committed or restored), when known.
        prior: ``M₀``.
    """

    def __init__(
        self,
        evidence: Evidence,
        timings: Timings,
        *,
        floor: float = FLOOR_SECONDS,
        ceiling: float = CEILING_SECONDS,
        daily_upload_bytes: float | None = None,
        service: str = "the store",
        checkpoint_bytes: Callable[[], int | None] = lambda: None,
        prior: float = PRIOR_BETWEEN_FAILURES,
    ) -> None:
        self.evidence = evidence
        self.timings = timings
        self.floor = floor
        self.ceiling = max(floor, ceiling)
        self.daily_upload_bytes = daily_upload_bytes
        self.service = service
        self.checkpoint_bytes = checkpoint_bytes
        self.prior = prior

    def choose(self) -> Choice:
        """The interval now, from everything measured so far."""
        ev, now = self.evidence, self.timings.clamped()
        run = tally_sum([ev.tally, now])
        # Only builds' first saves measured: they price little but their
        # own setup, so none is taken as a save's cost yet.
        cost = run.save_price if run.saves > run.first_saves else None
        # Each part clamped: evidence read from the run directory may hold
        # any number, and a figure never stops a session.
        trained = sum(
            min(v, MAX_SECONDS) if _positive(v) else 0.0
            for v in (ev.training, now.step_seconds, now.first_step)
        )
        failures = max(0, ev.failures) + now.recoveries
        between = (trained + PRIOR_WEIGHT * self.prior) / (failures + PRIOR_WEIGHT)
        interval = (
            young_interval(max(cost, LEAST_SAVE_SECONDS), between)
            if cost is not None
            else None
        )
        # Unmeasured (a first save, to measure one; then one more at once,
        # as a build's first save costs tens of times a later one), or no
        # finite figure: the floor.
        seconds = self.floor if interval is None else interval
        limited: str | None = None
        if seconds < self.floor:
            seconds, limited = self.floor, "floor"
        if seconds > self.ceiling:
            seconds, limited = self.ceiling, "ceiling"
        budget = self._budget(seconds)
        if budget is not None:  # a hard limit: above the ceiling too
            seconds = budget_interval(budget.save_bytes, budget.daily_bytes)
            limited = "upload budget"
        return Choice(seconds, cost, between, failures, limited, budget, now.step_time)

    def _budget(self, seconds: float) -> UploadBudget | None:
        """The upload cap's part, where it asks for more than ``seconds``."""
        cap, nbytes = self.daily_upload_bytes, self.checkpoint_bytes()
        if not (cap and _positive(cap) and nbytes and nbytes > 0):
            return None
        if budget_interval(nbytes, cap) <= seconds:
            return None
        return UploadBudget(nbytes, cap, self.service, instead_of=seconds)
