"""The agent's once-a-second tick: history samples, panel refreshes, clicks.

:meth:`Telemetry.tick` is called by the training loop after every step
(``StepDuties.tick``). It costs one clock read and a comparison until a
second has passed by wall clock; then it samples the metrics for the
history, writes a history chunk when one is due (in the background),
refreshes the displayed panels and lets the kernel's pending widget
messages (button clicks) be handled — all on the training loop's own
thread, the only one whose widget updates Colab renders.

Nothing here imports ipywidgets; outside a notebook, with no panel made,
a due tick only samples metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from colab_resume.events import Event
from colab_resume.panel.model import EventLine, PanelFacts
from colab_resume.report.history import HistoryRecorder

if TYPE_CHECKING:
    from colab_resume.agent.core import Agent

log = logging.getLogger(__name__)

# Not worth a line in the panel's event list.
QUIET_EVENTS = ("checkpoint.upload.progress", "checkpoint.committed", "run.resumed")


class Telemetry:
    """See the module docstring.

    Args:
        agent: the agent observed (read only; never driven from here).
        interval: seconds between due ticks.
        clock: monotonic clock, injectable for tests.
        wall: wall clock, injectable for tests.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.agent = agent
        self.interval = interval
        self._clock = clock
        self._wall = wall
        self._next = 0.0
        self.recorder = HistoryRecorder(agent.events, monotonic=clock, clock=wall)
        self.listeners: list[Callable[[], None]] = []  # panels' refresh
        self.due_ticks = 0
        self.total_steps: int | None = None
        self.steps_per_epoch: int | None = None
        self._rate: tuple[int, float] | None = None  # (step, time) at last due tick
        self.steps_per_second: float | None = None
        self._beats: tuple[int, float] | None = None  # (beat count, wall time seen)
        self._upload_rate: float | None = None
        self._committed: tuple[int, float, int] | None = None  # step, time, bytes
        self._waiting: tuple[float, float] | None = None  # (seconds left, at)
        self._owner = threading.current_thread()
        agent.events.subscribe(self._on_event)

    # --- the tick -----------------------------------------------------------------

    def tick(self) -> None:
        """After every step: cheap unless a second has passed."""
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self.interval
        self._due(now)

    def force(self) -> None:
        """Refresh now (start and end of training, state changes)."""
        self._next = self._clock() + self.interval
        self._due(self._clock())

    def _due(self, now: float) -> None:
        self.due_ticks += 1
        duties = self.agent._duties
        if duties is not None:
            step = duties.step
            if self._rate is not None and step > self._rate[0] and now > self._rate[1]:
                rate = (step - self._rate[0]) / (now - self._rate[1])
                old = self.steps_per_second
                self.steps_per_second = rate if old is None else 0.7 * old + 0.3 * rate
            if self._rate is None or step != self._rate[0]:
                self._rate = (step, now)
                try:
                    self.recorder.sample(step, duties.snapshot()[2])
                except Exception:  # a metric we cannot read must not stop training
                    log.debug("telemetry: no metrics this tick", exc_info=True)
        self.recorder.maybe_flush()
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:  # a broken display must not break training
                log.warning("panel refresh failed", exc_info=True)

    # --- lifecycle hooks from the agent -------------------------------------------

    def session_started(
        self, total_steps: int | None = None, steps_per_epoch: int | None = None
    ) -> None:
        """The agent took the run (lease known) and will train to ``total_steps``."""
        session = self.agent.session
        if session is not None:
            self.recorder.start(self.agent.storage, session.lease, session.session_id)
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self._waiting = None
        self.force()

    def finish(self) -> None:
        """Training ended (any way): last refresh, last history chunk."""
        try:
            self.force()
        finally:
            self.recorder.flush(wait=True)

    # --- what the panel shows -----------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if event.kind == "lease.waiting":
            left = event.data.get("seconds_left")
            if isinstance(left, (int, float)):
                self._waiting = (float(left), event.time)
        elif event.kind in ("lease.taken", "lease.previous_dead", "lease.takeover"):
            self._waiting = None
        elif event.kind == "checkpoint.upload.progress":
            rate = event.data.get("rate_bytes_per_s")
            if isinstance(rate, (int, float)):
                self._upload_rate = float(rate)
        elif event.kind == "checkpoint.committed":
            nbytes, seconds = event.data.get("bytes"), event.data.get("seconds")
            if isinstance(nbytes, int) and event.step is not None:
                self._committed = (event.step, event.time, nbytes)
                if isinstance(seconds, (int, float)) and seconds > 0:
                    self._upload_rate = nbytes / seconds
        # Events raised on the panel's own thread while no step ticks (the
        # wait's countdown, connecting) refresh it; others wait for a tick.
        if (
            self.listeners
            and event.kind not in QUIET_EVENTS
            and threading.current_thread() is self._owner
        ):
            self.tick()

    def facts(self) -> PanelFacts:
        """What is known about the agent now."""
        agent, now = self.agent, self._wall()
        session, manager, duties = agent.session, agent.checkpoints, agent._duties
        connection = agent.connection
        state = self._state()
        heartbeat_age, failures, interval = None, 0, None
        if session is not None:
            writer = session.writer
            beats = writer.beats
            if self._beats is None or beats != self._beats[0]:
                self._beats = (beats, now)
            heartbeat_age = now - self._beats[1] if beats else None
            failures = writer.failures
            interval = writer.interval
        last = manager.last_committed if manager else None
        committed_step = last.step if last else None
        checkpoint_time = checkpoint_bytes = None
        if self._committed is not None and self._committed[0] == committed_step:
            _, checkpoint_time, checkpoint_bytes = self._committed
        waiting_left = None
        if self._waiting is not None:
            waiting_left = self._waiting[0] - (now - self._waiting[1])
        events = [
            EventLine(e.time, e.level, e.kind, e.message)
            for e in agent.events.recent(60)
            if e.kind not in QUIET_EVENTS
        ][-6:]
        series = [
            (p.step, p.metrics["loss"])
            for p in self.recorder.recent
            if "loss" in p.metrics
        ]
        latest = self.recorder.recent[-1].metrics if self.recorder.recent else {}
        return PanelFacts(
            state=state,
            now=now,
            waiting_left_s=waiting_left,
            accelerator=connection.label if connection else None,
            step=duties.step if duties else None,
            total_steps=self.total_steps,
            epoch=(
                duties.step // self.steps_per_epoch
                if duties is not None and self.steps_per_epoch
                else None
            ),
            steps_per_second=self.steps_per_second if state == "training" else None,
            metrics=dict(latest),
            series=series,
            checkpoint_step=committed_step,
            checkpoint_time=checkpoint_time,
            checkpoint_bytes=checkpoint_bytes,
            upload_rate=self._upload_rate,
            uploading=bool(manager and manager.uploading),
            stall_count=manager.stall_count if manager else 0,
            stall_seconds=manager.stall_seconds if manager else 0.0,
            heartbeat_age_s=heartbeat_age,
            heartbeat_seconds=interval,
            heartbeat_failures=failures,
            lease=session.lease if session else None,
            session_id=session.session_id if session else None,
            host=session.lease_record.host if session else None,
            events=events,
            pause_requested=agent.controls.paused,
        )

    def _state(self) -> str:
        session = self.agent.session
        if session is None:
            if self._waiting is not None:
                return "waiting"
            recent = self.agent.events.recent(1)
            if recent and recent[-1].kind == "run.already_completed":
                return "completed"
            return "starting" if recent else "not started"
        writer = session.writer
        if writer.fenced:
            return "fenced"
        state = writer.state
        if state == "training" and self.agent.controls.paused:
            return "paused"  # asked; the loop pauses at the next step
        return str(state)
