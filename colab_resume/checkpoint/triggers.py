"""When a save is due: a small, pure decision with an injectable clock.

Reasons, checked in this order: a requested save (``save_now``), the
runtime's maximum lifetime drawing near, every N steps, every T seconds —
or, with ``save_every="auto"``, the interval :mod:`.cadence` chooses in
place of T, re-chosen after every save.
The lifetime deadline fires once: after that save the VM may live on for a
while, and saving every step until it dies would stall training.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

from colab_resume import defaults
from colab_resume.checkpoint.cadence import AutoCadence, Choice
from colab_resume.validate import check_int, check_seconds

# Colab ends a runtime after about 12 h; saving at 11.5 h leaves room for
# one upload of a large model.
DEFAULT_LIFETIME_SECONDS = 11.5 * 3600


def lifetime_applies(lifetime_seconds: float | None, in_colab: bool) -> bool:
    """Whether the VM's age is a reason to save: in Colab, whose ~12 h limit
    the default is for, or wherever another lifetime was chosen. Elsewhere a
    host's age says nothing about its end (a container up for a day would
    save at its first step)."""
    if lifetime_seconds is None:
        return False
    return in_colab or lifetime_seconds != DEFAULT_LIFETIME_SECONDS


@dataclasses.dataclass(frozen=True, kw_only=True)
class TriggerOptions:
    """When to save.

    Attributes:
        every_steps: save when this many steps passed since the last save
            (None: no step trigger).
        every_seconds: save when this much time passed since the last save
            (None: no time trigger).
        lifetime_seconds: save once when the VM is this old (seconds since
            boot; None: no deadline trigger).
        boot_time: when the VM booted, seconds since the epoch (by the same
            clock as ``clock``); None: no deadline trigger.
        every: ``"auto"``: the interval of :mod:`.cadence` replaces
            ``every_seconds``; None: the fixed triggers only.
        auto_floor_seconds, auto_ceiling_seconds: the bounds of ``"auto"``.
        auto_prior_seconds: ``"auto"``'s prior training time between
            failures (:mod:`.cadence`).
    """

    every_steps: int | None = None
    every_seconds: float | None = defaults.SAVE_EVERY_SECONDS
    lifetime_seconds: float | None = DEFAULT_LIFETIME_SECONDS
    boot_time: float | None = None
    every: str | None = None
    auto_floor_seconds: float = defaults.AUTO_SAVE_FLOOR_SECONDS
    auto_ceiling_seconds: float = defaults.AUTO_SAVE_CEILING_SECONDS
    auto_prior_seconds: float = defaults.PRIOR_BETWEEN_FAILURES_SECONDS

    @property
    def auto(self) -> bool:
        return self.every == "auto"

    def __post_init__(self) -> None:
        check_int("TriggerOptions.every_steps", self.every_steps, optional=True)
        for name in ("every_seconds", "lifetime_seconds"):
            check_seconds(f"TriggerOptions.{name}", getattr(self, name), optional=True)
        for name in (
            "auto_floor_seconds",
            "auto_ceiling_seconds",
            "auto_prior_seconds",
        ):
            check_seconds(f"TriggerOptions.{name}", getattr(self, name))
        if self.every not in (None, "auto"):
            raise ValueError(
                f"TriggerOptions.every must be 'auto' or None, got {self.every!r}: "
                f"for a fixed cadence use save_every_steps or save_every_seconds."
            )
        if self.auto_floor_seconds > self.auto_ceiling_seconds:
            raise ValueError(
                f"TriggerOptions.auto_floor_seconds ({self.auto_floor_seconds}) "
                f"is above auto_ceiling_seconds ({self.auto_ceiling_seconds})."
            )
        if self.boot_time is not None and not (
            isinstance(self.boot_time, (int, float)) and math.isfinite(self.boot_time)
        ):
            raise ValueError(
                f"TriggerOptions.boot_time must be seconds since the epoch or "
                f"None, got {self.boot_time!r}."
            )


class SaveTriggers:
    """Decides, step by step, whether a checkpoint is due.

    Args:
        options: the triggers.
        clock: wall clock in seconds since the epoch (injectable for tests);
            the same clock ``boot_time`` is measured with.
        start_step: the step training starts (or resumes) from; counts as
            the last save.
        cadence: chooses the interval when ``options.every`` is ``"auto"``.
    """

    def __init__(
        self,
        options: TriggerOptions,
        *,
        clock: Callable[[], float] = time.time,
        start_step: int = 0,
        cadence: AutoCadence | None = None,
    ) -> None:
        self.options = options
        self.cadence = cadence if options.auto else None
        # The interval "auto" chose, and whether it is news since last asked.
        self.choice: Choice | None = self.cadence.choose() if self.cadence else None
        self._choice_news = self.choice is not None
        self._clock = clock
        self._last_step = start_step
        self._last_time = clock()
        self._requested = False
        self._deadline_done = False

    @property
    def deadline(self) -> float | None:
        """When the lifetime trigger fires (clock time), if it is set."""
        o = self.options
        if o.boot_time is None or o.lifetime_seconds is None:
            return None
        return o.boot_time + o.lifetime_seconds

    def save_now(self) -> None:
        """Ask for a save at the next step boundary."""
        self._requested = True

    def due(self, step: int) -> str | None:
        """The reason a save is due at ``step``, or None.

        Returns one of ``"requested"``, ``"lifetime"``, ``"steps"``,
        ``"seconds"``.
        """
        if step == self._last_step:
            return "requested" if self._requested else None
        if self._requested:
            return "requested"
        now = self._clock()
        deadline = self.deadline
        if deadline is not None and not self._deadline_done and now >= deadline:
            return "lifetime"
        o = self.options
        if o.every_steps is not None and step - self._last_step >= o.every_steps:
            return "steps"
        if self.choice is not None:
            return "auto" if now - self._last_time >= self.choice.seconds else None
        if o.every_seconds is not None and now - self._last_time >= o.every_seconds:
            return "seconds"
        return None

    def new_choice(self) -> Choice | None:
        """The interval "auto" chose, once each time it moved by a fifth or more
        or the store's upload cap began to set it."""
        if not self._choice_news:
            return None
        self._choice_news = False
        return self.choice

    def steps_due(self, step: int) -> bool:
        """Whether the every-N-steps trigger alone is due at ``step``.

        The one trigger that is the same on every process of a
        multi-process run; the others are agreed first.
        """
        every = self.options.every_steps
        return (
            step != self._last_step
            and every is not None
            and (step - self._last_step >= every)
        )

    def saved(self, step: int, reason: str | None = None) -> None:
        """Record that a save at ``step`` was taken (resets the intervals)."""
        self._last_step = step
        self._last_time = self._clock()
        self._requested = False
        if self.cadence is not None:
            before, self.choice = self.choice, self.cadence.choose()
            moved = (
                before is None or abs(self.choice.seconds / before.seconds - 1) >= 0.2
            )
            # The upload cap taking over is said even where the interval
            # barely moved: the reason changed, and a cap is news.
            capped = self.choice.budget is not None and (
                before is None or before.budget is None
            )
            self._choice_news = self._choice_news or moved or capped
        if reason == "lifetime" or (
            self.deadline is not None and self._last_time >= self.deadline
        ):
            self._deadline_done = True
