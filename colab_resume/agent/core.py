"""The Agent: owns a run's lifecycle, from taking the lease to DONE.json.

Outer loop (this module), once per ``fit``/``run`` call:

1. connect to the accelerator; if the run is COMPLETED, restore and return;
2. take the run (watch a recent holder, refuse a live one unless
   ``takeover``; wait out a silent one with a countdown);
3. build everything inside a fresh ``strategy.scope()``, restore the newest
   valid checkpoint, position the data, train;
4. on an accelerator loss: reconnect, and go back to 3 (bounded, with
   backoff) — the same bitwise result as if nothing happened;
5. at the end: a final checkpoint, wait for its commit, DONE.json.

Inner loop duties (heartbeat, triggers, pause/stop) live in
:mod:`colab_resume.agent.steps`; the Keras and custom-loop drivers in
:mod:`~colab_resume.agent.keras_fit` and :mod:`~colab_resume.agent.custom_loop`.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from colab_resume import rundir
from colab_resume.agent.callback import ModelState, StartPoint, make_callback
from colab_resume.agent.controls import Controls
from colab_resume.agent.custom_loop import CustomLoop
from colab_resume.agent.keras_fit import KerasFit
from colab_resume.agent.options import AgentOptions
from colab_resume.agent.steps import StepDuties
from colab_resume.checkpoint import CheckpointManager, SaveTriggers, TriggerOptions
from colab_resume.errors import CorruptRecordError, FencedError
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession, RunStatus, SessionOptions, read_status
from colab_resume.listing import read_leases
from colab_resume.panel.telemetry import Telemetry
from colab_resume.runtime import Accelerator, Connection, ConnectOptions, vm_age
from colab_resume.runtime.loss import is_accelerator_loss
from colab_resume.storage import RetryPolicy, Storage

log = logging.getLogger(__name__)


class Agent:
    """Makes a training run survive the hardware vanishing under it.

    Args:
        run_dir: where the run lives: ``gs://bucket/runs/name``, a local
            path, or any fsspec URL.
        **options: the fields of :class:`AgentOptions` — ``save_every_steps``,
            ``save_every_seconds``, ``keep``, ``heartbeat_seconds``,
            ``dead_after_seconds``, ``takeover``, ``storage_options``,
            ``prefer``, ``cpu_replicas``, ``precision``...

    Raises:
        ValueError: a bad option (the message names it and the fix).
        UnsupportedURLError: ``run_dir`` has a scheme we cannot open.
    """

    def __init__(self, run_dir: str, **options: Any) -> None:
        self.options = AgentOptions(**options)
        self.run_dir = run_dir
        self.events = EventLog()
        self.storage = Storage(
            run_dir,
            self.options.storage_options,
            retry=RetryPolicy(total_seconds=self.options.storage_retry_seconds),
            on_retry=self._storage_retried,
        )
        self.controls = Controls()
        self.accelerator = Accelerator(
            ConnectOptions(
                prefer=self.options.prefer,
                cpu_replicas=self.options.cpu_replicas,
                precision=self.options.precision,
            ),
            events=self.events,
        )
        self.model: Any = None
        self.state: dict[str, Any] | None = None
        self.session: RunSession | None = None
        self.checkpoints: CheckpointManager | None = None
        self.recoveries = 0
        self._duties: StepDuties | None = None
        self._light: ModelState | None = None  # the restore()/callback() path
        # History samples and panel refreshes, once a second from the loop.
        self.telemetry = Telemetry(self)

    # --- the accelerator --------------------------------------------------------------

    def connect(self) -> Any:
        """Connect to the accelerator (once); returns the ``tf.distribute.Strategy``."""
        if self.accelerator.strategy is None:
            self.accelerator.connect()
        return self.accelerator.strategy

    @property
    def connection(self) -> Connection | None:
        return self.accelerator.connection

    # --- training ---------------------------------------------------------------------

    def fit(
        self,
        build_model: Callable[[], Any],
        make_dataset: Callable[..., Any],
        *,
        epochs: int,
        steps_per_epoch: int,
        callbacks: Sequence[Any] | None = None,
        verbose: Any = "auto",
        validation_data: Any = None,
        validation_steps: int | None = None,
        validation_freq: int = 1,
        class_weight: dict[int, float] | None = None,
        extra_state: dict[str, Any] | None = None,
    ) -> Any:
        """Train a Keras model to the end, resuming exactly wherever it stopped.

        Args:
            build_model: returns a compiled ``keras.Model``; called inside a
                fresh ``strategy.scope()`` at every start and recovery.
            make_dataset: ``make_dataset(epoch)`` returns a ``tf.data.Dataset``
                of global batches, the same for the same epoch. It may take a
                ``skip`` keyword to skip batches cheaply, index-first.
            epochs: total epochs of the run.
            steps_per_epoch: batches per epoch.
            callbacks: Keras callbacks; ``on_train_begin``/``on_train_end``
                are delivered once per run, as in ``model.fit``, and their
                state is carried across restarts (built-in callbacks, and
                yours through ``get_resume_state``/``set_resume_state``).
            verbose: passed to ``model.fit``.
            validation_data: a ``tf.data.Dataset`` (or ``(x, y)``) to
                evaluate on at the end of each epoch, or a callable
                ``validation_data(epoch)`` returning one.
            validation_steps: batches of validation data per evaluation.
            validation_freq: evaluate every this many epochs.
            class_weight: class index -> loss weight, as in ``model.fit``.
            extra_state: more to save with the model, by name: state your
                training changes that the model does not reach (a
                ``tf.random.Generator`` your data augmentation draws from, a
                variable). The same names must be passed on every run; a
                mismatch names them.

        Returns:
            A ``keras.callbacks.History`` covering the whole run, across
            restarts. The trained model is :attr:`model`.
        """
        driver = KerasFit(
            build_model,
            make_dataset,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            callbacks=callbacks,
            verbose=verbose,
            validation_data=validation_data,
            validation_steps=validation_steps,
            validation_freq=validation_freq,
            class_weight=class_weight,
            warn=lambda message: self.events.emit(
                "fit.warning", message, level="warning"
            ),
            reset_fingerprints=self.options.reset_data_fingerprints,
            events=self.events,
            extra_state=extra_state,
        )
        self._drive(driver, lambda start, duties: driver.train(start, duties))
        self.model = driver.model
        driver.history.set_model(driver.model)
        return driver.history

    def run(
        self,
        build_state: Callable[[], dict[str, Any]],
        make_dataset: Callable[..., Any],
        train_step: Callable[[dict[str, Any], Any], Any],
        *,
        total_steps: int,
        steps_per_epoch: int,
    ) -> dict[str, Any]:
        """Run a custom training loop with the same guarantees as :meth:`fit`.

        See :mod:`colab_resume.agent.custom_loop` for the three functions.

        Returns:
            The state dict from ``build_state``, trained (also :attr:`state`).
        """
        driver = CustomLoop(
            build_state,
            make_dataset,
            train_step,
            total_steps=total_steps,
            steps_per_epoch=steps_per_epoch,
            reset_fingerprints=self.options.reset_data_fingerprints,
            events=self.events,
        )
        self._drive(
            driver, lambda start, duties: driver.train(start, duties, self.connect())
        )
        self.state = driver.state
        return driver.state

    # --- steering (any thread; acted on between steps) --------------------------------

    def save_now(self) -> None:
        """Checkpoint at the next step boundary."""
        self.controls.request_save()

    def pause(self) -> None:
        """Checkpoint and hold at the next step boundary (heartbeats go on)."""
        self.controls.pause()

    def resume(self) -> None:
        self.controls.resume()

    def stop(self) -> None:
        """Checkpoint and stop cleanly at the next step boundary."""
        self.controls.stop()

    def panel(self) -> Any:
        """The notebook panel (an ipywidgets widget): display it before or
        during ``fit``. It refreshes once a second from the training loop, and
        its buttons (checkpoint now, pause/resume, stop) work while the cell
        runs. Outside a notebook it is inert."""
        from colab_resume.panel.live import agent_panel

        return agent_panel(self)

    def status(self) -> RunStatus:
        """The run's status as anyone would read it from storage."""
        return read_status(self.storage)

    # --- the outer loop ---------------------------------------------------------------

    def _drive(self, driver: Any, train: Callable[[int, StepDuties], None]) -> None:
        strategy = self.connect()
        self.controls.reset()
        done = self._completed_record()
        if done is not None and not _asks_for_more(done, driver.total_steps):
            self._load_completed(driver, strategy, done)
            return
        session, manager = self._take_run()
        if done is not None:
            self._reopen_completed(done, driver.total_steps)
        self.telemetry.session_started(
            driver.total_steps, getattr(driver, "steps_per_epoch", None)
        )
        try:
            with _graceful_sigterm(self.controls):
                self._train_with_recovery(driver, train, session, manager)
            self._finish(driver.total_steps, session, manager)
        except BaseException as exc:
            self._fail(exc, session, manager)
            raise
        finally:
            with contextlib.suppress(Exception):
                manager.close()
            self.telemetry.finish()

    def _take_run(self) -> tuple[RunSession, CheckpointManager]:
        session = RunSession.open(
            self.storage,
            SessionOptions(
                heartbeat_seconds=self.options.heartbeat_seconds,
                dead_after_seconds=self.options.dead_after_seconds,
                stall_after_seconds=self.options.stall_after_seconds,
                takeover=self.options.takeover,
                expected_run_id=self.options.run_id,
            ),
            events=self.events,
        )
        connection = self.connection
        session.update(accelerator=connection.label if connection else None)
        manager = CheckpointManager(
            self.storage,
            lease=session.lease,
            fence=session.fence,
            events=self.events,
            keep=self.options.keep,
            keep_every_steps=self.options.keep_every_steps,
            io_device=connection.io_device if connection else None,
        )
        self.session, self.checkpoints = session, manager
        return session, manager

    def _fail(
        self, exc: BaseException, session: RunSession, manager: CheckpointManager
    ) -> None:
        if isinstance(exc, FencedError):
            session.close("fenced")
            return
        self._last_save_if_safe(manager)
        if isinstance(exc, KeyboardInterrupt):
            session.close("stopped")
        else:
            session.close("failed", error=f"{type(exc).__name__}: {exc}")

    # --- the lighter path: your own model.fit -----------------------------------------

    def restore(
        self,
        model: Any,
        *,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
    ) -> StartPoint:
        """Take the run and load its newest checkpoint into ``model``.

        For the lighter path (see :mod:`colab_resume.agent.callback`): build
        and compile ``model`` in your strategy scope, call this, then
        ``model.fit(..., initial_epoch=start.initial_epoch,
        callbacks=[agent.callback()])`` — once, or once per training phase.
        No in-session recovery.

        Args:
            model: your compiled ``keras.Model``.
            epochs: the epochs of the whole run, over every ``model.fit``
                call; ``DONE.json`` is written when a ``fit`` ends this
                epoch. None: the first ``fit`` that returns normally
                completes the run.
            steps_per_epoch: batches of a whole epoch. None: as saved in the
                checkpoint, else the first ``fit``'s.

        Returns:
            Where the model stands: ``step``, ``initial_epoch``, ``skip``.

        Raises:
            ValueError: ``epochs`` or ``steps_per_epoch`` is not an int >= 1.
        """
        for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"{name} must be an int >= 1 or None, got {value!r}; e.g. "
                    f"agent.restore(model, epochs=10) for a run of 10 epochs over "
                    f"all your model.fit calls."
                )
        self.controls.reset()
        session, manager = self._take_run()
        total = epochs * steps_per_epoch if epochs and steps_per_epoch else None
        self.telemetry.session_started(total, steps_per_epoch)
        driver = ModelState(model, epochs=epochs, steps_per_epoch=steps_per_epoch)
        try:
            info = manager.restore(model)
        except BaseException as exc:
            self._fail(exc, session, manager)
            raise
        start = info.step if info else 0
        self.model = model
        self._duties = self._make_duties(driver, session, manager, start)
        self._light = driver
        if info is None:
            return StartPoint(step=0, initial_epoch=0, skip=0)
        return driver.start_point(info.step, info.epoch, info.extras)

    def callback(self) -> Any:
        """A Keras callback: checkpoints and heartbeats for your own ``model.fit``.

        Give each ``model.fit`` call its own. A ``fit`` that raises closes
        the session as failed.

        Raises:
            RuntimeError: :meth:`restore` was not called first, or the
                session it opened has ended.
        """
        driver = self._light
        if driver is None or self._duties is None:
            raise RuntimeError(
                "agent.callback() needs agent.restore(model) first: restore takes "
                "the run and loads the newest checkpoint into your model."
            )
        if driver.ended:
            raise RuntimeError(
                "the session agent.restore(model) opened has ended (the run "
                "completed, stopped or failed); call agent.restore(model) again "
                "to continue it."
            )
        session, manager = self.session, self.checkpoints
        assert session is not None and manager is not None
        duties = self._duties
        lock = threading.Lock()  # the fit-watch thread may end it too

        def end(closing: Callable[[], None]) -> None:
            with lock:
                if driver.ended:
                    return
                driver.ended = True
            try:
                closing()
            finally:
                self.telemetry.finish()
                with contextlib.suppress(Exception):
                    manager.close()

        def finish() -> None:
            total = driver.epochs * driver.steps_per_epoch if driver.epochs else None
            end(lambda: self._finish(total, session, manager))

        def pause_between() -> None:
            # Another fit follows: leave its start committed, keep beating.
            duties.save(duties.step, reason="fit_end")

        def abort(reason: str) -> None:
            end(lambda: session.close("failed", error=reason))

        return make_callback(driver, duties, finish, pause_between, abort)

    def _train_with_recovery(
        self,
        driver: Any,
        train: Callable[[int, StepDuties], None],
        session: RunSession,
        manager: CheckpointManager,
    ) -> None:
        while True:
            strategy = self.accelerator.strategy
            try:
                with strategy.scope():
                    driver.build()
                info = manager.restore(driver.state)
                start = driver.restored(info)
                self._duties = self._make_duties(driver, session, manager, start)
                session.update(state="training", step=start)
                if start < driver.total_steps:
                    train(start, self._duties)
                return
            except Exception as exc:
                if not is_accelerator_loss(exc):
                    raise
                if self.recoveries >= self.options.max_recoveries:
                    self.events.emit(
                        "recovery.gave_up",
                        f"accelerator lost again after {self.recoveries} recoveries",
                        level="error",
                    )
                    raise
                self._recover(exc, session, manager)

    def _recover(
        self, exc: BaseException, session: RunSession, manager: CheckpointManager
    ) -> None:
        self.recoveries += 1
        step = self._duties.step if self._duties else None
        session.update(state="recovering")
        self.events.emit(
            "recovery.started",
            f"accelerator lost ({type(exc).__name__}: {str(exc)[:200]}); "
            f"recovery {self.recoveries} of {self.options.max_recoveries}",
            level="warning",
            step=step,
        )
        # The upload in flight is host-side work: let it commit, so the
        # restore below loses as little as possible.
        manager.wait()
        with contextlib.suppress(Exception):
            manager.check()
        time.sleep(self.options.recovery_backoff_seconds * 2 ** (self.recoveries - 1))
        self.accelerator.reconnect()
        self.events.emit(
            "recovery.reconnected",
            "reconnected; rebuilding in a fresh strategy scope and restoring",
            step=step,
        )

    def _make_duties(
        self, driver: Any, session: RunSession, manager: CheckpointManager, start: int
    ) -> StepDuties:
        age = vm_age()
        triggers = SaveTriggers(
            TriggerOptions(
                every_steps=self.options.save_every_steps,
                every_seconds=self.options.save_every_seconds,
                lifetime_seconds=self.options.lifetime_seconds,
                boot_time=time.time() - age.seconds if age else None,
            ),
            start_step=start,
        )
        duties = StepDuties(
            session=session,
            manager=manager,
            triggers=triggers,
            controls=self.controls,
            events=self.events,
            snapshot=driver.snapshot,
            tick=self.telemetry.tick,
        )
        duties.step = start
        return duties

    def _finish(
        self, total_steps: int | None, session: RunSession, manager: CheckpointManager
    ) -> None:
        """Final checkpoint, wait for its commit, then DONE.json (or 'stopped')."""
        duties = self._duties
        assert duties is not None
        duties.save(duties.step, reason="final")
        manager.wait()
        manager.check()
        stopped = self.controls.stop_requested and (
            total_steps is None or duties.step < total_steps
        )
        if stopped:
            session.close("stopped")
            self.events.emit(
                "run.stopped", f"stopped at step {duties.step}", step=duties.step
            )
        else:
            session.complete({"final_step": duties.step, "planned_steps": total_steps})

    def _last_save_if_safe(self, manager: CheckpointManager) -> None:
        """After an error: save the last complete step, if it is not half-applied."""
        duties = self._duties
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

    def _completed_record(self) -> dict[str, Any] | None:
        """DONE.json, or None while the run has not finished."""
        try:
            return self.storage.read_json(rundir.DONE_RECORD)
        except FileNotFoundError:
            return None
        except CorruptRecordError:
            return {}  # finished, with its plan unreadable: never extended

    def _reopen_completed(self, done: dict[str, Any], total_steps: int) -> None:
        """A finished run asked for more steps: it is training again."""
        self.storage.delete(rundir.DONE_RECORD)
        self.events.emit(
            "run.extended",
            f"the run had completed at step {done.get('final_step')}; continuing "
            f"from its final state to step {total_steps}",
            step=done.get("final_step"),
        )

    def _load_completed(
        self, driver: Any, strategy: Any, done: dict[str, Any] | None = None
    ) -> None:
        """The run finished before: rebuild and restore the final state."""
        with strategy.scope():
            driver.build()
        reader = CheckpointManager(
            self.storage,
            lease=max([1] + [number for number, _ in read_leases(self.storage)]),
            fence=_never_write,
            events=self.events,
        )
        try:
            driver.restored(reader.restore(driver.state))
        finally:
            reader.close()
        self.events.emit(
            "run.already_completed", _completed_message(done or {}, driver.total_steps)
        )

    def _storage_retried(
        self, operation: str, attempt: int, exc: BaseException, delay: float
    ) -> None:
        self.events.emit(
            "storage.retry",
            f"{operation}: {type(exc).__name__}: {str(exc)[:200]}; retry {attempt} "
            f"in {delay:.1f}s",
            level="warning",
        )


def _asks_for_more(done: dict[str, Any], total_steps: int | None) -> bool:
    """True when a finished run that reached its planned end is asked to go on."""
    final = done.get("final_step")
    planned = done.get("planned_steps", final)  # older records: the final step
    return (
        isinstance(final, int)
        and isinstance(planned, int)
        and isinstance(total_steps, int)
        and final == planned
        and total_steps > planned
    )


def _completed_message(done: dict[str, Any], total_steps: int | None) -> str:
    final = done.get("final_step")
    planned = done.get("planned_steps", final)
    if isinstance(final, int) and isinstance(planned, int) and final < planned:
        return (
            f"the run had finished at step {final} of {planned} (a callback such "
            f"as EarlyStopping ended it); restored its final state"
        )
    if isinstance(final, int) and isinstance(total_steps, int) and total_steps < final:
        return (
            f"the run had completed at step {final}; asked for {total_steps} steps, "
            f"it cannot go back: restored its final state (step {final})"
        )
    return "the run had completed; restored its final state"


def _never_write() -> None:
    raise FencedError("this reader of a completed run never writes")


@contextlib.contextmanager
def _graceful_sigterm(controls: Controls) -> Iterator[None]:
    """SIGTERM asks for a clean stop (checkpoint first) instead of killing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        log.warning("SIGTERM: checkpointing and stopping at the next step")
        controls.stop()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
