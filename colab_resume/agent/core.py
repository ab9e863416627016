"""The Agent: the public face of a run that survives the hardware vanishing.

``Agent`` is thin: it validates options, owns the run directory's storage,
the events and the accelerator, and hands each ``fit``/``run`` call to the
outer loop (:mod:`~colab_resume.agent.loop`) with a driver
(:mod:`~colab_resume.agent.keras_fit`, :mod:`~colab_resume.agent.custom_loop`).
The lighter path (:mod:`~colab_resume.agent.callback`) is the loop's
:meth:`~colab_resume.agent.loop.RunLoop.open_light`.

What users need is public: the run's ``events``, ``connection``,
``model``/``state``, ``stopped``, ``recoveries``, ``options`` and
``run_dir``, and the methods. The parts (storage, controls, accelerator,
the console, the loop) are private: reach them only through the methods.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from colab_resume.agent import multihost, panel_maker
from colab_resume.agent.callback import ModelState, StartPoint
from colab_resume.agent.console import ConsoleSink
from colab_resume.agent.controls import Controls
from colab_resume.agent.custom_loop import CustomLoop
from colab_resume.agent.keras_fit import KerasFit
from colab_resume.agent.light import LightSession
from colab_resume.agent.loop import RunLoop
from colab_resume.agent.options import agent_options
from colab_resume.agent.progress import Progress
from colab_resume.agent.steps import (
    LIGHT_PATH_REFUSED,
    PAUSE_REFUSED,
    StepHook,
)
from colab_resume.backend.accelerator import Accelerator
from colab_resume.backend.current import check_supported as check_supported_backend
from colab_resume.backend.current import current as current_backend
from colab_resume.backend.current import is_jax
from colab_resume.events import EventLog
from colab_resume.exit_status import (
    NAMES,
    PREEMPTED,
    Preempted,
    in_kernel,
)
from colab_resume.heartbeat import RunStatus, read_status
from colab_resume.launch.identity import run_dir_from_environment
from colab_resume.launch.teardown import run_teardown
from colab_resume.report.goodput import Goodput, read_goodput
from colab_resume.runtime import Connection
from colab_resume.runtime.errors import ConnectOptionError
from colab_resume.storage import Storage
from colab_resume.storage.faults import brief
from colab_resume.validate import check_int

log = logging.getLogger(__name__)

_PREEMPTED = NAMES[PREEMPTED]


class Agent:
    """Makes a training run survive the hardware vanishing under it.

    Use it as a context manager (``with cr.Agent(...) as agent:``) or call
    :meth:`close` when done: a session the lighter path left open stops
    beating and its staging files go.

    Args:
        run_dir: where the run lives: ``gs://bucket/runs/name``, a local
            path, or any fsspec URL. None: from the launcher's environment
            (``COLAB_RESUME_RUN_DIR``, ``AIP_CHECKPOINT_DIR``,
            ``SKYPILOT_TASK_ID`` under ``COLAB_RESUME_BASE_DIR``; see
            :mod:`colab_resume.launch.identity`).
        **options: the fields of :class:`AgentOptions` — ``save_every_steps``,
            ``save_every_seconds``, ``keep``, ``heartbeat_seconds``,
            ``dead_after_seconds``, ``takeover``, ``storage_options``,
            ``prefer``, ``cpu_replicas``, ``precision``...

    Attributes:
        options: the validated :class:`AgentOptions`.
        run_dir: the run directory, as given.
        events: the run's events (``events.recent(kind=...)``,
            ``events.subscribe(sink)``).
        model: the trained (or restored) Keras model, after :meth:`fit` or
            :meth:`restore`.
        state: the trained state dict, after :meth:`run`.

    Raises:
        ValueError: a bad option (the message names it and the fix).
        UnsupportedURLError: ``run_dir`` has a scheme we cannot open.
        UnsupportedBackendError: Keras uses a backend other than TensorFlow
            or JAX (``KERAS_BACKEND=torch``).
        NoRunDirError: no ``run_dir``, and the environment names none.

    Exits:
        In a script (see ``exit_on_preemption``), ``fit`` and ``run`` raise
        :class:`~colab_resume.Preempted` (exit status 143) after the final
        checkpoint of a run that SIGTERM or a preemption notice ended: a
        launcher restarts it. A completed run returns (0 when the script
        ends); so does one :meth:`stop` ended (``agent.stopped``;
        ``sys.exit(cr.exit_code(agent))`` exits 5); an error propagates (1).
    """

    def __init__(self, run_dir: str | None = None, **options: Any) -> None:
        self.options = agent_options(**options)
        check_supported_backend()  # before anything is written or connected
        if self.options.connect.strategy is not None and is_jax():
            raise ConnectOptionError(
                "strategy= is a tf.distribute strategy, and Keras runs on JAX "
                "here. Set your keras.distribution instead (e.g. "
                "keras.distribution.set_distribution(ModelParallel(...))): the "
                "agent keeps it."
            )
        identity = None if run_dir is not None else run_dir_from_environment()
        self.run_dir = identity.run_dir if identity is not None else str(run_dir)
        self.events = EventLog()
        # Where the run stands, in the cell, until a panel shows it instead.
        self._console = ConsoleSink()
        self.events.subscribe(self._console)
        if identity is not None:
            self.events.emit(
                "run.identity", identity.describe(), source=identity.source
            )
        self._storage = Storage(
            self.run_dir,
            self.options.storage_options,
            retry=self.options.storage_retry,
            on_retry=self._storage_retried,
        )
        self._apply_store_pace(options)
        self._controls = Controls()
        self._accelerator = Accelerator(
            self.options.connect,
            events=self.events,
        )
        self._loop = RunLoop(
            self._storage, self.options, self._accelerator, self._controls, self.events
        )
        # Before anything touches JAX's devices: jax.distributed first.
        self._loop.multihost = multihost.start(
            self._storage,
            self.options.cluster,
            self.events,
            cpu_devices=self.options.connect.cpu_replicas,
            prefer=self.options.connect.prefer,
        )
        if self._loop.multihost is not None:
            self._loop.multihost.agree_settings(
                multihost.start_settings(self._storage, self.options)
            )
        self.model: Any = None
        self.state: dict[str, Any] | None = None
        self._light: LightSession | None = None  # the restore()/callback() path

    def _apply_store_pace(self, given: dict[str, Any]) -> None:
        """Beat at the store's own pace (Drive: slower) unless the user chose one."""
        pace = self._storage.store.heartbeat_seconds
        if pace is None or "heartbeat_seconds" in given:
            return
        try:
            session = dataclasses.replace(self.options.session, heartbeat_seconds=pace)
        except ValueError:  # a dead_after_seconds set for the faster beat
            return
        object.__setattr__(self.options, "session", session)

    # --- the accelerator --------------------------------------------------------------

    def connect(self) -> Any:
        """Connect to the accelerator (once); returns the ``tf.distribute.Strategy``."""
        return self._loop.connect()

    @property
    def connection(self) -> Connection | None:
        """The accelerator connected to (its ``label``, ``strategy``...);
        None before :meth:`connect`."""
        return self._loop.connection

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
                of global batches (TensorFlow), or NumPy batches (a list or
                generator of ``(x, y)`` tuples, or a ``keras.utils.PyDataset``;
                either backend), the same for the same epoch. It may take a
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
            restarts; its ``stopped`` is True when :meth:`stop` (or SIGTERM)
            ended it before its end. The trained model is :attr:`model`.
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
            warn=self._warn,
            reset_fingerprints=self.options.reset_data_fingerprints,
            events=self.events,
            extra_state=extra_state,
        )
        self._drive(driver)
        self.model = driver.model
        # Keras-like, yet testable: a History that ended on stop() says so.
        driver.history.stopped = self._loop.stopped
        driver.history.set_model(driver.model)
        self._ended()
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
            warn=self._warn,
        )
        self._drive(driver)
        self.state = driver.state
        self._ended()
        return driver.state

    # --- steering (any thread; acted on between steps) --------------------------------

    def save_now(self) -> None:
        """Checkpoint at the next step boundary."""
        self._controls.request_save()

    def pause(self) -> None:
        """Checkpoint and hold at the next step boundary (heartbeats go on).

        Raises:
            RuntimeError: in a multi-process run (the others would wait in
                their next collective): use :meth:`stop` there.
        """
        if self._loop.multihost is not None:
            raise RuntimeError(PAUSE_REFUSED)
        self._controls.pause()

    def resume(self) -> None:
        self._controls.resume()

    def stop(self) -> None:
        """Checkpoint and stop cleanly at the next step boundary."""
        self._controls.stop()

    def panel(self) -> Any:
        """The notebook panel (an ipywidgets widget): display it before or
        during ``fit``. It refreshes once a second from the training loop, and
        its buttons (checkpoint now, pause/resume, stop) work while the cell
        runs. Outside a notebook it is inert."""
        return panel_maker.make(self, self._storage, self._console)

    def status(self) -> RunStatus:
        """The run's status as anyone would read it from storage."""
        return read_status(self._storage)

    def goodput(self) -> Goodput:
        """The run's goodput across all its sessions, and what cost the rest.

        Read from the run directory (every session's records), with this
        session's own tally as measured now. ``print(agent.goodput().one_line())``;
        ``.table()`` for every bucket and the best fixed cadence. See
        :mod:`colab_resume.report.goodput`.
        """
        return read_goodput(self._storage, self._loop.measured())

    # --- what is happening (read only) -----------------------------------------------

    def progress(self) -> Progress:
        """Where the agent stands now: state, step, metrics, last checkpoint..."""
        return self._loop.progress_now()

    def on_progress(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` at every once-a-second tick of the training loop
        (on its thread); returns a function that removes it."""
        return self._loop.on_progress(listener)

    def on_step(self, hook: StepHook) -> Callable[[], None]:
        """Call ``hook(step)`` after every step, once the agent's own duties for
        it (heartbeat, checkpoint) are done; an exception it raises ends
        training like one raised by the step. Returns a function that removes
        it."""
        return self._loop.on_step(hook)

    def flush_history(self, timeout: float = 10.0) -> None:
        """Write the run history recorded so far to the run directory now."""
        self._loop.flush_history(timeout)

    @property
    def stopped(self) -> bool:
        """The last ``fit``/``run`` ended on :meth:`stop` (or SIGTERM) before its
        planned end: the model is not fully trained; run it again to continue."""
        return self._loop.stopped

    @property
    def outcome(self) -> str | None:
        """How the last ``fit``/``run`` ended: ``"COMPLETED"``, ``"STOPPED"``,
        ``"PREEMPTED"`` or ``"FAILED"`` (None before one ended);
        ``cr.exit_code(agent)`` is its exit status."""
        return self._loop.outcome

    @property
    def recoveries(self) -> int:
        """Accelerator losses recovered in this process."""
        return self._loop.recoveries

    # --- resources --------------------------------------------------------------------

    def close(self) -> None:
        """End what this agent holds: a session the lighter path left beating
        is closed as stopped (the next run takes it over at once), the upload
        in flight is finished. Idempotent; ``fit`` and ``run`` close their own."""
        self._loop.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A run that ended early on purpose is no failure of the session.
        self._loop.close(None if isinstance(exc, Preempted) else exc)

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
            RuntimeError: in a multi-process run (the user's own ``fit``
                would get every process's data unsplit; use :meth:`fit` or
                :meth:`run`).
        """
        if self._loop.multihost is not None:
            raise RuntimeError(LIGHT_PATH_REFUSED)
        for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
            check_int(
                name,
                value,
                optional=True,
                hint="E.g. agent.restore(model, epochs=10) for a run of 10 epochs "
                "over all your model.fit calls.",
            )
        # Before taking the run: a missing install fails nothing.
        current_backend().require()
        driver = ModelState(model, epochs=epochs, steps_per_epoch=steps_per_epoch)
        self._light = self._loop.open_light(driver)
        self.model = model
        return self._light.start

    def callback(self) -> Any:
        """A Keras callback: checkpoints and heartbeats for your own ``model.fit``.

        Give each ``model.fit`` call its own. A ``fit`` that raises closes
        the session as failed.

        Raises:
            RuntimeError: :meth:`restore` was not called first, or the
                session it opened has ended.
        """
        if self._light is None:
            raise RuntimeError(
                "agent.callback() needs agent.restore(model) first: restore takes "
                "the run and loads the newest checkpoint into your model."
            )
        return self._light.callback()

    def _drive(self, driver: Any) -> None:
        try:
            self._loop.drive(driver)
        except BaseException:
            if self._loop.outcome is not None:  # FAILED; never a Ctrl-C
                self._tear_down()
            raise

    def _ended(self) -> None:
        """After ``fit``/``run`` returned: the teardown, then the exit status."""
        self._tear_down()
        outcome = self._loop.outcome
        exits = self.options.exit_on_preemption
        if exits is None:
            exits = not in_kernel()
        if not exits or outcome != _PREEMPTED:
            return  # stop() returns: someone asked, nothing to restart
        step, reason = self._loop.ended_at
        raise Preempted(step, reason or "preempted")

    def _tear_down(self) -> None:
        outcome = self._loop.outcome
        if outcome is None or self.options.on_done is None:
            return
        step, _ = self._loop.ended_at
        run_teardown(
            self.options.on_done,
            outcome,
            {"run_dir": self.run_dir, "step": step},
            say=self._warn,
        )

    def _warn(self, message: str) -> None:
        self.events.emit("fit.warning", message, level="warning")

    def _storage_retried(
        self, operation: str, attempt: int, exc: BaseException, delay: float
    ) -> None:
        self.events.emit(
            "storage.retry",
            f"{operation}: {brief(exc)}; retry {attempt} in {delay:.1f}s",
            level="warning",
        )
