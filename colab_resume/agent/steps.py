"""What happens between two training steps: the agent's inner-loop duties.

Called from the training loop's own thread after every step, so it must be
cheap when nothing is due: report progress to the heartbeat (a dict
update), surface background errors (uploads, fencing), honour pause / stop
/ save-now requests, and save when a trigger says so.

In a multi-process run every process must save and stop at the same step,
or the others wait in their next collective. A save every N steps is the
same everywhere; a save-now, a stop, or a trigger of the clock (every T
seconds, the VM's lifetime) is one process's wish until the processes agree
on it: at the agreement steps (``agree``) every process's wishes are
gathered, and what any of them wants, all of them do at that step. Pause
would need an agreement while paused and is refused there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from colab_resume.agent import runtime_facts
from colab_resume.agent.controls import Controls
from colab_resume.agent.snapshot import Snapshot
from colab_resume.checkpoint import CheckpointManager, SaveTriggers
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession
from colab_resume.timings import StepClock

log = logging.getLogger(__name__)

StepHook = Callable[[int], None]  # called with the step after its duties
CADENCE_EVENT = "checkpoint.cadence"
# One process's wishes, as bits for the agreement.
WISH_SAVE = 1
WISH_STOP = 2
# The lighter path hands the data to the user's own model.fit, which would
# get each process's batches unsplit and position none of them on resume.
LIGHT_PATH_REFUSED = (
    "agent.restore (and agent.callback() in your own model.fit) is not "
    "supported in a multi-process run: your fit would feed every process "
    "the whole global batch, and nothing would position each process's "
    "data on resume. Use agent.fit or agent.run, which feed each process "
    "its rows of every global batch, or run the lighter path in one process."
)
PAUSE_REFUSED = (
    "pause() is not supported in a multi-process run: the other processes "
    "would wait in their next collective. Use stop() (every process saves "
    "and stops at one step) and start the job again to continue."
)


class StepDuties:
    """Run after each step; see the module docstring.

    Args:
        session: the run's lease holder (heartbeat, fencing).
        manager: checkpoints of this session.
        triggers: when a save is due.
        controls: pause / stop / save requests.
        events: the run's events.
        snapshot: returns the :class:`~colab_resume.agent.snapshot.Snapshot` to save.
        metrics: the latest metrics, cheaply (default: the snapshot's).
        tick: called after each step with the step, for the panel
            (rate-limits itself).
        hooks: called with the step after its duties (``Agent.on_step``).
        runtime: what each checkpoint records of this session's runtime
            (:mod:`colab_resume.agent.runtime_facts`).
        stop_at: called with each step before the stop check; True: stop
            there as a preemption (a multi-process run's preemption sync
            point), so the run ends PREEMPTED.
        agree: a multi-process run's agreement (see the module docstring):
            called with the step and this process's wishes, returns every
            process's wishes OR-ed at an agreement step, else None.
        clock: measures the steps, saves and pauses (goodput); it starts
            with these duties: the step after them is a first step.
    """

    def __init__(
        self,
        *,
        session: RunSession,
        manager: CheckpointManager,
        triggers: SaveTriggers,
        controls: Controls,
        events: EventLog,
        snapshot: Callable[[], Snapshot],
        metrics: Callable[[], dict[str, Any]] | None = None,
        tick: Callable[[int], None] | None = None,
        hooks: list[StepHook] | None = None,
        runtime: dict[str, Any] | None = None,
        stop_at: Callable[[int], bool] | None = None,
        agree: Callable[[int, int], int | None] | None = None,
        clock: StepClock | None = None,
    ) -> None:
        self.session = session
        self.manager = manager
        self.triggers = triggers
        self.controls = controls
        self.events = events
        self.snapshot = snapshot
        # The tick's metrics, without a snapshot's work (callback state, copies).
        self.metrics = metrics or (lambda: snapshot().metrics)
        self.tick = tick or (lambda step: None)
        self.hooks = hooks if hooks is not None else []
        self.runtime = runtime
        self.stop_at = stop_at
        self.agree = agree
        self.clock = clock
        if clock is not None:
            clock.started()
        self._wishes = 0  # not yet agreed (multi-process)
        self.step = 0
        self.say_cadence(0)
        self.consistent = True  # False while a step is half-applied

    def before_step(self) -> None:
        self.consistent = False

    def after_step(self, step: int) -> bool:
        """Duties after ``step`` steps are complete; True when training must stop."""
        if self.clock is None:
            return self._duties(step)
        self.clock.step_ended()
        try:
            return self._duties(step)
        finally:
            self.clock.duty_ended()

    def _duties(self, step: int) -> bool:
        self.step = step
        self.consistent = True
        self.beat(step=step, state="training")
        self.session.check()  # fenced by a newer session?
        self.manager.check()  # a failed background upload?
        if self.stop_at is not None and self.stop_at(step):
            self.controls.preempt("the preemption sync point")
        elif self.agree is not None:
            return self._after_step_agreed(step)
        if self.controls.take_save_request():
            self.triggers.save_now()
        if self.controls.paused:
            self._pause(step)
        if self.controls.stop_requested:
            self.save(step, reason="stop")
            self.events.emit(
                "run.stopping", f"stop requested; saved step {step}", step=step
            )
            self._call_hooks(step)
            return True
        reason = self.triggers.due(step)
        if reason is not None:
            self.save(step, reason=reason)
        self.tick(self.step)
        self._call_hooks(step)
        return False

    def _after_step_agreed(self, step: int) -> bool:
        """:meth:`after_step`'s requests and triggers, agreed across processes."""
        if self.controls.take_save_request():
            self._wishes |= WISH_SAVE
        if self.controls.stop_requested:
            self._wishes |= WISH_STOP
        if self.controls.paused:
            self.controls.resume()
            self.events.emit("run.pause_refused", PAUSE_REFUSED, level="error")
        if self.triggers.due(step) not in (None, "steps"):
            self._wishes |= WISH_SAVE  # the clock's, or a request: agree first
        reason = "steps" if self.triggers.steps_due(step) else None
        agreed = self.agree(step, self._wishes) if self.agree else None
        if agreed is not None:
            self._wishes = 0
            if agreed & WISH_STOP:
                self.controls.stop()  # on every process: the run ends STOPPED
                self.save(step, reason="stop")
                self.events.emit(
                    "run.stopping",
                    f"stop requested; every process saved step {step}",
                    step=step,
                )
                self._call_hooks(step)
                return True
            if agreed & WISH_SAVE:
                reason = "agreed"
        if reason is not None:
            self.save(step, reason=reason)
        self.tick(self.step)
        self._call_hooks(step)
        return False

    def beat(self, **fields: Any) -> None:
        """Tell the heartbeat ``fields``, and the step of the last commit."""
        committed = self.manager.last_committed
        if committed is not None:
            fields["checkpoint_step"] = committed.step
        self.session.update(**fields)

    def _call_hooks(self, step: int) -> None:
        for hook in list(self.hooks):
            hook(step)  # errors are the caller's: they end training like a step's

    def save(self, step: int, *, reason: str) -> None:
        """Checkpoint now (unless this step is already saved)."""
        if self.manager.last_saved is not None and self.manager.last_saved.step == step:
            return
        began = time.monotonic()
        snapshot = self.snapshot()
        extras = snapshot.extras
        if self.runtime is not None:
            extras = {**extras, runtime_facts.KEY: self.runtime}
        self.manager.save(
            snapshot.state,
            step=step,
            epoch=snapshot.epoch,
            metrics=snapshot.metrics,
            extras=extras,
        )
        if self.clock is not None:
            self.clock.saved(time.monotonic() - began, setup=snapshot.setup_seconds)
        self.triggers.saved(step, reason)
        log.info("[step %d] checkpoint saved (%s)", step, reason)
        self.say_cadence(step)

    def say_cadence(self, step: int) -> None:
        """An event when ``save_every="auto"`` chose an interval, or moved it."""
        choice = self.triggers.new_choice()
        if choice is not None:
            self.events.emit(
                CADENCE_EVENT, choice.describe(), step=step, **choice.data()
            )

    def _pause(self, step: int) -> None:
        self.save(step, reason="pause")
        self.session.update(state="paused")
        self.events.emit("run.paused", f"paused at step {step}", step=step)
        started = time.monotonic()
        while not self.controls.wait_while_paused(0.5):
            self.session.check()
            self.manager.check()
            self.tick(self.step)
        self.session.update(state="training")
        if self.clock is not None:
            self.clock.paused(time.monotonic() - started)
        self.events.emit(
            "run.resumed",
            f"resumed after {time.monotonic() - started:.0f}s paused",
            step=step,
        )
