"""The outer loop: a run's lifecycle, from taking the lease to DONE.json.

Once per ``fit``/``run`` call (:meth:`RunLoop.drive`):

1. connect to the accelerator; if the run is COMPLETED, restore and return
   (or, asked for more steps than it had, continue from its final state);
2. take the run (watch a recent holder, refuse a live one unless
   ``takeover``; wait out a silent one with a countdown);
3. build everything inside a fresh ``strategy.scope()`` (the newest
   checkpoint downloading meanwhile), restore the newest valid checkpoint,
   position the data, train;
4. on an accelerator loss: reconnect, and go back to 3 (bounded, with
   backoff) — the same bitwise result as if nothing happened;
5. at the end: a final checkpoint, wait for its commit, DONE.json.

Only a state that was trained or restored in this process is ever
committed. A rebuilt model is neither until its restore returns, so the
loop drops the step duties (the only thing that saves) before it builds or
restores (:meth:`RunLoop.restore_into`), and makes new ones only once the
restore has returned: a restore that fails or is interrupted — storage
down past its retry budget, Ctrl-C, a damaged checkpoint — leaves nothing
that could save, on any path (recovery, Ctrl-C, stop, failure).

The lighter path (``agent.restore`` + ``agent.callback()`` in the user's
own ``model.fit``) is :meth:`RunLoop.open_light`: steps 2 and 3 without the
build, and a :class:`~colab_resume.agent.light.LightSession` whose
callbacks do the rest. The :class:`~colab_resume.agent.core.Agent` uses
the loop through its narrow API (the methods and read-only properties
above the loop proper), never through its fields.

A run of several processes (JAX multi-host) differs only behind one seam,
:attr:`RunLoop.processes` (:mod:`colab_resume.agent.processes`): who takes
the lease, what guards SIGTERM, what is agreed, what an error means.

The inner loop (heartbeat, triggers, pause/stop after every step) is
:class:`~colab_resume.agent.steps.StepDuties`; what is trained, and how, is
a :class:`~colab_resume.agent.driver.Driver` (``fit``, ``run`` or the
lighter path). This split follows the controller/trainer split of TF Model
Garden's orbit: the loop owns time and failure, the driver owns the model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from colab_resume import exit_status
from colab_resume.agent import completed, epoch_length, runtime_facts
from colab_resume.agent.callback import ModelState, StartPoint
from colab_resume.agent.controls import Controls
from colab_resume.agent.driver import Driver
from colab_resume.agent.light import LightSession
from colab_resume.agent.multihost import MultiHost
from colab_resume.agent.options import AgentOptions
from colab_resume.agent.processes import ONE_PROCESS, Processes
from colab_resume.agent.progress import Progress, ProgressTracker
from colab_resume.agent.steps import StepDuties, StepHook
from colab_resume.backend.accelerator import Accelerator
from colab_resume.checkpoint import (
    CheckpointManager,
    RestoredInfo,
    SaveTriggers,
    presets,
)
from colab_resume.checkpoint.cadence import AutoCadence, Evidence
from colab_resume.checkpoint.triggers import lifetime_applies
from colab_resume.errors import FencedError, StorageFullError
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession
from colab_resume.report.goodput import evidence_before
from colab_resume.runtime import Connection, in_colab, vm_age
from colab_resume.runtime.loss import is_accelerator_loss
from colab_resume.storage import Storage
from colab_resume.timings import StepClock, Timings, script_launch_seconds

log = logging.getLogger(__name__)

# Download the checkpoint while build_model() runs (restore_into). Off only
# to measure what it saves (bench/bench_first_step.py).
PREFETCH = True


class RunLoop:
    """See the module docstring.

    Args:
        storage: the run directory.
        options: the agent's validated options.
        accelerator: connects, reconnects, gives the strategy.
        controls: pause / stop / save-now flags.
        events: the run's events.
        sleep: waits between recoveries (injectable for tests).
    """

    def __init__(
        self,
        storage: Storage,
        options: AgentOptions,
        accelerator: Accelerator,
        controls: Controls,
        events: EventLog,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.storage = storage
        self.options = options
        self.accelerator = accelerator
        self.controls = controls
        self.events = events
        self.session: RunSession | None = None
        self.checkpoints: CheckpointManager | None = None
        self.duties: StepDuties | None = None
        self._light: LightSession | None = None  # the lighter path's, if open
        self._recoveries = 0
        # A wait per recovery, doubling from recovery_backoff_seconds.
        self._recovery_backoff = options.recovery
        self.sleep = sleep
        self._stopped = False  # the last drive ended on stop(), before its end
        # How the last drive ended: an exit_status name, None before one ends.
        self._outcome: str | None = None
        # The step it ended at and, stopped early, why ("SIGTERM", "stop()").
        self._ended_at: int | None = None
        self._end_reason: str | None = None
        self.step_hooks: list[StepHook] = []
        # What this session measured of its time (goodput), and the
        # connect that came before its lease (the first session's).
        self.timings = Timings()
        self._connect_seconds = 0.0
        self._launch_seconds = 0.0
        # What earlier sessions showed, for save_every="auto" (read once a session).
        self._evidence: tuple[int, Evidence] | None = None
        # This process's part in a multi-process run (None: the only one).
        self.multihost: MultiHost | None = None
        # History samples and panel refreshes, once a second from the loop.
        self.progress = ProgressTracker(events, controls)

    # --- what the Agent sees: this narrow API, never the fields ----------------------

    @property
    def stopped(self) -> bool:
        """The last run ended on stop() (or SIGTERM) before its planned end."""
        return self._stopped

    @property
    def outcome(self) -> str | None:
        """How the last drive ended: ``"COMPLETED"``, ``"STOPPED"``,
        ``"PREEMPTED"`` or ``"FAILED"`` (:mod:`colab_resume.exit_status`);
        None while none has ended."""
        return self._outcome

    @property
    def ended_at(self) -> tuple[int | None, str | None]:
        """The step the last drive ended at, and why if it stopped early."""
        return self._ended_at, self._end_reason

    @property
    def recoveries(self) -> int:
        """Accelerator losses recovered in this process."""
        return self._recoveries

    def progress_now(self) -> Progress:
        """Where the loop stands now (a read-only snapshot)."""
        return self.progress.snapshot()

    def on_progress(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` at every due tick; returns its remover."""
        return _added(self.progress.listeners, listener)

    def on_step(self, hook: StepHook) -> Callable[[], None]:
        """Call ``hook(step)`` after every step's duties; returns its remover."""
        return _added(self.step_hooks, hook)

    def measured(self) -> dict[int, Timings]:
        """This session's tally of its time, by lease (empty before a lease)."""
        session = self.session
        if session is None:
            return {}
        return {session.lease: dataclasses.replace(self.timings)}

    def flush_history(self, timeout: float) -> None:
        """Write the run history recorded so far now (waits up to ``timeout``)."""
        self.progress.recorder.flush(wait=True, timeout=timeout)

    def open_light(self, driver: ModelState) -> LightSession:
        """The lighter path: take the run and restore it into the user's model.

        ``driver``'s model is built and compiled by the user; this takes the
        lease, restores the newest checkpoint into it (through
        :meth:`restore_into`, as every path does) and makes the step duties
        from there. A restore that fails closes the session (as :meth:`fail`
        does) and raises.

        Returns:
            The session: its ``start`` and one callback per ``model.fit``.
        """
        self.controls.reset()
        session, manager = self.take_run()
        self.progress.session_started(driver.total_steps, driver.steps_per_epoch)
        try:
            info, start = self.restore_into(driver, manager)
        except BaseException as exc:
            self.fail(exc, session, manager)
            raise
        if info is not None:
            try:
                self.announce_runtime(info, driver)
            except BaseException as exc:
                self.fail(exc, session, manager)
                raise
        duties = self.make_duties(driver, session, manager, start)
        self.duties = duties
        if info is None:
            point = StartPoint(step=0, initial_epoch=0, skip=0)
        else:
            point = driver.start_point(info.step, info.epoch, info.extras)
        self._light = LightSession(
            driver,
            session,
            manager,
            duties,
            point,
            finish=lambda: self.finish(driver.total_steps, session, manager),
            released=self.progress.finish,
        )
        return self._light

    def close(self, exc: BaseException | None = None) -> None:
        """End what the loop still holds; idempotent.

        After ``exc`` (the ``with`` block raised) the session is closed as
        :meth:`fail` says, else as stopped (the next run takes it at once);
        a lighter-path session gives no more callbacks; the upload in
        flight is finished.
        """
        session, manager = self.session, self.checkpoints
        if exc is not None and session is not None and manager is not None:
            with contextlib.suppress(Exception):
                self.fail(exc, session, manager)
        if self._light is not None:
            self._light.close()
        if session is not None:
            session.close("stopped")
        if manager is not None:
            with contextlib.suppress(Exception):
                manager.close()

    # --- the loop ---------------------------------------------------------------------

    def connect(self) -> Any:
        """Connect to the accelerator (once); returns the strategy."""
        if self.accelerator.strategy is None:
            self._launch_seconds += script_launch_seconds()
            began = time.monotonic()
            self.accelerator.connect()
            self._connect_seconds += time.monotonic() - began
            self.progress.connected(self._label())
        return self.accelerator.strategy

    def _label(self) -> str | None:
        connection = self.connection
        return connection.label if connection else None

    @property
    def connection(self) -> Connection | None:
        return self.accelerator.connection

    def drive(self, driver: Driver) -> None:
        """Train ``driver`` to its end: steps 1 to 5 of the module docstring."""
        strategy = self.connect()
        self.controls.reset()
        self._stopped = False
        self._outcome = None
        self._ended_at = self._end_reason = None
        done = completed.read_done(self.storage)
        if done is not None and not completed.asks_for_more(done, driver.total_steps):
            completed.load_final_state(
                self.storage, self.events, driver, strategy, done
            )
            self._outcome = exit_status.NAMES[exit_status.COMPLETED]
            return
        session, manager = self.take_run()
        if done is not None:
            completed.reopen(self.storage, self.events, done, driver.total_steps)
        self.progress.session_started(driver.total_steps, driver.steps_per_epoch)
        try:
            with self.processes.guarding(self.options, self.controls, self.events):
                self._train_with_recovery(driver, session, manager)
            self.finish(driver.total_steps, session, manager)
        except KeyboardInterrupt:
            self.fail(KeyboardInterrupt(), session, manager)
            # One line instead of TensorFlow's traceback: what is safe, what next.
            raise KeyboardInterrupt(self._interrupted_message(manager)) from None
        except BaseException as exc:
            self._outcome = exit_status.NAMES[exit_status.FAILED]
            self.processes.after_error(exc)  # a lost peer: exits RESTART
            self.fail(exc, session, manager)
            if isinstance(exc, StorageFullError):
                # Name the checkpoint the run stopped at (the store's
                # message says why and what to free).
                where = self._saved(manager)
                raise StorageFullError(f"{exc} (Here {where}.)") from exc
            raise
        finally:
            with contextlib.suppress(Exception):
                manager.close()
            self.progress.finish()
        self.processes.ended(self._stopped)

    def take_run(self) -> tuple[RunSession, CheckpointManager]:
        """Take the lease (waiting out a silent holder); open its checkpoints."""
        processes = self.processes
        self.timings = Timings(
            launch=self._launch_seconds, connect=self._connect_seconds
        )
        # Counted once, in the session they preceded.
        self._launch_seconds = self._connect_seconds = 0.0
        self.progress.recorder.timings = self.timings
        began = time.monotonic()
        session, manager = processes.take_run(
            self.storage,
            self.options,
            self.events,
            self.progress.countdown,
            self.connection,
        )
        self.timings.wait = time.monotonic() - began
        # Only the leading process's session is the run's (history, panel, status).
        self.session = session if processes.leads else None
        self.checkpoints = manager
        self.progress.took_run(self.storage, self.session, manager)
        return session, manager

    @property
    def processes(self) -> Processes:
        """The seam for several processes (:mod:`colab_resume.agent.processes`)."""
        return self.multihost if self.multihost is not None else ONE_PROCESS

    def fail(
        self, exc: BaseException, session: RunSession, manager: CheckpointManager
    ) -> None:
        """Close the session after ``exc``: fenced, stopped (Ctrl-C) or failed."""
        if isinstance(exc, FencedError):
            session.close("fenced")
            return
        self._last_save_if_safe(manager)
        if isinstance(exc, KeyboardInterrupt):
            session.close("stopped")
        else:
            session.close("failed", error=f"{type(exc).__name__}: {exc}")

    def _train_with_recovery(
        self, driver: Driver, session: RunSession, manager: CheckpointManager
    ) -> None:
        while True:
            strategy = self.accelerator.strategy
            try:
                info, start = self.restore_into(driver, manager, strategy)
                if info is not None:
                    said = info.describe(driver.steps_per_epoch)
                    self.events.emit("run.resumed_at", said, step=start)
                    self.announce_runtime(info, driver)
                self.duties = self.make_duties(driver, session, manager, start)
                session.update(state="training", step=start)
                if driver.total_steps is None or start < driver.total_steps:
                    driver.train(start, self.duties, strategy)
                return
            except Exception as exc:
                if not is_accelerator_loss(exc):
                    raise
                if self._recoveries >= self.options.max_recoveries:
                    self.events.emit(
                        "recovery.gave_up",
                        f"accelerator lost again after {self._recoveries} recoveries",
                        level="error",
                    )
                    raise
                self._recover(exc, session, manager)

    def restore_into(
        self, driver: Driver, manager: CheckpointManager, strategy: Any = None
    ) -> tuple[RestoredInfo | None, int]:
        """Build ``driver`` (in a fresh scope of ``strategy``) and restore it.

        The one way to a state the loop may commit (see the module
        docstring): the duties of the state before are dropped first, and
        the caller makes new ones from what this returns. ``strategy`` None:
        the driver's model is already built (the lighter path).

        Returns:
            What was restored (None: the run had no checkpoint) and the
            step training starts at.
        """
        self.duties = None  # they save the state this build replaces
        self.progress.training(None, None)
        # The newest checkpoint downloads while the model builds; a build
        # that raises (or a Ctrl-C in it) cancels it and deletes its files.
        prefetch = manager.prefetch() if PREFETCH and strategy is not None else None
        try:
            if strategy is not None:
                with (
                    self.timings.measure("build"),
                    strategy.scope(),
                    presets.watching() as loaded,
                ):
                    driver.build()
                presets.mark(driver.state, loaded)
            state = driver.state
        except BaseException:
            if prefetch is not None:
                prefetch.close()
            raise
        with self.timings.measure("restore"):
            info = manager.restore(state, prefetch=prefetch)
        epoch_length.check(info, driver.steps_per_epoch)
        start = driver.restored(info)
        self.processes.agree_start(start, driver)
        return info, start

    def announce_runtime(self, info: RestoredInfo, driver: Driver) -> None:
        """Say what changed if another runtime wrote the restored checkpoint.

        Raises:
            RuntimeChangedError: it did, and ``on_runtime_change="refuse"``.
        """
        changed = runtime_facts.announce(
            self.events,
            info.extras.get(runtime_facts.KEY),
            self.runtime_facts(driver),
            step=info.step,
            skipped_groups=info.skipped_groups,
            refuse=self.options.on_runtime_change == "refuse",
        )
        if changed:
            log.warning(
                "[step %d] the runtime changed: %s", info.step, "; ".join(changed)
            )

    def runtime_facts(self, driver: Driver) -> dict[str, Any]:
        """This session's runtime facts, with the built model's layouts."""
        return runtime_facts.facts(
            self.connection, self.accelerator.strategy, getattr(driver, "model", None)
        )

    def _recover(
        self, exc: BaseException, session: RunSession, manager: CheckpointManager
    ) -> None:
        self._recoveries += 1
        self.timings.recoveries += 1
        with self.timings.measure("recovery"):
            self._reconnect(exc, session, manager)

    def _reconnect(
        self, exc: BaseException, session: RunSession, manager: CheckpointManager
    ) -> None:
        step = self.duties.step if self.duties else None
        session.update(state="recovering")
        self.events.emit(
            "recovery.started",
            f"accelerator lost ({type(exc).__name__}: {str(exc)[:200]}); "
            f"recovery {self._recoveries} of {self.options.max_recoveries}",
            level="warning",
            step=step,
        )
        # The upload in flight is host-side work: let it commit, so the
        # restore below loses as little as possible.
        manager.wait()
        with contextlib.suppress(Exception):
            manager.check()
        self.sleep(self._recovery_backoff.backoff(self._recoveries))
        self.accelerator.reconnect()
        self.progress.connected(self._label())
        self.events.emit(
            "recovery.reconnected",
            "reconnected; rebuilding in a fresh strategy scope and restoring",
            step=step,
        )

    def make_duties(
        self,
        driver: Driver,
        session: RunSession,
        manager: CheckpointManager,
        start: int,
    ) -> StepDuties:
        """The inner loop's duties from ``start`` on."""
        lifetime = self.options.triggers.lifetime_seconds
        age = vm_age() if lifetime_applies(lifetime, in_colab()) else None
        stop_at, agree = self.processes.step_agreement()
        triggers = SaveTriggers(
            dataclasses.replace(
                self.options.triggers,
                boot_time=time.time() - age.seconds if age else None,
            ),
            start_step=start,
            cadence=self._cadence(session, manager),
        )
        duties = StepDuties(
            session=session,
            manager=manager,
            triggers=triggers,
            controls=self.controls,
            events=self.events,
            snapshot=lambda: epoch_length.stamp(
                driver.snapshot(), driver.steps_per_epoch
            ),
            metrics=driver.metrics,
            tick=self.progress.tick,
            hooks=self.step_hooks,
            runtime=self.runtime_facts(driver),
            stop_at=stop_at,
            agree=agree,
            clock=StepClock(self.timings),
        )
        duties.step = start
        self.progress.training(start, driver.metrics)
        return duties

    def _cadence(
        self, session: RunSession, manager: CheckpointManager
    ) -> AutoCadence | None:
        """``save_every="auto"``'s chooser, from this run's records and tally."""
        triggers = self.options.triggers
        if not triggers.auto:
            return None
        if self._evidence is None or self._evidence[0] != session.lease:
            self._evidence = (
                session.lease,
                evidence_before(self.storage, session.lease),
            )
        return AutoCadence(
            self._evidence[1],
            self.timings,
            floor=triggers.auto_floor_seconds,
            ceiling=triggers.auto_ceiling_seconds,
            prior=triggers.auto_prior_seconds,
            daily_upload_bytes=self.storage.store.daily_upload_bytes,
            service=self.storage.store.service,
            checkpoint_bytes=lambda: manager.last_committed_bytes,
        )

    def finish(
        self, total_steps: int | None, session: RunSession, manager: CheckpointManager
    ) -> None:
        """Final checkpoint, wait for its commit, then DONE.json (or 'stopped')."""
        duties = self.duties
        assert duties is not None
        duties.save(duties.step, reason="final")
        manager.wait()
        manager.check()
        duties.beat()  # the final beat names the final checkpoint
        self._stopped = self.controls.stop_requested and (
            total_steps is None or duties.step < total_steps
        )
        preempted = self.controls.preempted
        self._ended_at = duties.step
        if self._stopped:
            session.close("stopped")
            of = f" of {total_steps}" if total_steps else ""
            why = self._end_reason = preempted or "stop()"
            self._outcome = exit_status.NAMES[
                exit_status.PREEMPTED if preempted else exit_status.STOPPED
            ]
            self.events.emit(
                "run.stopped",
                f"training stopped at step {duties.step}{of} ({why}), "
                f"before its end; its checkpoint is committed. Run the same code "
                f"again to continue.",
                level="warning",
                step=duties.step,
                reason=why,
                outcome=self._outcome,
            )
        else:
            self._outcome = exit_status.NAMES[exit_status.COMPLETED]
            session.complete({"final_step": duties.step, "planned_steps": total_steps})

    def _interrupted_message(self, manager: CheckpointManager) -> str:
        where = (
            f"at step {self.duties.step}"
            if self.duties
            else "while building and restoring the model (nothing of it was saved)"
        )
        return (
            f"interrupted {where}: {self._saved(manager)}. Run the same code "
            f"again to continue from there."
        )

    def _saved(self, manager: CheckpointManager) -> str:
        """Which checkpoint the next run continues from, for a message."""
        last = manager.last_committed
        if last is None:
            return "no checkpoint was committed yet"
        return f"the checkpoint of step {last.step} is committed"

    def _last_save_if_safe(self, manager: CheckpointManager) -> None:
        """After an error: save the last complete step, if it is not half-applied.

        No duties: the model was being rebuilt or restored (see
        :meth:`restore_into`), and that state is never committed.
        """
        duties = self.duties
        if duties is None or not duties.consistent:
            return
        try:
            duties.save(duties.step, reason="error")
            manager.wait()
            manager.check()
        except Exception as exc:
            self.events.emit(
                "checkpoint.final_failed",
                f"could not save after the error: {type(exc).__name__}: {exc}",
                level="warning",
                step=duties.step,
            )


def _added(items: list[Any], item: Any) -> Callable[[], None]:
    """Append ``item`` to ``items``; returns what removes it (once, or never)."""
    items.append(item)

    def remove() -> None:
        if item in items:
            items.remove(item)

    return remove
