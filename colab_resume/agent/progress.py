"""The agent's once-a-second tick, and the progress it exposes.

:meth:`ProgressTracker.tick` is called by the training loop after every
step (``StepDuties.tick``), with the step. It costs one clock read and a
comparison until a second has passed by wall clock; then it samples the metrics for the
run's history, writes a history chunk when one is due (in the background)
and tells its listeners — a displayed panel refreshes itself and handles
the kernel's pending widget messages (button clicks) there, on the training
loop's own thread, the only one whose widget updates Colab renders.

The loop pushes what the tracker knows (as orbit's controller calls its
actions): the run it took (:meth:`ProgressTracker.took_run`), the
accelerator it connected to (:meth:`~ProgressTracker.connected`), the
training it started (:meth:`~ProgressTracker.training`) and each step
(:meth:`~ProgressTracker.tick`). The tracker never reads the loop's fields,
so they are not a surface anything else depends on.

:class:`Progress` is the public, read-only snapshot of where the agent
stands (``agent.progress()``); the panel draws it, and nothing here knows
the panel exists.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from colab_resume.events import Event, EventLog
from colab_resume.report import event_data
from colab_resume.report.history import HistoryRecorder

if TYPE_CHECKING:
    from colab_resume.agent.controls import Controls
    from colab_resume.checkpoint import CheckpointManager
    from colab_resume.heartbeat import RunSession
    from colab_resume.storage import Storage

log = logging.getLogger(__name__)

# Events too frequent to refresh the listeners for on their own.
QUIET_EVENTS = ("checkpoint.upload.progress", "checkpoint.committed", "run.resumed")


@dataclasses.dataclass(frozen=True)
class Progress:
    """Where the agent stands; None where unknown.

    Attributes:
        state: ``not started``, ``starting``, ``waiting``, ``training``,
            ``recovering``, ``paused``, ``stopped``, ``fenced``,
            ``completed`` or ``failed``.
        now: wall-clock time of the snapshot.
        waiting_left_s: countdown while waiting for a silent holder.
        accelerator: the connection's one-line label.
        step, total_steps, epoch: progress.
        steps_per_second: recent training speed.
        metrics: the latest metric values.
        series: ``(step, loss)`` samples of this session.
        checkpoint_step, checkpoint_time, checkpoint_bytes: the last commit
            (``checkpoint_bytes``: the checkpoint's own files).
        checkpoint_uploaded_bytes: what that commit uploaded: its own files
            and the shared objects it was the first to need.
        checkpoint_shared_bytes: the frozen arrays it references in shared
            objects, stored once per run.
        frozen: the frozen-array mode, ``"once"``, ``"rebuild"`` or
            ``"every"`` (the ``frozen`` option).
        upload_rate: bytes per second of the last (or current) upload.
        uploading: an upload is in flight.
        stall_count, stall_seconds: saves that waited for an upload.
        heartbeat_age_s, heartbeat_seconds, heartbeat_failures: liveness.
        lease, session_id, host: who holds the run.
        events: the most recent events, oldest first.
        pause_requested: pause was asked.
    """

    state: str
    now: float
    waiting_left_s: float | None = None
    accelerator: str | None = None
    step: int | None = None
    total_steps: int | None = None
    epoch: int | None = None
    steps_per_second: float | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    series: Sequence[tuple[int, float]] = ()
    checkpoint_step: int | None = None
    checkpoint_time: float | None = None
    checkpoint_bytes: int | None = None
    checkpoint_uploaded_bytes: int | None = None
    checkpoint_shared_bytes: int | None = None
    frozen: str | None = None
    upload_rate: float | None = None
    uploading: bool = False
    stall_count: int = 0
    stall_seconds: float = 0.0
    heartbeat_age_s: float | None = None
    heartbeat_seconds: float | None = None
    heartbeat_failures: int = 0
    lease: int | None = None
    session_id: str | None = None
    host: str | None = None
    events: Sequence[Event] = ()
    pause_requested: bool = False


class ProgressTracker:
    """See the module docstring.

    Args:
        events: the agent's event log (read; the recorder keeps them).
        controls: the agent's flags (whether a pause was asked).
        interval: seconds between due ticks.
        clock: monotonic clock, injectable for tests.
        wall: wall clock, injectable for tests.
    """

    def __init__(
        self,
        events: EventLog,
        controls: Controls,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.events = events
        self.controls = controls
        self.interval = interval
        self._clock = clock
        self._wall = wall
        self._next = 0.0
        self.recorder = HistoryRecorder(events, monotonic=clock, clock=wall)
        self.listeners: list[Callable[[], None]] = []  # e.g. a panel's refresh
        self.due_ticks = 0
        self.total_steps: int | None = None
        self.steps_per_epoch: int | None = None
        self._rate: tuple[int, float] | None = None  # (step, time) at last due tick
        self.steps_per_second: float | None = None
        self._beats: tuple[int, float] | None = None  # (beat count, wall time seen)
        self._upload_rate: float | None = None
        # The last commit: its step, time and Progress fields (commit_facts).
        self._committed: tuple[int, float, dict[str, Any]] | None = None
        self._waiting: tuple[float, float] | None = None  # (seconds left, at)
        self._owner = threading.current_thread()
        # What the loop pushed (see the module docstring).
        self._storage: Storage | None = None
        self._session: RunSession | None = None
        self._checkpoints: CheckpointManager | None = None
        self._accelerator: str | None = None
        self._step: int | None = None
        self._metrics: Callable[[], dict[str, float]] | None = None
        events.subscribe(self._on_event)

    # --- what the loop pushes -------------------------------------------------------

    def took_run(
        self,
        storage: Storage,
        session: RunSession | None,
        checkpoints: CheckpointManager | None,
    ) -> None:
        """The loop took the run: its session (None on a process that does
        not lead a multi-process run) and checkpoints."""
        self._storage, self._session, self._checkpoints = storage, session, checkpoints

    def connected(self, accelerator: str | None) -> None:
        """The loop connected (or reconnected) to ``accelerator`` (its label)."""
        self._accelerator = accelerator

    def training(
        self, step: int | None, metrics: Callable[[], dict[str, float]] | None
    ) -> None:
        """Training starts at ``step`` with ``metrics`` to sample; None, None:
        the state trained so far is being replaced (a rebuild)."""
        self._step, self._metrics = step, metrics

    # --- the tick -----------------------------------------------------------------

    def tick(self, step: int | None = None) -> None:
        """After every ``step``: cheap unless a second has passed."""
        if step is not None:
            self._step = step
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
        step, metrics = self._step, self._metrics
        if step is not None and metrics is not None:
            if self._rate is not None and step > self._rate[0] and now > self._rate[1]:
                rate = (step - self._rate[0]) / (now - self._rate[1])
                old = self.steps_per_second
                self.steps_per_second = rate if old is None else 0.7 * old + 0.3 * rate
            if self._rate is None or step != self._rate[0]:
                self._rate = (step, now)
                try:
                    self.recorder.sample(step, metrics())
                except Exception:  # a metric we cannot read must not stop training
                    log.debug("telemetry: no metrics this tick", exc_info=True)
        self.recorder.maybe_flush()
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:  # a broken display must not break training
                log.warning("progress listener failed", exc_info=True)

    # --- lifecycle hooks from the agent -------------------------------------------

    def session_started(
        self, total_steps: int | None = None, steps_per_epoch: int | None = None
    ) -> None:
        """The agent took the run (lease known) and will train to ``total_steps``."""
        session = self._session
        if session is not None and self._storage is not None:
            self.recorder.start(self._storage, session.lease, session.session_id)
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self._waiting = None
        self.force()

    def countdown(self, seconds_left: float, holder: str) -> None:
        """While the run waits on a silent holder, at every poll (~2 s).

        The seconds left show in the snapshot (``waiting_left_s``), and a
        displayed panel redraws now: the loop is inside the wait, so no
        step ticks it.
        """
        self._waiting = (seconds_left, self._wall())
        if self.listeners and threading.current_thread() is self._owner:
            self.tick()

    def finish(self) -> None:
        """Training ended (any way): last refresh, last history chunk."""
        try:
            self.force()
        finally:
            self.recorder.flush(wait=True)

    # --- what is known ------------------------------------------------------------

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
        elif event.kind == event_data.COMMITTED:
            facts = commit_facts(event.data)
            nbytes, seconds = facts["checkpoint_bytes"], event.data.get("seconds")
            if nbytes is not None and event.step is not None:
                self._committed = (event.step, event.time, facts)
                if isinstance(seconds, (int, float)) and seconds > 0:
                    self._upload_rate = nbytes / seconds
        # Events raised on the listeners' own thread while no step ticks (the
        # wait's countdown, connecting) refresh them; others wait for a tick.
        if (
            self.listeners
            and event.kind not in QUIET_EVENTS
            and threading.current_thread() is self._owner
        ):
            self.tick()

    def _epoch(self, step: int | None) -> int | None:
        """The epoch being trained (0-based): the next step's, or at the
        end the last one's (a finished 2-epoch run is not in epoch 3)."""
        if step is None or not self.steps_per_epoch:
            return None
        epoch = step // self.steps_per_epoch
        if self.total_steps:
            epoch = min(epoch, max(0, self.total_steps - 1) // self.steps_per_epoch)
        return epoch

    def snapshot(self) -> Progress:
        """What is known about the agent now."""
        now = self._wall()
        session, manager, step = self._session, self._checkpoints, self._step
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
        checkpoint_time, commit = None, commit_facts({})
        if self._committed is not None and self._committed[0] == committed_step:
            checkpoint_time, commit = self._committed[1], dict(self._committed[2])
        if commit["frozen"] is None and manager is not None:
            commit["frozen"] = manager.config.frozen  # the mode before a commit says
        waiting_left = None
        if self._waiting is not None:
            waiting_left = self._waiting[0] - (now - self._waiting[1])
        series = [
            (p.step, p.metrics["loss"])
            for p in self.recorder.recent
            if "loss" in p.metrics
        ]
        latest = self.recorder.recent[-1].metrics if self.recorder.recent else {}
        return Progress(
            state=state,
            now=now,
            waiting_left_s=waiting_left,
            accelerator=self._accelerator,
            step=step,
            total_steps=self.total_steps,
            epoch=self._epoch(step),
            steps_per_second=self.steps_per_second if state == "training" else None,
            metrics=dict(latest),
            series=series,
            checkpoint_step=committed_step,
            checkpoint_time=checkpoint_time,
            **commit,
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
            events=tuple(self.events.recent(60)),
            pause_requested=self.controls.paused,
        )

    def _state(self) -> str:
        session = self._session
        if session is None:
            if self._waiting is not None:
                return "waiting"
            recent = self.events.recent(1)
            if recent and recent[-1].kind == "run.already_completed":
                return "completed"
            return "starting" if recent else "not started"
        writer = session.writer
        if writer.fenced:
            return "fenced"
        state = writer.state
        if state == "training" and self.controls.paused:
            return "paused"  # asked; the loop pauses at the next step
        return str(state)


def commit_facts(data: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`Progress` fields a ``checkpoint.committed`` event's
    details give (None where one is missing or does not check out)."""
    kept = event_data.kept(event_data.COMMITTED, data)
    return {
        "checkpoint_bytes": kept.get("bytes"),
        "checkpoint_uploaded_bytes": kept.get("uploaded_bytes"),
        "checkpoint_shared_bytes": kept.get("shared_bytes"),
        "frozen": kept.get("frozen"),
    }
